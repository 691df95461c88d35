"""RouterActor: the single writer of the route table (topic filter -> subscribing sessions).

Subscribes and unsubscribes are serialised through this actor's mailbox; publishers read
the same `RouteTable` object directly (see `actors.dispatch`). A change is applied whole
within one message, and gevent never switches inside it, so readers never see half a change.

In a pool, `on_route(topic_filter, added)` hears each route that appears or goes, which the
pool turns into filter announcements to the other workers (`actors.pool_node`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from actors.messages import AddRoutes, RemoveRoutes, RoutesChanged, Sync
from actors.runtime import GeventActor, tell_if_alive
from router.route_table import RouteTable

logger = logging.getLogger(__name__)


class RouterActor(GeventActor):
    def __init__(
        self, table: RouteTable, on_route: Callable[[str, bool], None] | None = None
    ) -> None:
        super().__init__()
        self._table = table
        self._on_route = on_route

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Sync):
            return  # the mailbox is FIFO: every change told before is applied
        if isinstance(message, AddRoutes):
            on_route = self._on_route
            for topic_filter, route in message.routes:
                if self._table.add(topic_filter, message.client_id, route) and on_route:
                    on_route(topic_filter, True)
        elif isinstance(message, RemoveRoutes):
            for topic_filter in message.topic_filters:
                current = self._table.subscribers(topic_filter).get(message.client_id)
                if current is not None and current.session is message.session:
                    self._table.remove(topic_filter, message.client_id)
                    if self._on_route is not None:
                        self._on_route(topic_filter, False)
        else:
            logger.warning("router: unexpected message %r", message)
            return
        if message.reply_to is not None:
            tell_if_alive(message.reply_to, RoutesChanged(message.token))
