"""RouterActor: the single writer of the route table (topic filter -> subscribing sessions)
and of the share groups of `$share/...` subscriptions beside it (`router.shared`).

Subscribes and unsubscribes are serialised through this actor's mailbox; publishers read
the same `RouteTable` and `SharedSubscriptions` objects directly (see `actors.dispatch`). A
change is applied whole within one message, and gevent never switches inside it, so readers
never see half a change.
"""

from __future__ import annotations

import logging
from typing import Any

from actors.messages import AddRoutes, RemoveRoutes, RoutesChanged, Sync
from actors.runtime import GeventActor, tell_if_alive
from router.route_table import RouteTable
from router.shared import SharedSubscriptions, is_shared

logger = logging.getLogger(__name__)


def add_route(
    table: RouteTable, shares: SharedSubscriptions, topic_filter: str, client_id: str, route: Any
) -> None:
    """Route `topic_filter` (a `$share/...` one joins its share group) to `client_id`."""
    if is_shared(topic_filter):
        shares.add(topic_filter, client_id, route)
    else:
        table.add(topic_filter, client_id, route)


class RouterActor(GeventActor):
    def __init__(self, table: RouteTable, shares: SharedSubscriptions) -> None:
        super().__init__()
        self._table = table
        self._shares = shares

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Sync):
            return  # the mailbox is FIFO: every change told before is applied
        if isinstance(message, AddRoutes):
            for topic_filter, route in message.routes:
                add_route(self._table, self._shares, topic_filter, message.client_id, route)
        elif isinstance(message, RemoveRoutes):
            for topic_filter in message.topic_filters:
                self._remove(topic_filter, message.client_id, message.session)
        else:
            logger.warning("router: unexpected message %r", message)
            return
        if message.reply_to is not None:
            tell_if_alive(message.reply_to, RoutesChanged(message.token))

    def _remove(self, topic_filter: str, client_id: str, session: Any) -> None:
        """Remove the route only if it still points at `session` (not a newer one's)."""
        if is_shared(topic_filter):
            current = self._shares.member_route(topic_filter, client_id)
            if current is not None and current.session is session:
                self._shares.remove(topic_filter, client_id)
            return
        current = self._table.subscribers(topic_filter).get(client_id)
        if current is not None and current.session is session:
            self._table.remove(topic_filter, client_id)
