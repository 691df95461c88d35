"""The persistent sessions a worker restored from its node's store at start-up, for a while:
what the other nodes had forwarded to the node's previous life and never saw confirmed
reaches them (docs/cluster.md "Forwarding a QoS 1/2 message").

A node killed before it stored what other nodes forwarded to its persistent sessions would
lose it, although the publishers were acknowledged once it was taken for gone. The senders
keep those batches (`cluster.numbered_forwarding`); when they see the node's worker come
back in a new life they give it their QoS 1/2 messages (`Unconfirmed`), as the first
numbered batch they send that life, kept and sent again until it confirms it. The worker
hands them to its pool's other workers too (a session restored on one worker may have lived
on another), and each gives them to the sessions it restored whose subscriptions match:
stored first, then told as `OrphansIn`, where a session drops those it has already (it was
restored with them: `SessionActor.keep_restored`, by message id).

Once the other nodes have had time to see the restart (`settle`: twice `peer_timeout`, at
least 10 seconds, after the node's first link to NATS), the sessions stop checking, and a
late `Unconfirmed` is dropped with a warning. A pool's worker that dies alone is restarted
at once, and the sessions it held are re-hosted by their homes (`pool.worker`): those join
here too, for what the other nodes give its next life (relayed), and wait as long again.
"""

from __future__ import annotations

import logging
from typing import Any

from actors.dispatch import Dispatcher
from actors.messages import RestoreSettled
from actors.runtime import tell_if_alive
from core.message import Message
from router.fan_out import FanOut, Route
from router.route_table import RouteTable

logger = logging.getLogger(__name__)


class RestoredSessions:
    """This worker's restored persistent sessions and their routes, until `settle`."""

    def __init__(self) -> None:
        self._routes: RouteTable[str, Route] = RouteTable()
        self._plans = FanOut(self._routes)
        self._filters: dict[str, list[str]] = {}  # client id -> its filters here
        self._sessions: dict[str, Any] = {}  # client id -> its session actor
        # What came before this worker had restored its sessions (another worker of the
        # pool relays what it got, and may be up first): (messages, sender); None once
        # they are restored (`ready`).
        self._early: list[tuple[tuple[Message, ...], str]] | None = []
        self.settled = False

    def add(self, topic_filter: str, client_id: str, route: Route) -> None:
        """A restored session's subscription (not a share group's: its picks are made
        again elsewhere); after `settle`, a session a pool's worker re-hosted from a dead
        one, which opens the wait again."""
        self.settled = False
        self._routes.add(topic_filter, client_id, route)
        self._filters.setdefault(client_id, []).append(topic_filter)
        self._sessions[client_id] = route.session

    def deliver(self, dispatcher: Dispatcher, messages: tuple[Message, ...], sender: str) -> None:
        """Messages `sender` has for this node's previous life (forwarded and never
        confirmed, or kept while it was down), to the restored sessions they match that
        still run here."""
        if self._early is not None:
            self._early.append((messages, sender))
            return
        if self.settled:
            logger.warning(
                "cluster: %s gave %d messages for the persistent sessions of this node's "
                "previous life after its restored sessions stopped waiting for them (twice "
                "peer_timeout, at least 10 s, after the first link to NATS); dropped",
                sender,
                len(messages),
            )
            return
        self._forget_gone()
        if self._sessions:
            dispatcher.deliver_orphans(messages, self._plans)
        logger.info(
            "cluster: %s gave %d messages for the persistent sessions of this node's "
            "previous life, which it did not store; %d restored sessions here get those they "
            "match and lack",
            sender,
            len(messages),
            len(self._sessions),
        )

    def ready(self, dispatcher: Dispatcher) -> None:
        """Every session this worker restores is restored: what came before goes to them."""
        early, self._early = self._early, None
        for messages, sender in early or ():
            self.deliver(dispatcher, messages, sender)

    def settle(self) -> None:
        """The other nodes have seen the restart: the sessions stop checking for copies."""
        self.settled = True
        for session in self._sessions.values():
            tell_if_alive(session, RestoreSettled())
        self._sessions.clear()
        self._filters.clear()
        self._routes = RouteTable()
        self._plans = FanOut(self._routes)

    def _forget_gone(self) -> None:
        """Drop the routes of sessions that ended, or moved to another worker or node."""
        for client_id, session in list(self._sessions.items()):
            if not session.is_alive():
                for topic_filter in self._filters.pop(client_id):
                    self._routes.remove(topic_filter, client_id)
                del self._sessions[client_id]
