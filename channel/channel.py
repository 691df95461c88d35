"""Channel: the MQTT protocol of one connection, as pure state with packets in and actions out.

In the manner of h11 and EMQX's `emqx_channel`: each method takes what happened (packets
decoded from one read, the session attached, the connection lost, a close asked by the
server) and returns the `channel.actions` to carry out, in order. It does no I/O and tells no
actor; it calls the hook bus (authentication, ACL and the client hooks), which plugins
implement.

Phases, and what each accepts:

    AWAITING_CONNECT --CONNECT accepted--> CONNECTING --session attached--> CONNECTED --> CLOSED
         |   ^              ^                                                              ^
         |   |AUTH          |authenticated                                                 |
         v   |              |                                                              |
    AUTHENTICATING ---------+--------refused, anything but AUTH, lost---------------------/

- AWAITING_CONNECT: the first packet must be CONNECT [MQTT-3.1.0-1]; the client id, the
  credentials (`client.authenticate`) and the will (`client.authorize`) are checked here. A
  refused CONNECT gets its CONNACK code and a close [MQTT-3.2.2-5].
- CONNECTING: the session is being opened; packets that arrive meanwhile are held and
  handled, in order, once it is attached (their input counts as unhandled until then).
- CONNECTED: PUBLISH QoS 0/1 are routed (with their PUBACK, [MQTT-4.3.2-2]); QoS 2 PUBLISH,
  PUBREL, acknowledgements, SUBSCRIBE and UNSUBSCRIBE become session inputs; a second CONNECT
  is a protocol violation [MQTT-3.1.0-2].
- CLOSED: reached exactly once, however the connection ends: the will is published unless
  the client sent DISCONNECT [MQTT-3.1.2-8/10] and only if the ACL allows it then; the
  `client.disconnected` hook runs if the client had connected; `End` is the last action.

Every reason code is chosen here, in 5.0 terms (`mqtt.reason_codes.ReasonCode`); the encoder
maps it down for 3.1/3.1.1 clients.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, cast

from channel.actions import (
    Acknowledged,
    Action,
    Drop,
    End,
    InboundQos2,
    InputHandled,
    OpenSession,
    Publish,
    Released,
    Send,
    SetReadTimeout,
    SubscribeRequest,
    UnsubscribeRequest,
)
from channel.authorization import may_publish, may_read
from channel.enhanced_auth import (
    AUTHENTICATION_DATA,
    AUTHENTICATION_METHOD,
    CONTINUE,
    REAUTHENTICATE,
    SUCCESS,
    AuthExchange,
    auth_packet,
)
from core.client import ClientInfo
from core.message import Message, new_message
from core.reasons import DisconnectReason, DropReason
from core.session_state import Ack
from hooks.decisions import AuthContinue, AuthResult
from hooks.events import (
    AuthenticateRequest,
    ClientConnect,
    ClientConnected,
    ClientDisconnected,
    ClientSubscribe,
    ClientUnsubscribe,
    TopicFilterRequest,
)
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt.encoder import encode, encode_ack
from mqtt.errors import MqttError, UnsupportedProtocolVersionError
from mqtt.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Subscribe,
    Unsubscribe,
)
from mqtt.packets import (
    Publish as PublishPacket,
)
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from mqtt.topics import TopicError
from router.shared import inner_filter, is_shared, parse_shared

logger = logging.getLogger(__name__)

PINGRESP = b"\xd0\x00"
KEEPALIVE_GRACE = 1.5  # the server closes after 1.5 x the keep-alive of silence [MQTT-3.1.2-24]
ACK_OF_PACKET: dict[type, Ack] = {PubAck: Ack.PUBACK, PubRec: Ack.PUBREC, PubComp: Ack.PUBCOMP}

_PUBACK, _PUBREC, _PUBCOMP = PacketType.PUBACK, PacketType.PUBREC, PacketType.PUBCOMP
_CLIENT_AUTHORIZE = HookPoint.CLIENT_AUTHORIZE  # Enum member lookups cost ~0.2 µs
_TOPIC_ALIAS = PropertyId.TOPIC_ALIAS
_SUCCESS = ReasonCode.SUCCESS
_NOT_AUTHORIZED = ReasonCode.NOT_AUTHORIZED


# The DISCONNECT reason a 5.0 client gets when the server closes for these reasons.
_SERVER_CLOSE_CODES = {DisconnectReason.ADMINISTRATIVE_ACTION: ReasonCode.ADMINISTRATIVE_ACTION}

# The value of the batch lists between batches: never appended to (every batch starts with
# fresh lists), so one shared empty list stands for "none".
_IDLE: Any = []


class Phase(Enum):
    AWAITING_CONNECT = "awaiting_connect"
    AUTHENTICATING = "authenticating"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    """What one channel needs of the configuration (`limits`, and its listener's TLS keys)."""

    max_client_id_length: int = 65535
    max_topic_levels: int = 128
    # The listener's `use_identity_as_username`: the TLS client certificate's CN becomes the
    # username (a client without a certificate is refused), as in Mosquitto.
    identity_as_username: bool = False
    # The banned table's check (`actors.admission`): why a CONNECT is refused, or None.
    admit: Callable[[ClientInfo], str | None] | None = None
    # `[shared_subscriptions] enabled`: announced in CONNACK; off, `$share/...` gets 0x9E.
    shared_subscriptions: bool = True


class Channel:
    """The protocol state of one connection; see the module docstring for the phases."""

    __slots__ = (
        "_acks",
        "_actions",
        "_auth",
        "_check_acl",
        "_held",
        "_held_input",
        "_hooks",
        "_identity",
        "_pubacks",
        "_qos2",
        "_releases",
        "_settings",
        "_to_route",
        "_will",
        "client",
        "peer",
        "phase",
        "version",
    )

    def __init__(
        self,
        peer: str,
        hooks: HookBus,
        settings: ChannelSettings,
    ) -> None:
        self.peer = peer
        self._hooks = hooks
        self._settings = settings
        self._identity: str | None = None  # the TLS client certificate's CN, if any
        self.phase = Phase.AWAITING_CONNECT
        self.client: ClientInfo | None = None
        self.version = 4
        self._will: Message | None = None
        # The lists below exist only while they are used (a batch, the CONNECTING phase): an
        # idle channel holds none of them (seven empty lists were ~400 bytes per connection).
        self._held: list[Packet] = _IDLE  # packets received while CONNECTING
        self._held_input = (0, 0)  # (packets, bytes) read while CONNECTING, CONNECT's included
        self._actions: list[Action] = _IDLE  # the answer being built
        # Work collected from one batch of packets, flushed in order by `_flush_batch`.
        self._to_route: list[Message] = _IDLE
        self._pubacks: list[bytes] = _IDLE
        self._qos2: list[tuple[int, Message | None, bytes]] = _IDLE
        self._acks: list[tuple[Ack, int]] = _IDLE
        self._releases: list[int] = _IDLE
        self._check_acl = False  # whether a client.authorize callback exists (per batch)
        self._auth: AuthExchange | None = None  # MQTT 5.0 enhanced authentication, if used

    # ----- inputs -----------------------------------------------------------------------

    def handle_in(self, packets: list[Packet], size: int) -> list[Action]:
        """The packets decoded from one read of `size` bytes, in order."""
        actions = self._actions = []
        self._packets(packets)
        if self.phase is Phase.CONNECTING:
            held_packets, held_size = self._held_input
            self._held_input = (held_packets + len(packets), held_size + size)
        else:
            actions.append(InputHandled(len(packets), size))
        return actions

    def acks_only(self, packets: list[Packet], size: int) -> Acknowledged | None:
        """If a read holds only PUBACK/PUBREC/PUBCOMP of a connected client, the session input
        they make, for the socket side to hand straight to the session; else None.

        The session owns the in-flight window these acknowledge: on the QoS 1/2 delivery cycle
        that is one actor hop instead of two. Acknowledgements carry no ordering with anything
        else the client sends, so nothing is reordered that matters.
        """
        if self.phase is not Phase.CONNECTED:
            return None
        acks: list[tuple[Ack, int]] = []
        for packet in packets:
            ack = ACK_OF_PACKET.get(type(packet))
            if ack is None:
                return None
            acks.append((ack, cast(PubAck | PubRec | PubComp, packet).packet_id))
        return Acknowledged(acks, size=size)

    def identify(self, identity: str) -> None:
        """The transport authenticated the peer (a TLS client certificate's CN): with the
        listener's `use_identity_as_username` it becomes the username at CONNECT."""
        self._identity = identity

    def session_attached(self, session_present: bool) -> list[Action]:
        """The session wrote CONNACK (and its resends): handle what was held meanwhile."""
        actions = self._actions = []
        if self.phase is not Phase.CONNECTING:
            return actions
        client = self.client
        assert client is not None
        self.phase = Phase.CONNECTED
        logger.info(
            "%s connected: MQTT level %d, clean %s, keep-alive %d s, session present %s",
            self._name(),
            self.version,
            client.clean_start,
            client.keepalive,
            session_present,
        )
        if self._hooks.has(HookPoint.CLIENT_CONNECTED):
            self._hooks.run(
                HookPoint.CLIENT_CONNECTED,
                ClientConnected(client=client, session_present=session_present),
            )
        held, self._held = self._held, _IDLE
        if held:
            self._packets(held)
        packets, size = self._held_input
        self._held_input = (0, 0)
        actions.append(InputHandled(packets, size))
        return actions

    def connection_lost(
        self, reason: DisconnectReason, error: MqttError | None = None, detail: str = ""
    ) -> list[Action]:
        """The socket side stopped: peer closed, socket error, a timeout, or bad input."""
        actions = self._actions = []
        if self.phase is Phase.CLOSED:
            return actions
        if isinstance(error, UnsupportedProtocolVersionError) and (
            self.phase is Phase.AWAITING_CONNECT
        ):
            # [MQTT-3.1.2-2]: CONNACK 0x01 (0x84 in 5.0), then close.
            self._refuse(ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, str(error))
            return actions
        if error is not None:
            logger.warning("closing %s: %s", self._name(), error)
            self._last_words(error.reason_code)
        elif reason is not DisconnectReason.SOCKET_CLOSED:
            logger.info("closing %s: %s (%s)", self._name(), reason.value, detail)
        self._close(reason)
        return actions

    def close(self, reason: DisconnectReason, detail: str = "") -> list[Action]:
        """The server closes the connection (takeover, shutdown, a session limit, a bug)."""
        actions = self._actions = []
        if self.phase is not Phase.CLOSED:
            logger.info("closing %s: %s %s", self._name(), reason.value, detail)
            code = _SERVER_CLOSE_CODES.get(reason)
            if code is not None:
                self._last_words(code)
            self._close(reason)
        return actions

    # ----- packets ----------------------------------------------------------------------

    def _packets(self, packets: list[Packet]) -> None:
        if self.phase is Phase.AWAITING_CONNECT:
            first = packets[0]
            if not isinstance(first, Connect):
                self._violation("the first packet must be CONNECT [MQTT-3.1.0-1]")
                return
            self._connect(first)
            packets = packets[1:]
        while packets and self.phase is Phase.AUTHENTICATING:
            self._auth_before_connack(packets[0])
            packets = packets[1:]
        if self.phase is Phase.CONNECTING:
            if self._held is _IDLE:
                self._held = []
            self._held.extend(packets)
            return
        if self.phase is not Phase.CONNECTED:
            return
        self._check_acl = self._hooks.has(_CLIENT_AUTHORIZE)
        self._to_route, self._pubacks, self._qos2, self._acks, self._releases = [], [], [], [], []
        for packet in packets:
            handler = _PACKET_HANDLERS.get(type(packet))
            if handler is None:
                self._violation(f"{type(packet).__name__} is not a client-to-server packet")
                return
            handler(self, packet)
            if self.phase is not Phase.CONNECTED:
                return  # DISCONNECT or a violation closed the connection
        self._flush_batch()
        self._to_route = self._pubacks = self._qos2 = self._acks = self._releases = _IDLE

    def _flush_batch(self) -> None:
        actions = self._actions
        if self._to_route:
            acks = b"".join(self._pubacks) if self._pubacks else None
            actions.append(Publish(self._to_route, acks))
            self._to_route = []
        elif self._pubacks:
            actions.append(Send(b"".join(self._pubacks)))
        self._pubacks = []
        if self._qos2:
            actions.append(InboundQos2(self._qos2))
            self._qos2 = []
        if self._acks:
            actions.append(Acknowledged(self._acks))
            self._acks = []
        if self._releases:
            pubcomps = b"".join(
                encode_ack(_PUBCOMP, packet_id, _SUCCESS, self.version)
                for packet_id in self._releases
            )
            actions.append(Released(self._releases, pubcomps))
            self._releases = []

    def _publish(self, packet: PublishPacket) -> None:
        client = self.client
        assert client is not None
        topic = packet.topic
        if topic.count("/") >= self._settings.max_topic_levels:
            self._violation(f"topic {topic[:64]!r} has more than limits.max_topic_levels levels")
            return
        if _TOPIC_ALIAS in packet.properties:
            # CONNACK announces no Topic Alias Maximum, so it is 0 [MQTT-3.2.2-17]: a client
            # must not send a Topic Alias [MQTT-3.3.2-8].
            self._violation(
                "Topic Alias used, but the broker allows none", ReasonCode.TOPIC_ALIAS_INVALID
            )
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
        if allowed:
            code = _SUCCESS
        else:
            code = _NOT_AUTHORIZED  # 3.1.1 acknowledges a denied publish anyway; 5.0 says why
            self._actions.append(Drop(message, DropReason.NOT_AUTHORIZED))
        qos = packet.qos
        if qos == 0:
            if allowed:
                self._to_route.append(message)
            return
        packet_id = packet.packet_id
        assert packet_id is not None
        if qos == 1:
            if allowed:
                self._to_route.append(message)
            self._pubacks.append(encode_ack(_PUBACK, packet_id, code, self.version))
        else:
            # The session records the packet id and routes a new message once (method B of
            # [MQTT-4.3.3-2]); a denied one completes its flow without being routed.
            pubrec = encode_ack(_PUBREC, packet_id, code, self.version)
            self._qos2.append((packet_id, message if allowed else None, pubrec))

    def _ack(self, packet: PubAck | PubRec | PubComp) -> None:
        self._acks.append((ACK_OF_PACKET[type(packet)], packet.packet_id))

    def _pubrel(self, packet: PubRel) -> None:
        if self._qos2:
            self._flush_batch()  # the QoS 2 PUBLISH must reach the session before its PUBREL
        self._releases.append(packet.packet_id)

    def _subscribe(self, packet: Subscribe) -> None:
        self._flush_batch()
        client = self.client
        assert client is not None
        hooks = self._hooks
        if hooks.has(HookPoint.CLIENT_SUBSCRIBE):
            filters = tuple(
                TopicFilterRequest(topic_filter=s.topic_filter, qos=s.qos)
                for s in packet.subscriptions
            )
            hooks.run(HookPoint.CLIENT_SUBSCRIBE, ClientSubscribe(client=client, filters=filters))
        refused: dict[int, int] = {}
        for index, subscription in enumerate(packet.subscriptions):
            topic_filter = subscription.topic_filter
            shared = _shared_refusal(topic_filter, self._settings.shared_subscriptions)
            read_filter = inner_filter(topic_filter)  # a shared one reads after its share name
            if shared is not None:
                logger.info("%s: subscribe to %r refused: %s", self._name(), *shared[1:])
                refused[index] = shared[0]
            elif read_filter.count("/") >= self._settings.max_topic_levels:
                refused[index] = ReasonCode.TOPIC_FILTER_INVALID
            elif self._check_acl and not may_read(hooks, client, read_filter, subscription.qos):
                logger.info("%s: subscribe to %r denied", self._name(), topic_filter)
                refused[index] = _NOT_AUTHORIZED
        subscription_ids = packet.properties.get(PropertyId.SUBSCRIPTION_IDENTIFIER)
        self._actions.append(
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
            assert self.client is not None
            filters = tuple(TopicFilterRequest(topic_filter=f) for f in packet.topic_filters)
            self._hooks.run(
                HookPoint.CLIENT_UNSUBSCRIBE,
                ClientUnsubscribe(client=self.client, filters=filters),
            )
        self._actions.append(UnsubscribeRequest(packet.packet_id, list(packet.topic_filters)))

    def _ping(self, _packet: PingReq) -> None:
        self._actions.append(Send(PINGRESP))

    def _disconnect(self, packet: Disconnect) -> None:
        # DISCONNECT discards the will [MQTT-3.14.4-3]; 5.0 reason 0x04 asks to publish it.
        if packet.reason_code != ReasonCode.DISCONNECT_WITH_WILL_MESSAGE:
            self._will = None
        self._close(DisconnectReason.CLIENT_DISCONNECT)

    # ----- CONNECT ----------------------------------------------------------------------

    def _connect(self, packet: Connect) -> None:
        self.version = packet.protocol_version
        settings = self._settings
        client_id = packet.client_id
        connack_properties: dict[int, Any] = {}
        if not client_id:
            if self.version == 3 or (self.version == 4 and not packet.clean_start):
                # 3.1 needs 1..23 characters; 3.1.1 allows an empty id only with clean
                # session 1 [MQTT-3.1.3-8].
                self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "empty client id")
                return
            client_id = f"auto-{uuid.uuid4().hex}"  # [MQTT-3.1.3-6]
            if self.version >= 5:
                connack_properties[PropertyId.ASSIGNED_CLIENT_IDENTIFIER] = client_id
        if len(client_id) > settings.max_client_id_length:
            self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")
            return
        username = packet.username
        if settings.identity_as_username:
            if self._identity is None:
                self._refuse(
                    _NOT_AUTHORIZED,
                    "no client certificate (with a common name): this listener takes the "
                    "user name from it (use_identity_as_username)",
                )
                return
            username = self._identity
        client = ClientInfo(
            client_id=client_id,
            username=username,
            peer=self.peer,
            protocol_version=self.version,
            clean_start=packet.clean_start,
            keepalive=packet.keepalive,
        )
        self.client = client
        if self._banned(client):
            return
        hooks = self._hooks
        if hooks.has(HookPoint.CLIENT_CONNECT):
            hooks.run(
                HookPoint.CLIENT_CONNECT, ClientConnect(client=client, properties=packet.properties)
            )
        if self.version >= 5 and self._enhanced_auth_requested(packet, connack_properties):
            return
        if not settings.identity_as_username:
            # With the certificate's identity, the TLS handshake authenticated the client.
            result = hooks.authenticate(
                AuthenticateRequest(client=client, password=packet.password)
            )
            assert isinstance(result, AuthResult)  # no method: never AuthContinue (HookBus)
            if not result.allowed:
                assert result.reason is not None
                self._refuse(
                    result.reason.connack_v5, f"authentication failed: {result.reason.value}"
                )
                return
        self._accept(packet, connack_properties)

    def _accept(self, packet: Connect, connack_properties: dict[int, Any]) -> None:
        """The client is authenticated: check its will, then open its session."""
        client = self.client
        assert client is not None
        if self.version >= 5 and not self._settings.shared_subscriptions:
            # Absent, it means 1 (available) (3.2.2.3.13): announced only when off.
            connack_properties[PropertyId.SHARED_SUBSCRIPTION_AVAILABLE] = 0
        if packet.will is not None:
            will = packet.will
            if self.version >= 5 and not may_publish(self._hooks, client, will.topic, will.qos):
                # 5.0 can say why [MQTT-3.2.2-8]; 3.x clients learn nothing, and their will
                # is checked again (and dropped) when it would be published.
                self._refuse(_NOT_AUTHORIZED, f"will on {will.topic!r} not authorised")
                return
            self._will = Message(
                topic=will.topic,
                payload=will.payload,
                qos=will.qos,
                retain=will.retain,
                publisher=client.client_id,
                username=client.username,
                properties=will.properties,
            )
        self.phase = Phase.CONNECTING
        timeout = packet.keepalive * KEEPALIVE_GRACE if packet.keepalive else None
        self._actions.append(SetReadTimeout(timeout))
        self._actions.append(OpenSession(client, connack_properties))

    def _banned(self, client: ClientInfo) -> bool:
        """Refuse a banned client with CONNACK 0x8A (3.1.1: 0x05 not authorised)."""
        admit = self._settings.admit
        banned = admit(client) if admit is not None else None
        if banned is not None:
            self._refuse(ReasonCode.BANNED, banned)
        return banned is not None

    # ----- enhanced authentication (MQTT 5.0 section 4.12, channel.enhanced_auth) -------

    def _enhanced_auth_requested(self, packet: Connect, connack_properties: dict[int, Any]) -> bool:
        """If the 5.0 CONNECT names an Authentication Method, start the exchange and say so
        (True); also True when it is refused for Authentication Data without a method."""
        method = packet.properties.get(AUTHENTICATION_METHOD)
        data = packet.properties.get(AUTHENTICATION_DATA)
        if method is None:
            if data is None:
                return False
            self._refuse(
                ReasonCode.PROTOCOL_ERROR,
                "Authentication Data without an Authentication Method [MQTT-3.1.2-28]",
            )
            return True
        assert self.client is not None
        self._auth = AuthExchange(method, packet, connack_properties)
        request = AuthenticateRequest(
            client=self.client, password=packet.password, method=method, data=data
        )
        self._authenticated(self._hooks.authenticate(request))
        return True

    def _authenticated(self, result: AuthResult | AuthContinue) -> None:
        """Carry out the client.authenticate answer to a CONNECT with a method or to an AUTH
        before CONNACK."""
        exchange = self._auth
        assert exchange is not None and exchange.pending is not None
        if isinstance(result, AuthContinue):
            exchange.state = result.state
            self.phase = Phase.AUTHENTICATING
            self._actions.append(Send(auth_packet(CONTINUE, exchange.method, result.data)))
            return
        if not result.allowed:
            assert result.reason is not None
            self._refuse(result.reason.connack_v5, f"authentication failed: {result.reason.value}")
            return
        packet, connack_properties = exchange.pending, exchange.connack_properties
        connack_properties[AUTHENTICATION_METHOD] = exchange.method
        if result.data is not None:
            connack_properties[AUTHENTICATION_DATA] = result.data
        exchange.pending, exchange.connack_properties, exchange.state = None, {}, None
        if result.username is not None and self.client is not None:
            self.client = replace(self.client, username=result.username)
        self._accept(packet, connack_properties)

    def _auth_before_connack(self, packet: Packet) -> None:
        """A packet of a client whose CONNECT started an enhanced authentication."""
        exchange = self._auth
        assert exchange is not None and exchange.pending is not None and self.client is not None
        if isinstance(packet, Disconnect):
            self._close(DisconnectReason.CLIENT_DISCONNECT)
            return
        if not isinstance(packet, Auth):
            name = type(packet).__name__
            self._refuse(
                ReasonCode.PROTOCOL_ERROR,
                f"{name} before CONNACK of an enhanced authentication [MQTT-3.1.2-30]",
            )
            return
        why = exchange.mismatch(packet, CONTINUE)
        if why is not None:
            self._refuse(ReasonCode.PROTOCOL_ERROR, why)
            return
        request = AuthenticateRequest(
            client=self.client,
            password=None,
            method=exchange.method,
            data=packet.properties.get(AUTHENTICATION_DATA),
            state=exchange.state,
        )
        self._authenticated(self._hooks.authenticate(request))

    def _reauthenticate(self, packet: Auth) -> None:
        """AUTH from a connected client: a re-authentication (MQTT 5.0 section 4.12.1)."""
        self._flush_batch()
        exchange = self._auth
        client = self.client
        assert client is not None
        if exchange is None:
            self._violation("AUTH from a client that did not CONNECT with an Authentication Method")
            return
        why = exchange.mismatch(packet, CONTINUE if exchange.reauthenticating else REAUTHENTICATE)
        if why is not None:
            self._violation(why)
            return
        request = AuthenticateRequest(
            client=client,
            password=None,
            method=exchange.method,
            data=packet.properties.get(AUTHENTICATION_DATA),
            state=exchange.state if exchange.reauthenticating else None,
            reauthenticate=True,
        )
        result = self._hooks.authenticate(request)
        if isinstance(result, AuthContinue):
            exchange.reauthenticating, exchange.state = True, result.state
            self._actions.append(Send(auth_packet(CONTINUE, exchange.method, result.data)))
        elif result.allowed:
            exchange.reauthenticating, exchange.state = False, None
            self._actions.append(Send(auth_packet(SUCCESS, exchange.method, result.data)))
            logger.info("%s re-authenticated (%s)", self._name(), exchange.method)
        else:
            assert result.reason is not None
            # DISCONNECT has no 0x86: a refusal is 0x87 unless the method is the problem
            # [MQTT-4.12.1-2].
            code = result.reason.connack_v5
            if code != ReasonCode.BAD_AUTHENTICATION_METHOD:
                code = _NOT_AUTHORIZED
            logger.warning(
                "closing %s: re-authentication failed: %s", self._name(), result.reason.value
            )
            self._last_words(code)
            self._close(DisconnectReason.NOT_AUTHORIZED)

    def _refuse(self, reason_code: int, why: str) -> None:
        logger.info(
            "refused CONNECT from %s: %s (CONNACK reason 0x%02x)", self._name(), why, reason_code
        )
        self._actions.append(
            Send(encode(ConnAck(session_present=False, reason_code=reason_code), self.version))
        )
        self.client = None
        self._close(DisconnectReason.NOT_AUTHORIZED)

    # ----- closing ----------------------------------------------------------------------

    def _violation(self, why: str, reason_code: int = ReasonCode.PROTOCOL_ERROR) -> None:
        logger.warning("closing %s: protocol violation: %s", self._name(), why)
        self._last_words(reason_code)
        self._close(DisconnectReason.PROTOCOL_ERROR)

    def _last_words(self, reason_code: int) -> None:
        """A 5.0 client that connected learns why the server closes [MQTT-4.13.1-1]."""
        if self.phase is Phase.CONNECTED and self.version >= 5:
            self._actions.append(Send(encode(Disconnect(reason_code=reason_code), 5)))

    def _close(self, reason: DisconnectReason) -> None:
        """Everything a connection's end does; reached once (the phase guards it)."""
        was_connected = self.phase is Phase.CONNECTED
        if was_connected:
            self._flush_batch()
        self.phase = Phase.CLOSED
        will, self._will = self._will, None
        client = self.client
        actions = self._actions
        if will is not None and client is not None:
            # The will goes out on any close but a DISCONNECT, which discarded it unless it
            # asked for it (5.0 reason 0x04) [MQTT-3.1.2-8]; only if the client may publish
            # it now (the ACL may have changed since CONNECT).
            if may_publish(self._hooks, client, will.topic, will.qos):
                actions.append(Publish([will]))
            else:
                actions.append(Drop(will, DropReason.NOT_AUTHORIZED))
        actions.append(End(reason, was_connected))
        if was_connected and client is not None:
            if reason in (DisconnectReason.CLIENT_DISCONNECT, DisconnectReason.SOCKET_CLOSED):
                logger.info("%s disconnected: %s", self._name(), reason.value)
            if self._hooks.has(HookPoint.CLIENT_DISCONNECTED):
                self._hooks.run(
                    HookPoint.CLIENT_DISCONNECTED, ClientDisconnected(client=client, reason=reason)
                )

    def _name(self) -> str:
        if self.client is not None:
            return f"client {self.client.client_id!r} ({self.peer})"
        return f"connection {self.peer}"


def _shared_refusal(topic_filter: str, available: bool) -> tuple[int, str, str] | None:
    """(SUBACK reason code, filter, why) for a `$share/...` filter refused here, else None."""
    if not is_shared(topic_filter):
        return None
    if not available:
        reason = "shared subscriptions are off ([shared_subscriptions] enabled)"
        return ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED, topic_filter, reason
    try:
        parse_shared(topic_filter)
    except TopicError as error:
        return ReasonCode.TOPIC_FILTER_INVALID, topic_filter, str(error)
    return None


# What a connected client may send, and the method that handles it. A class-level table: a
# per-instance dict of bound methods would cost ~1 KB per idle connection.
_PACKET_HANDLERS: dict[type, Callable[[Channel, Any], None]] = {
    PublishPacket: Channel._publish,
    PubAck: Channel._ack,
    PubRec: Channel._ack,
    PubComp: Channel._ack,
    PubRel: Channel._pubrel,
    Subscribe: Channel._subscribe,
    Unsubscribe: Channel._unsubscribe,
    PingReq: Channel._ping,
    Disconnect: Channel._disconnect,
    Auth: Channel._reauthenticate,
}
