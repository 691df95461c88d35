"""RouterActor: the single writer of the route table (topic filter -> subscribing sessions).

Subscribes and unsubscribes are serialised through this actor's mailbox; publishers read
the same `RouteTable` object directly (see `actors.dispatch`). A change is applied whole
within one message, and gevent never switches inside it, so readers never see half a change.
"""

from __future__ import annotations

import logging
from typing import Any

from actors.messages import AddRoutes, RemoveRoutes, RoutesChanged, Sync
from actors.runtime import GeventActor, tell_if_alive
from router.route_table import RouteTable

logger = logging.getLogger(__name__)


class RouterActor(GeventActor):
    def __init__(self, table: RouteTable) -> None:
        super().__init__()
        self._table = table

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Sync):
            return  # the mailbox is FIFO: every change told before is applied
        if isinstance(message, AddRoutes):
            for topic_filter, route in message.routes:
                self._table.add(topic_filter, message.client_id, route)
        elif isinstance(message, RemoveRoutes):
            for topic_filter in message.topic_filters:
                current = self._table.subscribers(topic_filter).get(message.client_id)
                if current is not None and current.session is message.session:
                    self._table.remove(topic_filter, message.client_id)
        else:
            logger.warning("router: unexpected message %r", message)
            return
        if message.reply_to is not None:
            tell_if_alive(message.reply_to, RoutesChanged(message.token))
