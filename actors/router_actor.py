"""RouterActor: the single writer of the route table (topic filter -> subscribing sessions).

Subscribes and unsubscribes are serialised through this actor's mailbox; publishers read
the same `RouteTable` object directly (see `actors.dispatch`). A change is applied whole
within one message, and gevent never switches inside it, so readers never see half a change.

In a pool, `replica` (the `PoolNode`) hears each route that appears or goes, which it turns
into filter announcements to the other workers, and the answer to a subscription waits
until every other worker has applied them: after its SUBACK, a publish on any worker
reaches the new subscriber, as in one broker (docs/pool.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from actors.messages import AddRoutes, RemoveRoutes, RoutesChanged, Sync
from actors.runtime import GeventActor, tell_if_alive
from router.route_table import RouteTable

logger = logging.getLogger(__name__)


class RouteReplication(Protocol):
    """What the router tells the pool (actors.pool_node.PoolNode)."""

    def route_changed(self, topic_filter: str, added: bool) -> None: ...

    def when_routes_known(self, then: Callable[[], object]) -> None: ...


class RouterActor(GeventActor):
    def __init__(self, table: RouteTable, replica: RouteReplication | None = None) -> None:
        super().__init__()
        self._table = table
        self._replica = replica

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Sync):
            return  # the mailbox is FIFO: every change told before is applied
        if isinstance(message, AddRoutes):
            replica = self._replica
            for topic_filter, route in message.routes:
                if self._table.add(topic_filter, message.client_id, route) and replica:
                    replica.route_changed(topic_filter, True)
        elif isinstance(message, RemoveRoutes):
            for topic_filter in message.topic_filters:
                current = self._table.subscribers(topic_filter).get(message.client_id)
                if current is not None and current.session is message.session:
                    self._table.remove(topic_filter, message.client_id)
                    if self._replica is not None:
                        self._replica.route_changed(topic_filter, False)
        else:
            logger.warning("router: unexpected message %r", message)
            return
        if message.reply_to is not None:
            if self._replica is not None and isinstance(message, AddRoutes):
                reply_to, token = message.reply_to, message.token
                self._replica.when_routes_known(
                    lambda: tell_if_alive(reply_to, RoutesChanged(token))
                )
            else:
                tell_if_alive(message.reply_to, RoutesChanged(message.token))
