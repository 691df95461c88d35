"""SessionRegistry: client id -> session actor; creates, resumes, and replaces sessions.

Every CONNECT that passed authentication comes here (emqttd's `emqttd_sm`). With clean
session 0 and a session already kept for the client id, that session is resumed and the
CONNACK says session present [MQTT-3.2.2-2]; with clean session 1 any kept session is
discarded and a new one started, session present 0 [MQTT-3.2.2-1]. If the kept session still
has a connection, the session closes it (takeover) [MQTT-3.1.4-2].

It is a plain object, not an actor: `open` and `ended` never block, and gevent never
preempts a greenlet between two statements, so each runs whole, as an actor's handler would,
without the actor hop a CONNECT used to pay for it. `sessions` is read by the broker (reload,
shutdown) and changed only by these two methods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from actors.config import LimitsConfig
from actors.context import BrokerContext
from actors.messages import Attach, ClientMessage, ConnectRefused, Terminate
from actors.refs import Ref
from actors.runtime import tell_if_alive
from actors.session_actor import SessionActor
from core.client import ClientInfo
from core.session_state import SessionState
from mqtt.reason_codes import ReasonCode
from net.transport import Transport

logger = logging.getLogger(__name__)


class SessionRegistry:
    def __init__(self, context: BrokerContext, sessions: dict[str, Any] | None = None) -> None:
        self._context = context
        self.sessions: dict[str, Any] = sessions if sessions is not None else {}
        # In a cluster (cluster.registry): why a client id is not this node's to open any
        # more (a later claim on another node won it meanwhile), or None.
        self.fence: Callable[[str], str | None] | None = None

    def open(
        self,
        client: ClientInfo,
        client_ref: Ref[ClientMessage],
        transport: Transport,
        connack_properties: dict[int, Any],
    ) -> None:
        """Attach the client's connection to its session, kept or new [MQTT-3.2.2-1/2]."""
        self.attach(Attach(client, client_ref, transport, False, connack_properties))

    def attach(self, attach: Attach) -> None:
        """`open` once the id is this broker's to open (a pool's claim for it is held);
        also for a connection whose session ended before the connection could take it
        over (`SessionActor._waits_for_arrived`)."""
        client = attach.client
        if self.fenced_out(client, attach.client_ref):
            return
        session = self.sessions.get(client.client_id)
        if session is not None and (client.clean_start or not session.is_alive()):
            if session.is_alive():
                session.tell(Terminate(reason="clean_start"))
            del self.sessions[client.client_id]
            session = None
        attach.session_present = session is not None
        if session is None:
            state = new_session_state(client.client_id, self._context.limits)
            session = SessionActor.start(state, self._context, client.protocol_version)
            self.sessions[client.client_id] = session
        session.tell(attach)

    def fenced_out(self, client: ClientInfo, client_ref: Ref[ClientMessage]) -> bool:
        """Whether the CONNECT is refused because its id is not this node's to open any more
        (`fence`): asked before anything is taken from another connection of the id, and
        again as the session attaches."""
        why = None if self.fence is None else self.fence(client.client_id)
        if why is None:
            return False
        logger.info("client %r: refused CONNECT: %s", client.client_id, why)
        tell_if_alive(client_ref, ConnectRefused(ReasonCode.SERVER_UNAVAILABLE, why))
        return True

    def ended(self, client_id: str, session: Any) -> None:
        """A session actor stopped: forget it (unless a newer one took its client id)."""
        if self.sessions.get(client_id) is session:
            del self.sessions[client_id]


def new_session_state(client_id: str, limits: LimitsConfig) -> SessionState:
    """An empty session for `client_id` with the configured bounds."""
    return SessionState(
        client_id=client_id,
        persistent=False,
        max_inflight=limits.max_inflight,
        max_queued=limits.max_queued_messages,
        queue_qos0=limits.queue_qos0,
        max_awaiting_rel=limits.max_awaiting_rel,
    )
