"""ClientActor: one per connection; the MQTT protocol of that connection (emqttd_client).

Phases, and what each accepts:

    AWAITING_CONNECT --CONNECT accepted--> CONNECTING --SessionAttached--> CONNECTED --> CLOSED
           \\--anything else, refused CONNECT, timeout-------------------------------/

- AWAITING_CONNECT: the first packet must be CONNECT [MQTT-3.1.0-1]; the client id, the
  protocol and the credentials (hook `client.authenticate`) are checked here, and a refused
  CONNECT gets its CONNACK code and a close [MQTT-3.2.2-5].
- CONNECTING: the session registry is opening the session; packets that arrive meanwhile
  are kept and handled, in order, once the session has written CONNACK.
- CONNECTED: PUBLISH QoS 0/1 are routed from here (hook `client.authorize`), QoS 2 and all
  acknowledgements go to the session actor, which owns that state; a second CONNECT is a
  protocol violation [MQTT-3.1.0-2].
- CLOSED: the will is published unless the client sent DISCONNECT [MQTT-3.1.2-8/10], if
  the client may publish it then (`actors.authorization`); the session is detached; the
  `client.disconnected` hook and the connection counter run once; the actor stops. Every
  way a connection ends comes through `_end`, also a failing handler (`on_failure`).

One `PacketsReceived` (one socket read) is handled as a batch: its publishes are routed
together, and all replies leave in one socket write (`after_drain`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from enum import Enum
from typing import Any

from actors.authorization import may_publish, may_read
from actors.connection import ACK_OF_PACKET, Connection
from actors.context import BrokerContext
from actors.messages import (
    Acknowledged,
    CloseConnection,
    ConnectionLost,
    Detach,
    InboundQos2,
    OpenSession,
    PacketsReceived,
    Released,
    SessionAttached,
    SubscribeRequest,
    UnsubscribeRequest,
)
from actors.runtime import GeventActor, tell_if_alive
from core.client import ClientInfo
from core.message import Message, new_message
from core.reasons import DisconnectReason, DropReason
from core.session_state import Ack
from hooks.decisions import AUTH_ALLOWED
from hooks.events import (
    AuthenticateRequest,
    ClientConnect,
    ClientConnected,
    ClientDisconnected,
    ClientSubscribe,
    ClientUnsubscribe,
    TopicFilterRequest,
)
from hooks.hookpoints import HookPoint
from mqtt.encoder import encode, encode_ack
from mqtt.errors import UnsupportedProtocolVersionError
from mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PacketType,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    Unsubscribe,
)
from mqtt.reason_codes import ReasonCode, connack_return_code

logger = logging.getLogger(__name__)

PINGRESP = b"\xd0\x00"
_TOPIC_ALIAS = 0x23  # MQTT 5 property identifier
_PUBACK = PacketType.PUBACK
_CLIENT_AUTHORIZE = HookPoint.CLIENT_AUTHORIZE  # Enum member lookups cost ~0.2 µs


class Phase(Enum):
    AWAITING_CONNECT = "awaiting_connect"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


class ClientActor(GeventActor):
    def __init__(self, connection: Connection, context: BrokerContext) -> None:
        super().__init__()
        self._connection = connection
        self._transport = connection.transport
        self._context = context
        self._hooks = context.hooks
        self.phase = Phase.AWAITING_CONNECT
        self._client: ClientInfo | None = None
        self._version = 4
        self._will: Message | None = None
        self._session: Any = None
        self._held: list[Any] = []  # packets received while CONNECTING
        # The input read while CONNECTING (the CONNECT's batch included), reported to the
        # Intake once the held packets are handled.
        self._held_input = (0, 0)  # (packets, bytes)
        self._out: list[bytes] = []
        # Work collected from one batch of packets, flushed in order by `_flush_batch`.
        self._to_route: list[Message] = []
        self._to_session_qos2: list[tuple[Publish, Message | None]] = []
        self._acks: list[tuple[Ack, int]] = []
        self._releases: list[int] = []
        self._pubacks: list[bytes] = []
        self._check_acl = False  # whether a client.authorize callback exists (per batch)
        context.live_clients.add(self.actor_ref)
        self._transport.on_error = self._write_failed

    def on_receive(self, message: Any) -> None:
        if isinstance(message, PacketsReceived):
            self._received(message)
        elif isinstance(message, SessionAttached):
            self._attached(message)
        elif isinstance(message, ConnectionLost):
            self._lost(message)
        elif isinstance(message, CloseConnection):
            logger.info("closing %s: %s %s", self._name(), message.reason.value, message.detail)
            self._close(message.reason)

    def after_drain(self) -> None:
        if self._out:
            self._transport.write(b"".join(self._out))
            self._out.clear()

    def on_failure(self, *_exc_info: Any) -> None:
        # pykka has logged the traceback and stopped the actor; the connection still ends
        # the way every connection does (will, session, hook, counters).
        self._end(DisconnectReason.SERVER_ERROR)

    # ----- packets ----------------------------------------------------------------------

    def _received(self, received: PacketsReceived) -> None:
        self._packets(received.packets)
        if self.phase is Phase.CONNECTING:
            packets, size = self._held_input
            self._held_input = (packets + len(received.packets), size + received.size)
        else:
            self._connection.intake.done(len(received.packets), received.size)

    def _packets(self, packets: list[Any]) -> None:
        phase = self.phase
        if phase is Phase.AWAITING_CONNECT:
            if not isinstance(packets[0], Connect):
                self._violation("the first packet must be CONNECT [MQTT-3.1.0-1]")
                return
            self._connect(packets[0])
            packets = packets[1:]
            phase = self.phase
        if phase is Phase.CONNECTING:
            self._held.extend(packets)
            return
        if phase is not Phase.CONNECTED:
            return
        self._check_acl = self._hooks.has(_CLIENT_AUTHORIZE)
        for packet in packets:
            handler = _PACKET_HANDLERS.get(type(packet))
            if handler is None:
                self._violation(f"{type(packet).__name__} is not a client-to-server packet")
                return
            handler(self, packet)
            if self.phase is not Phase.CONNECTED:
                return  # DISCONNECT or a violation closed the connection
        self._flush_batch()

    def _flush_batch(self) -> None:
        pubacks = self._pubacks
        if self._to_route:
            # PUBACK once the messages are durable for persistent subscribers (write-ahead).
            transport = self._transport
            data = b"".join(pubacks) if pubacks else None
            on_durable = (lambda: transport.write(data)) if data else None  # type: ignore[arg-type]
            if self._context.dispatcher.publish(self._to_route, on_durable):
                pubacks = []
            self._to_route = []
        if pubacks:
            self._out.extend(pubacks)
        self._pubacks = []
        # The session may have stopped (taken over, terminated): then these go nowhere, and
        # its CloseConnection is on its way to this actor.
        if self._to_session_qos2:
            tell_if_alive(self._session, InboundQos2(self._to_session_qos2))
            self._to_session_qos2 = []
        if self._acks:
            tell_if_alive(self._session, Acknowledged(self._acks))
            self._acks = []
        if self._releases:
            tell_if_alive(self._session, Released(self._releases))
            self._releases = []

    def _publish(self, packet: Publish) -> None:
        client = self._client
        assert client is not None
        topic = packet.topic
        if topic.count("/") >= self._context.limits.max_topic_levels:
            self._violation(f"topic {topic[:64]!r} has more than limits.max_topic_levels levels")
            return
        if _TOPIC_ALIAS in packet.properties:
            # CONNACK announces no Topic Alias Maximum, so it is 0 [MQTT-3.2.2-17]: a client
            # must not send a Topic Alias [MQTT-3.3.2-8]; 0x94 Topic Alias invalid.
            self._violation("Topic Alias used, but the broker allows none", 0x94)
            return
        message = new_message(
            topic,
            packet.payload,
            packet.qos,
            packet.retain,
            client.client_id,
            client.username,
            packet.properties,
            packet.wire,
        )
        # Without an ACL plugin only a `$` topic needs asking ($SYS is the broker's).
        allowed = not (self._check_acl or topic.startswith("$")) or may_publish(
            self._hooks, client, topic, packet.qos
        )
        if packet.qos == 2:
            if not allowed:
                self._denied(message)
            self._to_session_qos2.append((packet, message if allowed else None))
            return
        if allowed:
            self._to_route.append(message)
        else:
            self._denied(message)
        if packet.qos == 1:
            # A denied QoS 1 publish is still acknowledged in 3.1.1; 5.0 says why.
            code = 0 if allowed else ReasonCode.NOT_AUTHORIZED
            self._pubacks.append(encode_ack(_PUBACK, packet.packet_id, code, self._version))

    def _denied(self, message: Message) -> None:
        self._context.dispatcher.dropped(message, DropReason.NOT_AUTHORIZED)  # logs it

    def _ack(self, packet: PubAck | PubRec | PubComp) -> None:
        self._acks.append((ACK_OF_PACKET[type(packet)], packet.packet_id))

    def _pubrel(self, packet: PubRel) -> None:
        self._flush_batch()  # the QoS 2 PUBLISH must reach the session before its PUBREL
        self._releases.append(packet.packet_id)

    def _subscribe(self, packet: Subscribe) -> None:
        self._flush_batch()
        client = self._client
        assert client is not None
        if self._hooks.has(HookPoint.CLIENT_SUBSCRIBE):
            filters = tuple(
                TopicFilterRequest(topic_filter=s.topic_filter, qos=s.qos)
                for s in packet.subscriptions
            )
            self._hooks.run(
                HookPoint.CLIENT_SUBSCRIBE, ClientSubscribe(client=client, filters=filters)
            )
        refused: dict[int, int] = {}
        failure = 0x80 if self._version < 5 else ReasonCode.NOT_AUTHORIZED
        check_acl = self._check_acl
        for index, subscription in enumerate(packet.subscriptions):
            topic_filter = subscription.topic_filter
            if topic_filter.count("/") >= self._context.limits.max_topic_levels:
                refused[index] = 0x80 if self._version < 5 else ReasonCode.TOPIC_FILTER_INVALID
            elif check_acl and not may_read(self._hooks, client, topic_filter, subscription.qos):
                logger.info("%s: subscribe to %r denied", self._name(), topic_filter)
                refused[index] = failure
        subscription_ids = packet.properties.get(0x0B)
        self._session.tell(
            SubscribeRequest(
                packet.packet_id,
                list(packet.subscriptions),
                refused,
                subscription_ids[0] if subscription_ids else None,
            )
        )

    def _unsubscribe(self, packet: Unsubscribe) -> None:
        self._flush_batch()
        if self._hooks.has(HookPoint.CLIENT_UNSUBSCRIBE):
            assert self._client is not None
            filters = tuple(TopicFilterRequest(topic_filter=f) for f in packet.topic_filters)
            self._hooks.run(
                HookPoint.CLIENT_UNSUBSCRIBE,
                ClientUnsubscribe(client=self._client, filters=filters),
            )
        self._session.tell(UnsubscribeRequest(packet.packet_id, list(packet.topic_filters)))

    def _ping(self, _packet: PingReq) -> None:
        self._out.append(PINGRESP)

    def _disconnect(self, packet: Disconnect) -> None:
        # DISCONNECT discards the will [MQTT-3.14.4-3]; 5.0 reason 0x04 asks to publish it.
        if packet.reason_code != 0x04:
            self._will = None
        self._close(DisconnectReason.CLIENT_DISCONNECT)

    # ----- CONNECT ----------------------------------------------------------------------

    def _connect(self, packet: Connect) -> None:
        self._version = packet.protocol_version
        limits = self._context.limits
        client_id = packet.client_id
        connack_properties: dict[int, Any] = {}
        if not client_id:
            if self._version == 3 or (self._version == 4 and not packet.clean_start):
                # 3.1 needs 1..23 characters; 3.1.1 allows an empty id only with clean
                # session 1 [MQTT-3.1.3-8].
                self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "empty client id")
                return
            client_id = f"auto-{uuid.uuid4().hex}"  # [MQTT-3.1.3-6]
            if self._version >= 5:
                connack_properties[0x12] = client_id  # Assigned Client Identifier
        if len(client_id) > limits.max_client_id_length:
            self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")
            return
        username = packet.username
        by_certificate = self._connection.use_identity
        if by_certificate:
            # use_identity_as_username: the verified client certificate's CN is the user
            # name and the credential; the CONNECT's user name and password are not used
            # (Mosquitto's rule).
            username = self._connection.identity
            if username is None:
                self._refuse(
                    ReasonCode.NOT_AUTHORIZED,
                    "no client certificate (with a common name): this listener takes the "
                    "user name from it (use_identity_as_username)",
                )
                return
        client = ClientInfo(
            client_id=client_id,
            username=username,
            peer=self._transport.peer,
            protocol_version=self._version,
            clean_start=packet.clean_start,
            keepalive=packet.keepalive,
        )
        self._client = client
        if self._hooks.has(HookPoint.CLIENT_CONNECT):
            self._hooks.run(
                HookPoint.CLIENT_CONNECT, ClientConnect(client=client, properties=packet.properties)
            )
        result = (
            AUTH_ALLOWED
            if by_certificate
            else self._hooks.authenticate(
                AuthenticateRequest(client=client, password=packet.password)
            )
        )
        if not result.allowed:
            assert result.reason is not None
            self._refuse(result.reason.connack_v5, f"authentication failed: {result.reason.value}")
            return
        if packet.will is not None:
            will = packet.will
            if self._version >= 5 and not may_publish(self._hooks, client, will.topic, will.qos):
                # 5.0 can say why [MQTT-3.2.2-8]; 3.x clients learn nothing, and their will
                # is checked again (and dropped) when it would be published.
                self._refuse(ReasonCode.NOT_AUTHORIZED, f"will on {will.topic!r} not authorised")
                return
            self._will = Message(
                topic=will.topic,
                payload=will.payload,
                qos=will.qos,
                retain=will.retain,
                publisher=client_id,
                username=username,
                properties=will.properties,
            )
        self.phase = Phase.CONNECTING
        self._context.registry.tell(
            OpenSession(client, self.actor_ref, self._transport, connack_properties)
        )

    def _refuse(self, reason_code: int, why: str) -> None:
        code = reason_code if self._version >= 5 else connack_return_code(reason_code)
        logger.info("refused CONNECT from %s: %s (CONNACK 0x%02x)", self._name(), why, code)
        self._out.append(encode(ConnAck(session_present=False, reason_code=code), self._version))
        self._client = None
        self._close(DisconnectReason.NOT_AUTHORIZED)

    def _attached(self, attached: SessionAttached) -> None:
        if self.phase is not Phase.CONNECTING:
            tell_if_alive(attached.session, Detach(self.actor_ref, DisconnectReason.SOCKET_CLOSED))
            return
        self._session = attached.session
        self._connection.session = attached.session
        self.phase = Phase.CONNECTED
        self._context.stats.connections += 1
        assert self._client is not None
        logger.info(
            "%s connected: MQTT level %d, clean %s, keep-alive %d s, session present %s",
            self._name(),
            self._version,
            self._client.clean_start,
            self._client.keepalive,
            attached.session_present,
        )
        if self._hooks.has(HookPoint.CLIENT_CONNECTED):
            self._hooks.run(
                HookPoint.CLIENT_CONNECTED,
                ClientConnected(client=self._client, session_present=attached.session_present),
            )
        held, self._held = self._held, []
        if held:
            self._packets(held)
        (packets, size), self._held_input = self._held_input, (0, 0)
        self._connection.intake.done(packets, size)

    # ----- closing ----------------------------------------------------------------------

    def _lost(self, lost: ConnectionLost) -> None:
        error = lost.error
        if (
            isinstance(error, UnsupportedProtocolVersionError)
            and self.phase is Phase.AWAITING_CONNECT
        ):
            # [MQTT-3.1.2-2]: CONNACK 0x01 (0x84 in 5.0), then close.
            self._refuse(ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, str(error))
            return
        if error is not None:
            logger.warning("closing %s: %s", self._name(), error)
            if self.phase is Phase.CONNECTED and self._version >= 5:
                self._out.append(encode(Disconnect(reason_code=error.reason_code), 5))
        elif lost.reason is not DisconnectReason.SOCKET_CLOSED:
            logger.info("closing %s: %s (%s)", self._name(), lost.reason.value, lost.detail)
        self._close(lost.reason)

    def _violation(self, why: str, reason_code: int = ReasonCode.PROTOCOL_ERROR) -> None:
        logger.warning("closing %s: protocol violation: %s", self._name(), why)
        if self.phase is Phase.CONNECTED and self._version >= 5:
            self._out.append(encode(Disconnect(reason_code=reason_code), 5))
        self._close(DisconnectReason.PROTOCOL_ERROR)

    def _write_failed(self, error: OSError) -> None:
        tell_if_alive(
            self.actor_ref, ConnectionLost(DisconnectReason.SOCKET_CLOSED, None, str(error))
        )

    def _close(self, reason: DisconnectReason) -> None:
        if self._end(reason):
            self.stop()

    def _end(self, reason: DisconnectReason) -> bool:
        """Everything a connection's end does, once; False if it had already ended."""
        if self.phase is Phase.CLOSED:
            return False
        self._connection.session = None
        was_connected = self.phase is Phase.CONNECTED
        if was_connected:
            self._flush_batch()
        self.phase = Phase.CLOSED
        if self._will is not None and reason.publishes_will:
            # The will goes out on any close not preceded by DISCONNECT [MQTT-3.1.2-8].
            self._publish_will(self._will)
        self._will = None
        self.after_drain()
        self._transport.on_error = None  # the transport outlives us in the reader: no cycle
        self._transport.close()
        self._connection.intake.close()
        self._context.live_clients.discard(self.actor_ref)
        # The session may already have stopped (a clean-start takeover terminated it).
        tell_if_alive(self._session, Detach(self.actor_ref, reason))
        if was_connected and self._client is not None:
            if reason in (DisconnectReason.CLIENT_DISCONNECT, DisconnectReason.SOCKET_CLOSED):
                logger.info("%s disconnected: %s", self._name(), reason.value)
            self._context.stats.connections -= 1
            if self._hooks.has(HookPoint.CLIENT_DISCONNECTED):
                self._hooks.run(
                    HookPoint.CLIENT_DISCONNECTED,
                    ClientDisconnected(client=self._client, reason=reason),
                )
        return True

    def _publish_will(self, will: Message) -> None:
        """Publish the will if the client may publish it now (the ACL may have changed)."""
        assert self._client is not None
        if may_publish(self._hooks, self._client, will.topic, will.qos):
            self._context.dispatcher.publish([will])
        else:
            self._denied(will)

    def _name(self) -> str:
        if self._client is not None:
            return f"client {self._client.client_id!r} ({self._transport.peer})"
        return f"connection {self._transport.peer}"


# What a connected client may send, and the method that handles it. A class-level table: a
# per-instance dict of bound methods would cost ~1 KB per idle connection.
_PACKET_HANDLERS: dict[type, Callable[[ClientActor, Any], None]] = {
    Publish: ClientActor._publish,
    PubAck: ClientActor._ack,
    PubRec: ClientActor._ack,
    PubComp: ClientActor._ack,
    PubRel: ClientActor._pubrel,
    Subscribe: ClientActor._subscribe,
    Unsubscribe: ClientActor._unsubscribe,
    PingReq: ClientActor._ping,
    Disconnect: ClientActor._disconnect,
}
