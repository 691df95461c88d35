"""SessionRegistryActor: client id -> session actor; creates, resumes, and replaces sessions.

Every CONNECT that passed authentication comes here (emqttd's `emqttd_sm`). With clean
session 0 and a session already kept for the client id, that session is resumed and the
CONNACK says session present [MQTT-3.2.2-2]; with clean session 1 any kept session is
discarded and a new one started, session present 0 [MQTT-3.2.2-1]. If the kept session still
has a connection, the session closes it (takeover) [MQTT-3.1.4-2].

`sessions` is a plain dict; other actors may read it but only this actor changes it.
"""

from __future__ import annotations

import logging
from typing import Any

from actors.config import LimitsConfig
from actors.context import BrokerContext
from actors.messages import Attach, OpenSession, SessionEnded, Terminate
from actors.runtime import GeventActor
from actors.session_actor import SessionActor
from core.session_state import SessionState

logger = logging.getLogger(__name__)


class SessionRegistryActor(GeventActor):
    def __init__(self, context: BrokerContext, sessions: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._context = context
        self.sessions: dict[str, Any] = sessions if sessions is not None else {}

    def on_receive(self, message: Any) -> None:
        if isinstance(message, OpenSession):
            self._open(message)
        elif (
            isinstance(message, SessionEnded)
            and self.sessions.get(message.client_id) is message.session
        ):
            del self.sessions[message.client_id]

    def _open(self, request: OpenSession) -> None:
        client = request.client
        session = self.sessions.get(client.client_id)
        if session is not None and (client.clean_start or not session.is_alive()):
            if session.is_alive():
                session.tell(Terminate(reason="clean_start"))
            del self.sessions[client.client_id]
            session = None
        session_present = session is not None
        if session is None:
            state = new_session_state(client.client_id, self._context.limits)
            session = SessionActor.start(state, self._context, client.protocol_version)
            self.sessions[client.client_id] = session
        session.tell(
            Attach(
                client=client,
                client_ref=request.client_ref,
                transport=request.transport,
                session_present=session_present,
                connack_properties=request.connack_properties,
            )
        )


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
