"""The route table's writer and the router actor.

`RouteWriter` makes every change to the route table (topic filter -> subscribing sessions)
and to the share groups of `$share/...` subscriptions beside it (`router.shared`), and tells
the pool of each. It is a plain object on the worker's single gevent thread, called
synchronously by whoever changes a subscription, so a change is in force for everything the
worker handles after it (docs/channel.md, "Routes in read order"):
- the client actor, for the SUBSCRIBE and UNSUBSCRIBE it reads, as it carries out the
  channel's actions: before a PUBLISH of the same read is routed, and before any read of
  another connection handled later;
- the session actor, for a request the client actor left to it (once the session is being
  taken over from that connection), with its own state;
- the router actor, for what sessions tell it: the routes of sessions restored from the
  store (`AddRoutes`), and routes that go when a session ends, moves away or loses a
  subscription to the ACL (`RemoveRoutes`, only routes still pointing at that session).
Publishers read the same `RouteTable` and `SharedSubscriptions` directly (`actors.dispatch`).
A change is applied whole within one call, and gevent never switches inside it, so readers
never see half a change.

In a pool, `replica` (the `PoolNode`) hears each route of the table that appears or goes,
and each member that joins or leaves a share group (the `$share/...` filter), which it turns
into announcements to the other workers. The router actor answers a subscription
(`AwaitRoutes`, which releases the SUBACK) once every other worker has applied them: after
its SUBACK, a publish on any worker reaches the new subscriber, or its share group, as in
one broker (docs/pool.md). Members are added with this worker's id (`worker`), which the
`local` share strategy compares.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from actors.messages import AddRoutes, AwaitRoutes, RemoveRoutes, RoutesChanged, Sync
from actors.runtime import GeventActor, tell_if_alive
from router.fan_out import Route
from router.route_table import RouteTable
from router.shared import SharedSubscriptions, is_shared

logger = logging.getLogger(__name__)


class RouteReplication(Protocol):
    """What the router tells the pool (pool.node.PoolNode)."""

    def route_changed(self, topic_filter: str, added: bool) -> None:
        """A client's route to `topic_filter` is new / gone (a `$share/...` filter: a member
        joined / left its group)."""
        ...

    def durable_route_changed(self, topic_filter: str, added: bool) -> None:
        """A persistent session's route to `topic_filter` (not a `$share/...` one) is new /
        gone: a publish matching it needs the store (refused while the store fails)."""
        ...

    def when_routes_known(self, then: Callable[[], object]) -> None: ...


def add_route(
    table: RouteTable[str, Route],
    shares: SharedSubscriptions,
    topic_filter: str,
    client_id: str,
    route: Any,
    *,
    worker: int = 0,
) -> bool:
    """Route `topic_filter` (a `$share/...` one joins its share group, as a member on
    `worker`) to `client_id`; True if the client is new on that filter (in that group)."""
    if is_shared(topic_filter):
        return shares.add(topic_filter, client_id, route, worker)
    return table.add(topic_filter, client_id, route)


class RouteWriter:
    """Every change to the route table and the share groups, with what the pool is told of
    it: a plain object on the worker's single gevent thread, called synchronously by
    whoever changes a subscription, so the change is in force for everything handled after
    it (docs/channel.md, "Routes in read order"). A change is applied whole in one call, and
    gevent never switches inside it, so readers never see half a change."""

    __slots__ = ("_replica", "_shares", "_table", "_worker")

    def __init__(
        self,
        table: RouteTable[str, Route],
        shares: SharedSubscriptions,
        replica: RouteReplication | None = None,
        worker: int = 0,
    ) -> None:
        self._table = table
        self._shares = shares
        self._replica = replica
        self._worker = worker

    def add(self, client_id: str, routes: list[tuple[str, Any]]) -> None:
        """Route each (topic filter, `router.fan_out.Route`) to `client_id`."""
        for topic_filter, route in routes:
            self._add(topic_filter, client_id, route)

    def remove(self, client_id: str, topic_filters: list[str], session: Any) -> None:
        """Remove `client_id`'s routes to `topic_filters` that still point at `session`."""
        for topic_filter in topic_filters:
            self._remove(topic_filter, client_id, session)

    def _add(self, topic_filter: str, client_id: str, route: Any) -> None:
        """Add the route; tell the replica of a new route, and of a persistent session's
        route that appears (or replaces a clean session's, or the other way round)."""
        replica = self._replica
        # One process (no replica) has nobody to tell: no lookup of the previous route.
        told = replica is not None and not is_shared(topic_filter)
        previous = self._table.subscribers(topic_filter) if told else None
        was_durable = previous is not None and _durable(previous.get(client_id))
        added = add_route(
            self._table, self._shares, topic_filter, client_id, route, worker=self._worker
        )
        if replica is None:
            return
        if added:
            replica.route_changed(topic_filter, True)
        if previous is not None and _durable(route) != was_durable:
            replica.durable_route_changed(topic_filter, not was_durable)

    def _remove(self, topic_filter: str, client_id: str, session: Any) -> None:
        """Remove the route (or group membership) only if it still points at `session` (not a
        newer one's), and tell the replica."""
        replica = self._replica
        if is_shared(topic_filter):
            current = self._shares.member_route(topic_filter, client_id)
            removed = current is not None and current.session is session
            if removed and self._shares.remove(topic_filter, client_id) and replica is not None:
                replica.route_changed(topic_filter, False)
            return
        current = self._table.subscribers(topic_filter).get(client_id)
        if current is not None and current.session is session:
            self._table.remove(topic_filter, client_id)
            if replica is not None:
                replica.route_changed(topic_filter, False)
                if _durable(current):
                    replica.durable_route_changed(topic_filter, False)


class RouterActor(GeventActor):
    def __init__(self, writer: RouteWriter, replica: RouteReplication | None = None) -> None:
        super().__init__()
        self._writer = writer
        self._replica = replica

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Sync):
            return  # the mailbox is FIFO: every change told before is applied
        if isinstance(message, AwaitRoutes):
            reply_to, token = message.reply_to, message.token
            if self._replica is None:
                tell_if_alive(reply_to, RoutesChanged(token))
            else:
                self._replica.when_routes_known(
                    lambda: tell_if_alive(reply_to, RoutesChanged(token))
                )
        elif isinstance(message, AddRoutes):
            self._writer.add(message.client_id, message.routes)
        elif isinstance(message, RemoveRoutes):
            self._writer.remove(message.client_id, message.topic_filters, message.session)
            if message.reply_to is not None:
                tell_if_alive(message.reply_to, RoutesChanged(message.token))
        else:
            logger.warning("router: unexpected message %r", message)


def _durable(route: Any) -> bool:
    """Whether `route` (a `router.fan_out.Route`, or None) is a persistent session's."""
    return route is not None and bool(route.persistent)
