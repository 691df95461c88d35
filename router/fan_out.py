"""FanOut: who receives a message published on a topic, one target per subscribing client.

A client may hold several subscriptions matching one topic name (`a/+` and `a/#`). It gets
the message once [MQTT-3.3.5-1], so the routes of all its matching filters are merged into
one `Target`:
- `qos`: the highest QoS granted over those subscriptions; the dispatcher caps it by the
  message's QoS [MQTT-3.3.5-1];
- `own_qos`: the same over the subscriptions without No Local: a client's own message goes
  to it only through those (-1: none) [MQTT-3.8.3-3];
- `retain_as_published`: set if any of them asked for it, so a live delivery keeps the
  message's RETAIN flag [MQTT-3.3.1-12];
- `subscription_ids`: the identifiers of every matching subscription that has one, all sent
  with the one PUBLISH (MQTT 5.0 section 3.3.4, overlapping subscriptions);
- `persistent`: whether the client's session is persistent (its QoS 1/2 deliveries are
  stored before the publisher's acknowledgement).

This plan is the publish path's one cache: `FanOut.plan` keeps the plan of each topic name
until the route table changes (its `version` moves), at most `cache_size` names (emptied
when full, which costs nothing per hit) and only names up to `MAX_CACHED_NAME_LENGTH`
characters, so hostile long names cannot fill memory. A plan is an immutable tuple: a
publisher may hold it across greenlet switches while the router changes the table.

Shared subscriptions (`router.shared`) are not in the plan: a share group gets one member
per message, picked at publish time. `FanOut.shared_plan` gives the groups matching a topic
name, cached the same way beside the plans (invalidated by the share table's `version`).
While the broker has no share group at all it answers an empty tuple without a lookup, so
topics without shared subscribers cost nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from core.session_state import SubscriptionOptions
from router.route_table import RouteTable
from router.shared import SharedSubscriptions, ShareGroup

DEFAULT_CACHE_SIZE = 4096  # topic names whose plan is kept until the route table changes
MAX_CACHED_NAME_LENGTH = 512


@dataclass(frozen=True, slots=True)
class Route:
    """What the route table holds for one (topic filter, client id)."""

    session: Any  # the ActorRef of the client's SessionActor (hashable)
    options: SubscriptionOptions
    persistent: bool = False  # QoS 1/2 deliveries to it are stored before the publisher's ack


class Target(NamedTuple):
    """One subscribing client of a topic, merged over all its matching subscriptions."""

    client_id: str
    session: Any
    qos: int  # highest granted QoS over its matching subscriptions
    own_qos: int  # the same over those without No Local (for its own messages); -1: none
    retain_as_published: bool
    subscription_ids: tuple[int, ...]
    persistent: bool


Plan = tuple[Target, ...]


def make_plan(matches: Iterable[tuple[str, Mapping[str, Route]]]) -> Plan:
    """Merge the (filter, {client id: route}) pairs matching one topic into a target per
    client, in the order clients first appear."""
    merged: dict[str, Target] = {}
    for _topic_filter, subscribers in matches:
        for client_id, route in subscribers.items():
            options = route.options
            own_qos = -1 if options.no_local else options.qos
            ids = (options.subscription_id,) if options.subscription_id else ()
            known = merged.get(client_id)
            if known is None:
                merged[client_id] = Target(
                    client_id,
                    route.session,
                    options.qos,
                    own_qos,
                    options.retain_as_published,
                    ids,
                    route.persistent,
                )
            else:
                merged[client_id] = known._replace(
                    qos=max(known.qos, options.qos),
                    own_qos=max(known.own_qos, own_qos),
                    retain_as_published=known.retain_as_published or options.retain_as_published,
                    subscription_ids=known.subscription_ids + ids,
                )
    return tuple(merged.values())


class FanOut:
    """The plan of each topic name over `routes`, cached until the table changes."""

    __slots__ = (
        "_cache_size",
        "_groups",
        "_groups_version",
        "_plans",
        "_routes",
        "_shares",
        "_version",
    )

    def __init__(
        self,
        routes: RouteTable[str, Route],
        cache_size: int = DEFAULT_CACHE_SIZE,
        shares: SharedSubscriptions | None = None,
    ) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, got {cache_size}")
        self._routes = routes
        self._cache_size = cache_size
        self._plans: dict[str, Plan] = {}
        self._version = routes.version
        self._shares = SharedSubscriptions() if shares is None else shares
        self._groups: dict[str, tuple[ShareGroup, ...]] = {}
        self._groups_version = self._shares.version

    def plan(self, topic: str) -> Plan:
        """The targets of a message published on the valid topic name `topic`."""
        version = self._routes.version
        if version != self._version:
            self._plans.clear()
            self._version = version
        plan = self._plans.get(topic)
        if plan is None:
            plan = make_plan(self._routes.match(topic))
            if len(topic) <= MAX_CACHED_NAME_LENGTH:
                if len(self._plans) >= self._cache_size:
                    self._plans.clear()
                self._plans[topic] = plan
        return plan

    def shared_plan(self, topic: str) -> tuple[ShareGroup, ...]:
        """The share groups of a message published on the valid topic name `topic`."""
        shares = self._shares
        if not shares.group_count:
            return ()
        version = shares.version
        if version != self._groups_version:
            self._groups.clear()
            self._groups_version = version
        groups = self._groups.get(topic)
        if groups is None:
            groups = shares.match(topic)
            if len(topic) <= MAX_CACHED_NAME_LENGTH:
                if len(self._groups) >= self._cache_size:
                    self._groups.clear()
                self._groups[topic] = groups
        return groups
