"""Shared subscriptions (`$share/{group}/{filter}`, MQTT 5.0 section 4.8.2): the share groups.

A shared subscription `$share/g/f` makes its client a member of the share group (g, f): a
message matching `f` goes to ONE member of each group, while every ordinary subscription
still gets its own copy. 3.1.1 clients may use the same syntax (as in EMQX and Mosquitto).

- `parse_shared` splits and checks a filter: the Share Name is at least one character and
  holds no `/`, `+` or `#` [MQTT-4.8.2-1] [MQTT-4.8.2-2]; the filter after it is a valid,
  non-empty topic filter. A bad one is a TopicError (SUBACK 0x8F, Topic Filter invalid).
- `SharedSubscriptions` is the table beside the route table (`router.route_table`): the
  inner filters in their own `RouteTable`, each filter holding {group name: ShareGroup}.
  A `ShareGroup` is immutable (its members a tuple, replaced on every change), so a
  publisher may keep what `match` returned across greenlet switches, as with the route
  table. It has the route table's writer (`actors.router_actor.RouteWriter`).

Which member gets a message is `router.share_strategy`'s business; what happens to the
messages of a member that leaves is the session's (`actors.session_actor`, redispatch).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from mqtt.topics import TopicError, validate_topic_filter
from router.route_table import RouteTable

SHARE_PREFIX = "$share/"


def is_shared(topic_filter: str) -> bool:
    return topic_filter.startswith(SHARE_PREFIX)


def parse_shared(topic_filter: str) -> tuple[str, str]:
    """(share name, topic filter) of `$share/{group}/{filter}`; TopicError if malformed."""
    if not is_shared(topic_filter):
        raise TopicError(f"{topic_filter!r} is not a shared subscription ($share/group/filter)")
    group, slash, inner = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not group or "+" in group or "#" in group:
        raise TopicError(
            f"shared subscription {topic_filter!r}: the share name must be at least one "
            "character without '/', '+' or '#' [MQTT-4.8.2-1] [MQTT-4.8.2-2]"
        )
    if not slash or not inner:
        raise TopicError(
            f"shared subscription {topic_filter!r} has no topic filter after the share name "
            "[MQTT-4.8.2-1]"
        )
    validate_topic_filter(inner)
    return group, inner


def inner_filter(topic_filter: str) -> str:
    """The filter a subscription reads: the part after the share name of a valid
    `$share/{group}/{filter}`, else `topic_filter` itself."""
    if is_shared(topic_filter):
        try:
            return parse_shared(topic_filter)[1]
        except TopicError:
            return topic_filter
    return topic_filter


class ShareMember(NamedTuple):
    client_id: str
    route: Any  # router.fan_out.Route: the member's session, options and persistence
    # The worker process the member's session lives on (the router actor's worker id; 0
    # with one process), which the `local` strategy compares. In a pool the dispatcher also
    # picks among stand-ins for other workers' members: `route` None, `client_id`
    # `router.share_replica.stand_in(worker)`.
    worker: int = 0


class ShareGroup(NamedTuple):
    """One share group: its name, the filter its members share, and the members in the
    order they joined (a member that re-subscribes keeps its place)."""

    group: str
    topic_filter: str
    members: tuple[ShareMember, ...]

    def member(self, client_id: str) -> ShareMember | None:
        for member in self.members:
            if member.client_id == client_id:
                return member
        return None


class SharedSubscriptions:
    """The share groups of the broker: inner topic filter -> {share name: ShareGroup}."""

    __slots__ = ("_groups", "group_count")

    def __init__(self) -> None:
        self._groups: RouteTable[str, ShareGroup] = RouteTable()
        # The number of share groups, as a plain attribute: the publish path reads it for
        # every message and skips shared subscriptions while it is 0.
        self.group_count = 0

    def __len__(self) -> int:
        return self.group_count

    @property
    def version(self) -> int:
        """Grows on every change (the fan-out plan cache is invalidated by it)."""
        return self._groups.version

    def group(self, group: str, topic_filter: str) -> ShareGroup | None:
        return self._groups.subscribers(topic_filter).get(group)

    def add(self, shared_filter: str, client_id: str, route: Any, worker: int = 0) -> bool:
        """Make `client_id` a member of the group of `shared_filter` (or update its route);
        True if it was not a member. Raises TopicError if the filter is malformed."""
        group_name, topic_filter = parse_shared(shared_filter)
        current = self.group(group_name, topic_filter)
        new_member = ShareMember(client_id, route, worker)
        if current is None:
            members: tuple[ShareMember, ...] = (new_member,)
        elif current.member(client_id) is None:
            members = (*current.members, new_member)
        else:
            members = tuple(
                new_member if member.client_id == client_id else member
                for member in current.members
            )
        self._groups.add(topic_filter, group_name, ShareGroup(group_name, topic_filter, members))
        self.group_count = len(self._groups)
        return current is None or current.member(client_id) is None

    def member_route(self, shared_filter: str, client_id: str) -> Any:
        """The route of `client_id` in the group of `shared_filter`, or None (also for a
        malformed filter, which no group has)."""
        try:
            group_name, topic_filter = parse_shared(shared_filter)
        except TopicError:
            return None
        current = self.group(group_name, topic_filter)
        member = None if current is None else current.member(client_id)
        return None if member is None else member.route

    def remove(self, shared_filter: str, client_id: str) -> bool:
        """Take `client_id` out of the group; False if it was not a member. An emptied
        group is gone."""
        try:
            group_name, topic_filter = parse_shared(shared_filter)
        except TopicError:
            return False
        current = self.group(group_name, topic_filter)
        if current is None or current.member(client_id) is None:
            return False
        members = tuple(m for m in current.members if m.client_id != client_id)
        if members:
            self._groups.add(
                topic_filter, group_name, ShareGroup(group_name, topic_filter, members)
            )
        else:
            self._groups.remove(topic_filter, group_name)
            self.group_count = len(self._groups)
        return True

    def match(self, topic_name: str) -> tuple[ShareGroup, ...]:
        """Every share group whose filter matches the valid topic name `topic_name`."""
        return tuple(
            group for _filter, groups in self._groups.match(topic_name) for group in groups.values()
        )
