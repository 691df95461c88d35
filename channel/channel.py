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
  handled, in order, once it is attached (their input counts as unhandled until then). A
  pool may still refuse the CONNECT here (`session_refused`: the id's home found it banned).
- CONNECTED: PUBLISH QoS 0/1 are routed (with their PUBACK, [MQTT-4.3.2-2]); QoS 2 PUBLISH,
  PUBREL, acknowledgements, SUBSCRIBE and UNSUBSCRIBE become session inputs; a second CONNECT
  is a protocol violation [MQTT-3.1.0-2]. A QoS 2 PUBLISH with a new id while
  `max_awaiting_rel` ids await PUBREL waits, with what must stay in order behind it, until a
  PUBREL frees room (docs/overload.md).
- CLOSED: reached exactly once, however the connection ends: the will is published unless
  the client sent DISCONNECT [MQTT-3.1.2-8/10] and only if the ACL allows it then; the
  `client.disconnected` hook runs if the client had connected; `End` is the last action.

Every reason code of an answer to what the client sent is chosen here, in 5.0 terms
(`mqtt.reason_codes.ReasonCode`); the encoder maps it down for 3.1/3.1.1 clients. What only
the session knows (a PUBREC's 0x10 or 0x97, PUBREL/PUBCOMP, SUBACK grants, UNSUBACK codes)
is the session protocol's (`session.protocol`). A 5.0 client is also told why in a Reason
String: on a refused CONNACK and a server DISCONNECT always, on a refused PUBACK/PUBREC and
SUBACK when it asked for problem information; `channel.problems` keeps the rules (which
packets, what size).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, cast

from channel.actions import (
    Acknowledged,
    Action,
    Drop,
    End,
    ExpireCredentials,
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
from channel.negotiation import Offer, disconnect_session_expiry, negotiate
from channel.problems import (
    problems_allowed,
    reason_string,
    user_properties,
    with_properties,
)
from channel.pubacks import Pubacks, pubrec, refusal
from core.client import BRIDGE_CLIENT_PREFIX, NO_LIMIT, ClientInfo
from core.message import Message, new_message
from core.reasons import DisconnectReason, DropReason
from core.session_state import NO_PACKET_IDS, Ack, with_packet_id, without_packet_id
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
from mqtt.encoder import encode
from mqtt.errors import MqttError, UnsupportedProtocolVersionError
from mqtt.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    Unsubscribe,
    Will,
)
from mqtt.packets import (
    Publish as PublishPacket,
)
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from mqtt.topics import TopicError
from mqtt.wire import has_control_characters
from router.shared import inner_filter, is_shared, parse_shared

logger = logging.getLogger(__name__)

PINGRESP = b"\xd0\x00"
KEEPALIVE_GRACE = 1.5  # the server closes after 1.5 x the keep-alive of silence [MQTT-3.1.2-24]
ACK_OF_PACKET: dict[type, Ack] = {PubAck: Ack.PUBACK, PubRec: Ack.PUBREC, PubComp: Ack.PUBCOMP}

_PUBREC = PubRec.packet_type
_CLIENT_AUTHORIZE = HookPoint.CLIENT_AUTHORIZE  # Enum member lookups cost ~0.2 µs
_TOPIC_ALIAS = PropertyId.TOPIC_ALIAS
_MAXIMUM_PACKET_SIZE = PropertyId.MAXIMUM_PACKET_SIZE
_PAYLOAD_FORMAT_INDICATOR = PropertyId.PAYLOAD_FORMAT_INDICATOR
_SUCCESS = ReasonCode.SUCCESS
_NOT_AUTHORIZED = ReasonCode.NOT_AUTHORIZED


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
    # `limits.allow_control_characters`: accept a client id or will topic that holds
    # U+0001-U+001F or U+007F-U+009F (refused by default, as Mosquitto does).
    allow_control_characters: bool = False
    # The listener's `use_identity_as_username`: the TLS client certificate's CN becomes the
    # username (a client without a certificate is refused), as in Mosquitto.
    identity_as_username: bool = False
    # The banned table's check (`actors.admission`): why a CONNECT is refused, or None.
    admit: Callable[[ClientInfo], str | None] | None = None
    offer: Offer = field(default_factory=Offer)  # what 5.0 clients are offered (CONNACK)
    # Incoming QoS 2 messages awaiting PUBREL (`limits.max_awaiting_rel`): a new one beyond
    # waits, with what follows it, until a PUBREL frees room; at most this many packets and
    # payload bytes wait (`limits.max_unprocessed_packets` / `_bytes`), beyond: close.
    max_awaiting_rel: int = 100
    max_waiting_packets: int = 1000
    max_waiting_bytes: int = 1_048_576
    # The in-process connection of one of the broker's own bridges (`bridge.local_link`):
    # trusted without authentication, and the only one that may use a client id under
    # `BRIDGE_CLIENT_PREFIX`.
    internal: bool = False


# The 5.0 DISCONNECT reason a server close sends a connected 5.0 client [MQTT-4.13.1-1].
_CLOSE_CODES: dict[DisconnectReason, int] = {
    DisconnectReason.TAKEN_OVER: ReasonCode.SESSION_TAKEN_OVER,
    DisconnectReason.SERVER_SHUTDOWN: ReasonCode.SERVER_SHUTTING_DOWN,
    DisconnectReason.KEEPALIVE_TIMEOUT: ReasonCode.KEEP_ALIVE_TIMEOUT,
    DisconnectReason.PROTOCOL_ERROR: ReasonCode.PROTOCOL_ERROR,
    DisconnectReason.SERVER_ERROR: ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR,
    DisconnectReason.ADMINISTRATIVE_ACTION: ReasonCode.ADMINISTRATIVE_ACTION,
    DisconnectReason.CREDENTIALS_EXPIRED: ReasonCode.NOT_AUTHORIZED,
}

# The Reason String of a server close (with the close's detail, if any, after a colon).
_CLOSE_TEXTS: dict[DisconnectReason, str] = {
    DisconnectReason.TAKEN_OVER: "session taken over by another connection",
    DisconnectReason.SERVER_SHUTDOWN: "server shutting down",
    DisconnectReason.KEEPALIVE_TIMEOUT: "keep-alive timeout",
    DisconnectReason.PROTOCOL_ERROR: "protocol error",
    DisconnectReason.SERVER_ERROR: "server error",
    DisconnectReason.ADMINISTRATIVE_ACTION: "administrative action",
    DisconnectReason.CREDENTIALS_EXPIRED: "credentials expired",
}

# The Reason String of a SUBACK refusal, per filter, when the channel has no more to say.
_SUBSCRIBE_REFUSALS: dict[int, str] = {
    ReasonCode.NOT_AUTHORIZED: "not authorised",
    ReasonCode.TOPIC_FILTER_INVALID: "topic filter invalid",
    ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: "shared subscriptions are not supported",
    ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED: "wildcard subscriptions are not supported",
    ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: (
        "subscription identifiers are not supported"
    ),
}


class Channel:
    """The protocol state of one connection; see the module docstring for the phases."""

    __slots__ = (
        "_acks",
        "_actions",
        "_aliases",
        "_auth",
        "_awaiting",
        "_bridge",
        "_check_acl",
        "_disconnect_properties",
        "_held",
        "_held_input",
        "_hooks",
        "_identity",
        "_inbound_qos2",
        "_packet_limit",
        "_pauses",
        "_pubacks",
        "_qos1_in_batch",
        "_qos2",
        "_releases",
        "_session_expiry",
        "_settings",
        "_to_route",
        "_waiting",
        "_waiting_bytes",
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
        self._pubacks: Pubacks | None = None  # the batch's PUBACKs (`channel.pubacks`)
        self._qos2: list[tuple[int, Message | None, bytes]] = _IDLE
        self._acks: list[tuple[Ack, int]] = _IDLE
        self._releases: list[int] = _IDLE
        self._check_acl = False  # whether a client.authorize callback exists (per batch)
        self._auth: AuthExchange | None = None  # MQTT 5.0 enhanced authentication, if used
        self._bridge = False  # a 3.x broker's bridge (the bridge bit of its CONNECT)
        # MQTT 5 only, created when first used:
        self._aliases: dict[int, str] | None = None  # the client's topic aliases
        self._inbound_qos2: set[int] | None = None  # this connection's QoS 2 ids awaiting PUBREL
        self._qos1_in_batch = 0  # QoS 1 PUBLISHes of this batch (their PUBACKs not yet sent)
        self._session_expiry: float | None = None  # set by a 5.0 DISCONNECT
        self._disconnect_properties: dict[int, Any] | None = None
        # The 5.0 client's Maximum Packet Size, which a Reason String must not break (from
        # CONNECT on; `channel.problems`).
        self._packet_limit = NO_LIMIT
        # The session's incoming QoS 2 ids awaiting PUBREL, as the session holds them (given
        # at attach, then changed by what this channel tells it), and the packets that wait
        # for a PUBREL to free room (`_wait`), with their payload bytes.
        self._awaiting: set[int] | frozenset[int] = NO_PACKET_IDS
        self._waiting: deque[Packet] | None = None
        self._waiting_bytes = 0
        self._pauses = 0  # how often something waited (only the first is logged at INFO)

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
        return self._answer()

    def _answer(self) -> list[Action]:
        """The actions of the input being handled; the channel keeps no list between two
        inputs (an idle connection's last answer held about 0.1 KB)."""
        actions, self._actions = self._actions, _IDLE
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

    def session_refused(self, reason_code: int, why: str) -> list[Action]:
        """The registry refused to open the session (a pool's home worker found the client
        id banned): CONNACK `reason_code` and close, as a refusal at CONNECT does. The will
        is dropped: only an accepted CONNECT stores one [MQTT-3.1.2-8]."""
        self._actions = []
        if self.phase is Phase.CONNECTING:
            self._will = None
            self._refuse(reason_code, why)
        return self._answer()

    def session_attached(
        self, session_present: bool, awaiting_rel: frozenset[int] = NO_PACKET_IDS
    ) -> list[Action]:
        """The session wrote CONNACK (and its resends): handle what was held meanwhile.
        `awaiting_rel`: the incoming QoS 2 ids the session still awaits PUBREL for (a
        resumed session's), which count against `max_awaiting_rel`."""
        actions = self._actions = []
        if self.phase is not Phase.CONNECTING:
            return self._answer()
        client = self.client
        assert client is not None
        self.phase = Phase.CONNECTED
        self._awaiting = set(awaiting_rel) if awaiting_rel else NO_PACKET_IDS
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
        return self._answer()

    def connection_lost(
        self, reason: DisconnectReason, error: MqttError | None = None, detail: str = ""
    ) -> list[Action]:
        """The socket side stopped: peer closed, socket error, a timeout, or bad input."""
        self._actions = []
        if self.phase is Phase.CLOSED:
            return self._answer()
        if isinstance(error, UnsupportedProtocolVersionError) and (
            self.phase is Phase.AWAITING_CONNECT
        ):
            # [MQTT-3.1.2-2]: CONNACK 0x01 (0x84 in 5.0), then close.
            self._refuse(ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, str(error))
            return self._answer()
        if error is not None:
            logger.warning("closing %s: %s", self._name(), error)
            self._last_words(error.reason_code, str(error))
        elif reason is not DisconnectReason.SOCKET_CLOSED:
            logger.info("closing %s: %s (%s)", self._name(), reason.value, detail)
            if reason is DisconnectReason.KEEPALIVE_TIMEOUT:  # 5.0 section 4.13
                self._last_words(ReasonCode.KEEP_ALIVE_TIMEOUT, _close_text(reason, detail))
        self._close(reason)
        return self._answer()

    def close(
        self,
        reason: DisconnectReason,
        detail: str = "",
        reason_code: int | None = None,
        *,
        session_ended: bool = False,
    ) -> list[Action]:
        """The server closes the connection (takeover, shutdown, a session limit, a bug); a
        5.0 client is told why with `reason_code`, by default the one of `reason`. When the
        session ends with it (`session_ended`, or a shutdown, whose timers do not survive),
        a will with a Will Delay Interval is published at once [MQTT-3.1.3-9]."""
        self._actions = []
        if self.phase is not Phase.CLOSED:
            logger.info("closing %s: %s %s", self._name(), reason.value, detail)
            code = _CLOSE_CODES.get(reason) if reason_code is None else reason_code
            if code is not None:
                self._last_words(code, _close_text(reason, detail))
            will_now = session_ended or reason is DisconnectReason.SERVER_SHUTDOWN
            self._close(reason, will_now=will_now)
        return self._answer()

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
        self._to_route, self._qos2, self._acks, self._releases = [], [], [], []
        self._qos1_in_batch = 0
        for packet in packets:
            handler = _PACKET_HANDLERS.get(type(packet))
            if handler is None:
                self._violation(f"{type(packet).__name__} is not a client-to-server packet")
                return
            if self._waiting is not None and type(packet) in _WAIT_BEHIND:
                self._wait(packet)  # in order, behind a QoS 2 PUBLISH that waits for room
            else:
                handler(self, packet)
            if self.phase is not Phase.CONNECTED:
                return  # DISCONNECT or a violation closed the connection
        self._flush_batch()
        self._to_route = self._qos2 = self._acks = self._releases = _IDLE

    def _flush_batch(self) -> None:
        actions = self._actions
        pubacks = self._pubacks
        if self._to_route:
            # The PUBACKs are written once routing is done (and durable, if it must be).
            actions.append(Publish(self._to_route, pubacks))
            self._to_route = []
        elif pubacks is not None:
            actions.append(Send(pubacks.routed()))  # refusals only: nothing to route
        if pubacks is not None:
            self._pubacks = None
            self._qos1_in_batch = 0
        if self._qos2:
            actions.append(InboundQos2(self._qos2))
            self._qos2 = []
        if self._acks:
            actions.append(Acknowledged(self._acks))
            self._acks = []
        if self._releases:
            actions.append(Released(self._releases))
            self._releases = []

    def _publish(self, packet: PublishPacket) -> None:
        if packet.qos == 2 and self._held_back(packet):
            return
        client = self.client
        assert client is not None
        topic = packet.topic if self.version < 5 else self._v5_topic(packet)
        if topic is None:
            return
        if topic.count("/") >= self._settings.max_topic_levels:
            self._violation(f"topic {topic[:64]!r} has more than limits.max_topic_levels levels")
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
        if allowed and packet.properties and self._payload_format_invalid(packet):
            allowed = False
            code = ReasonCode.PAYLOAD_FORMAT_INVALID
            self._actions.append(Drop(message, DropReason.PAYLOAD_FORMAT_INVALID))
        qos = packet.qos
        if qos == 0:
            if allowed:
                self._to_route.append(message)
            return
        packet_id = packet.packet_id
        assert packet_id is not None
        if qos == 1:
            pubacks = self._pubacks
            if pubacks is None:
                pubacks = self._pubacks = Pubacks(client)
            if allowed:
                self._to_route.append(message)
                pubacks.accept(packet_id, message)
            else:
                pubacks.refuse(packet_id, code, topic)
        else:
            self._publish_qos2(packet_id, message if allowed else None, code, topic)

    def _publish_qos2(self, packet_id: int, message: Message | None, code: int, topic: str) -> None:
        """A QoS 2 PUBLISH (`message` None: refused with `code`) for the session, which
        records the packet id and routes a new message once (method B of [MQTT-4.3.3-2]);
        a refused one completes its flow without being routed."""
        if self._releases and (
            len(self._awaiting) + len(self._releases) >= self._settings.max_awaiting_rel
        ):
            # The session must see the batch's PUBRELs free the room this PUBLISH may take.
            self._flush_batch()
        if message is not None:
            self._qos2.append((packet_id, message, pubrec(packet_id, self.version)))
            self._awaiting = with_packet_id(self._awaiting, packet_id)
            return
        assert self.client is not None
        refused = refusal(_PUBREC, packet_id, code, topic, self.client)
        self._qos2.append((packet_id, None, refused))
        if self.version < 5:  # acknowledged anyway (no reason codes): its PUBREL follows
            self._awaiting = with_packet_id(self._awaiting, packet_id)
        elif self._inbound_qos2 and packet_id not in self._awaiting:
            # A PUBREC of 0x80 or more ends the exchange: the id is new again [MQTT-4.3.3-9]
            # and no longer counts against the Receive Maximum (section 4.9).
            self._inbound_qos2.discard(packet_id)

    def _payload_format_invalid(self, packet: PublishPacket) -> bool:
        """With `validate_utf8_payloads`, whether a payload marked UTF-8 is not: refused with
        0x99 (section 3.3.2.3.2; [MQTT-3.3.2-4] lets the receiver check)."""
        if not (
            self._settings.offer.validate_utf8_payloads
            and packet.properties.get(_PAYLOAD_FORMAT_INDICATOR) == 1
            and not _is_utf8(packet.payload)
        ):
            return False
        logger.info("%s: payload on %r is not the UTF-8 it claims", self._name(), packet.topic)
        return True

    def _v5_topic(self, packet: PublishPacket) -> str | None:
        """The topic of a 5.0 PUBLISH (its Topic Alias resolved), or None if it breaks the
        limits CONNACK announced (then the connection is closed with the reason code)."""
        if not self._v5_publish_allowed(packet):
            return None
        if packet.properties and _TOPIC_ALIAS in packet.properties:
            return self._resolve_alias(packet)
        return packet.topic

    def _v5_publish_allowed(self, packet: PublishPacket) -> bool:
        """The CONNACK's limits on what a 5.0 client may publish; a breach closes with its
        reason code."""
        offer = self._settings.offer
        if packet.qos > offer.maximum_qos:
            self._violation(
                f"PUBLISH QoS {packet.qos} above the Maximum QoS {offer.maximum_qos} "
                "(section 3.2.2.3.4)",
                ReasonCode.QOS_NOT_SUPPORTED,
            )
            return False
        if packet.retain and not offer.retain_available:
            self._violation(
                "retained PUBLISH, but Retain Available is 0 (section 3.2.2.3.5)",
                ReasonCode.RETAIN_NOT_SUPPORTED,
            )
            return False
        if packet.qos:
            if self._over_receive_maximum(packet):
                return False
            if packet.qos == 1:
                self._qos1_in_batch += 1
            else:
                qos2 = self._inbound_qos2
                if qos2 is None:
                    qos2 = self._inbound_qos2 = set()
                qos2.add(cast(int, packet.packet_id))
        return True

    def _over_receive_maximum(self, packet: PublishPacket) -> bool:
        """Whether a 5.0 client's QoS 1/2 PUBLISH is one more unacknowledged on this
        connection than the Receive Maximum CONNACK announced [MQTT-3.3.4-7]; if so the
        connection is closed with DISCONNECT 0x93."""
        qos2 = self._inbound_qos2
        if qos2 and packet.packet_id in qos2:
            return False  # a resend of one already counted
        maximum = self._settings.offer.receive_maximum
        if self._qos1_in_batch + (len(qos2) if qos2 else 0) < maximum:
            return False
        self._violation(
            f"more than the Receive Maximum of {maximum} unacknowledged QoS 1/2 PUBLISHes "
            "[MQTT-3.3.4-7]",
            ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
        )
        return True

    def _resolve_alias(self, packet: PublishPacket) -> str | None:
        """The topic of a PUBLISH with a Topic Alias, recording a new mapping; None (and the
        connection closed) for an alias out of range or unknown [MQTT-3.3.2-7..10]."""
        alias = packet.properties[_TOPIC_ALIAS]
        maximum = self._settings.offer.topic_alias_maximum if self.version >= 5 else 0
        if not 0 < alias <= maximum:
            self._violation(
                f"Topic Alias {alias} outside 1..{maximum}, the Topic Alias Maximum announced "
                "[MQTT-3.3.2-9]",
                ReasonCode.TOPIC_ALIAS_INVALID,
            )
            return None
        if self._aliases is None:
            self._aliases = {}
        if packet.topic:
            self._aliases[alias] = packet.topic
            return packet.topic
        topic = self._aliases.get(alias)
        if topic is None:
            self._violation(f"Topic Alias {alias} used before it was set (section 3.3.4)")
        return topic

    def _ack(self, packet: PubAck | PubRec | PubComp) -> None:
        self._acks.append((ACK_OF_PACKET[type(packet)], packet.packet_id))

    def _pubrel(self, packet: PubRel) -> None:
        if self._qos2:
            self._flush_batch()  # the QoS 2 PUBLISH must reach the session before its PUBREL
        packet_id = packet.packet_id
        if self._inbound_qos2:
            self._inbound_qos2.discard(packet_id)
        self._awaiting = without_packet_id(self._awaiting, packet_id)
        self._releases.append(packet_id)
        if self._waiting is not None:
            self._resume_waiting()

    # ----- QoS 2 PUBLISHes beyond max_awaiting_rel ---------------------------------------
    #
    # The session keeps every incoming QoS 2 id until its PUBREL, at most `max_awaiting_rel`
    # of them. A client with more outstanding (MQTT 3.1.1 sets no bound; a 5.0 client that
    # resumed a session with ids still awaiting PUBREL, whose send quota starts afresh on
    # the new connection, section 4.9) is not refused: its next QoS 2 PUBLISH with a new id
    # waits here, and every PUBLISH, SUBSCRIBE and UNSUBSCRIBE after it waits behind it, in
    # order, while the channel goes on reading the rest (PUBREL, acknowledgements, PINGREQ,
    # DISCONNECT): the PUBRELs that free room come on this connection, behind what waits.
    # What waits is bounded like unhandled input; beyond that the connection is closed.

    def _no_room(self, packet: PublishPacket) -> bool:
        """Whether a QoS 2 PUBLISH must wait: a new id while `max_awaiting_rel` await PUBREL
        (a re-sent id is answered at once: it takes no room)."""
        awaiting = self._awaiting
        return len(awaiting) >= self._settings.max_awaiting_rel and (
            packet.packet_id not in awaiting
        )

    def _held_back(self, packet: PublishPacket) -> bool:
        """If a QoS 2 PUBLISH finds no room: it waits, or, from a 5.0 client over the Receive
        Maximum, closes the connection (one within it waits for the PUBRELs of the ids its
        resumed session holds)."""
        if not self._no_room(packet):
            return False
        if self.version < 5 or not self._over_receive_maximum(packet):
            self._wait(packet)
        return True

    def _wait(self, packet: Packet) -> None:
        """Hold `packet` until PUBRELs free room; close if too much waits."""
        waiting = self._waiting
        if waiting is None:
            waiting = self._waiting = deque()
            # A client that keeps its window just over the bound pauses once per message.
            logger.log(
                logging.DEBUG if self._pauses else logging.INFO,
                "%s has %d QoS 2 messages awaiting PUBREL (limits.max_awaiting_rel): its "
                "PUBLISHes wait until PUBRELs free room",
                self._name(),
                len(self._awaiting),
            )
            self._pauses += 1
        waiting.append(packet)
        if type(packet) is PublishPacket:
            self._waiting_bytes += len(packet.payload)
        settings = self._settings
        if (
            len(waiting) > settings.max_waiting_packets
            or self._waiting_bytes > settings.max_waiting_bytes
        ):
            why = (
                f"{len(waiting)} packets ({self._waiting_bytes} payload bytes) wait behind "
                f"{len(self._awaiting)} QoS 2 messages awaiting PUBREL, more than "
                "limits.max_unprocessed_packets / _bytes: the client must send PUBREL for the "
                "PUBRECs it received, or keep fewer QoS 2 messages in flight than "
                "limits.max_awaiting_rel"
            )
            logger.warning("closing %s: %s", self._name(), why)
            self._last_words(ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, why)
            self._close(DisconnectReason.QOS2_BACKLOG)

    def _resume_waiting(self) -> None:
        """A PUBREL freed room: handle what waits, in order, as long as there is room."""
        waiting = self._waiting
        assert waiting is not None
        first = waiting[0]
        if type(first) is PublishPacket and first.qos == 2 and self._no_room(first):
            return
        self._flush_batch()  # the session frees the room (Released) before it is taken again
        while waiting:
            packet = waiting[0]
            if type(packet) is PublishPacket:
                if packet.qos == 2 and self._no_room(packet):
                    return
                self._waiting_bytes -= len(packet.payload)
            waiting.popleft()
            _PACKET_HANDLERS[type(packet)](self, packet)
            if self.phase is not Phase.CONNECTED:
                return
        self._waiting = None
        logger.debug("%s: PUBRELs freed room, no PUBLISH waits any more", self._name())

    def _subscribe(self, packet: Subscribe) -> None:
        self._flush_batch()
        client = self.client
        assert client is not None
        hooks = self._hooks
        if hooks.has(HookPoint.CLIENT_SUBSCRIBE):
            filters = tuple(
                TopicFilterRequest(
                    topic_filter=s.topic_filter,
                    qos=s.qos,
                    no_local=s.no_local,
                    retain_as_published=s.retain_as_published,
                    retain_handling=s.retain_handling,
                )
                for s in packet.subscriptions
            )
            hooks.run(
                HookPoint.CLIENT_SUBSCRIBE,
                ClientSubscribe(client=client, filters=filters, properties=packet.properties),
            )
        offer = self._settings.offer
        subscription_ids = packet.properties.get(PropertyId.SUBSCRIPTION_IDENTIFIER)
        refused: dict[int, int] = {}
        details: dict[int, str] = {}  # why a filter was refused, beyond its reason code
        subscriptions = list(packet.subscriptions)
        if self._bridge:
            # What a bridge publishes is not sent back to it, and what it receives keeps its
            # retain flag, as Mosquitto does for a client with the bridge bit (`try_private`).
            subscriptions = [
                replace(s, no_local=True, retain_as_published=True) for s in subscriptions
            ]
        for index, subscription in enumerate(subscriptions):
            topic_filter = subscription.topic_filter
            refusal = _subscription_refusal(topic_filter, bool(subscription_ids), offer)
            shared = _shared_refusal(topic_filter)
            read_filter = inner_filter(topic_filter)  # a shared one reads after its share name
            if refusal is not None:
                refused[index] = refusal
            elif shared is not None:
                logger.info("%s: subscribe to %r refused: %s", self._name(), *shared[1:])
                refused[index], details[index] = shared[0], shared[2]
            elif read_filter.count("/") >= self._settings.max_topic_levels:
                refused[index] = ReasonCode.TOPIC_FILTER_INVALID
                details[index] = (
                    f"more than limits.max_topic_levels ({self._settings.max_topic_levels}) levels"
                )
            elif self._check_acl and not may_read(hooks, client, read_filter, subscription.qos):
                logger.info("%s: subscribe to %r denied", self._name(), topic_filter)
                refused[index] = _NOT_AUTHORIZED
            elif subscription.qos > offer.maximum_qos:
                # Granted at most the Maximum QoS (section 3.9.3, and 3.2.2.3.4)
                subscriptions[index] = replace(subscription, qos=offer.maximum_qos)
        if refused:
            logger.info(
                "%s: SUBSCRIBE %d refused %d of %d filters (codes %s)",
                self._name(),
                packet.packet_id,
                len(refused),
                len(subscriptions),
                ", ".join(f"0x{code:02x}" for code in refused.values()),
            )
        self._actions.append(
            SubscribeRequest(
                packet.packet_id,
                subscriptions,
                refused,
                subscription_ids[0] if subscription_ids else None,
                self._suback_problems(packet.packet_id, subscriptions, refused, details)
                if refused
                else None,
            )
        )

    def _suback_problems(
        self,
        packet_id: int,
        subscriptions: list[Subscription],
        refused: dict[int, int],
        details: dict[int, str],
    ) -> dict[int, Any] | None:
        """The SUBACK properties that say why filters were refused: a Reason String naming
        each, if the client asked for problem information and it fits (`channel.problems`)."""
        client = self.client
        if not problems_allowed(client):
            return None
        assert client is not None
        why = "; ".join(
            f"{subscriptions[index].topic_filter!r}: "
            + (details.get(index) or _SUBSCRIBE_REFUSALS.get(code, f"reason 0x{code:02x}"))
            for index, code in refused.items()
        )
        # The session fills in the granted codes; one byte each, so the size is known now.
        stand_in = SubAck(packet_id, [0] * len(subscriptions))
        fitted, _data = with_properties(stand_in, (reason_string(why),), client.maximum_packet_size)
        return fitted.properties or None

    def _unsubscribe(self, packet: Unsubscribe) -> None:
        self._flush_batch()
        if self._hooks.has(HookPoint.CLIENT_UNSUBSCRIBE):
            assert self.client is not None
            filters = tuple(TopicFilterRequest(topic_filter=f) for f in packet.topic_filters)
            self._hooks.run(
                HookPoint.CLIENT_UNSUBSCRIBE,
                ClientUnsubscribe(
                    client=self.client, filters=filters, properties=packet.properties
                ),
            )
        self._actions.append(UnsubscribeRequest(packet.packet_id, list(packet.topic_filters)))

    def _ping(self, _packet: PingReq) -> None:
        self._actions.append(Send(PINGRESP))

    def _disconnect(self, packet: Disconnect) -> None:
        client = self.client
        assert client is not None
        if packet.properties:
            try:
                self._session_expiry = disconnect_session_expiry(
                    client.session_expiry,
                    packet.properties.get(PropertyId.SESSION_EXPIRY_INTERVAL),
                    self._settings.offer,
                )
            except ValueError as error:
                self._violation(str(error))
                return
            self._disconnect_properties = packet.properties
        # DISCONNECT discards the will [MQTT-3.14.4-3]; 5.0 reason 0x04 asks to publish it.
        if packet.reason_code != ReasonCode.DISCONNECT_WITH_WILL_MESSAGE:
            self._will = None
        self._close(DisconnectReason.CLIENT_DISCONNECT)

    # ----- CONNECT ----------------------------------------------------------------------

    def _connect(self, packet: Connect) -> None:
        self.version = packet.protocol_version
        self._packet_limit = packet.properties.get(_MAXIMUM_PACKET_SIZE, NO_LIMIT)
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
        if self._strings_refused(packet, client_id) or self._bridge_refused(packet, client_id):
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
        terms = negotiate(packet, settings.offer)
        connack_properties.update(terms.connack_properties)
        client = ClientInfo(
            client_id=client_id,
            username=username,
            peer=self.peer,
            protocol_version=self.version,
            clean_start=packet.clean_start,
            keepalive=terms.keepalive,
            session_expiry=terms.session_expiry,
            receive_maximum=terms.receive_maximum,
            maximum_packet_size=terms.maximum_packet_size,
            topic_alias_maximum=terms.topic_alias_maximum,
            request_problem_information=terms.request_problem_information,
            properties=packet.properties,
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
        # The broker's own bridge (in process, `settings.internal`) has nothing to prove.
        if not (settings.identity_as_username or settings.internal):
            # With the certificate's identity, the TLS handshake authenticated the client.
            result = hooks.authenticate(
                AuthenticateRequest(client=client, password=packet.password)
            )
            assert isinstance(result, AuthResult)  # no method: never AuthContinue (HookBus)
            if not result.allowed:
                assert result.reason is not None
                self._refuse(
                    result.reason.connack_v5,
                    f"authentication failed: {result.reason.value}",
                    result.user_properties,
                )
                return
            self._accept(packet, connack_properties, result.user_properties)
            self._expire_at(result)
            return
        self._accept(packet, connack_properties)

    def _accept(
        self,
        packet: Connect,
        connack_properties: dict[int, Any],
        pairs: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """The client is authenticated: check its will, then open its session. `pairs`: the
        authentication's User Properties for a 5.0 CONNACK, if they fit [MQTT-3.2.2-20]."""
        client = self.client
        assert client is not None
        if packet.will is not None and not self._accept_will(packet.will, client):
            return
        if pairs and self.version >= 5:
            # The session writes this CONNACK; its Session Present flag does not change the size.
            connack, _data = with_properties(
                ConnAck(properties=connack_properties),
                (user_properties(pairs),),
                self._packet_limit,
            )
            connack_properties = connack.properties
        self.phase = Phase.CONNECTING
        timeout = client.keepalive * KEEPALIVE_GRACE if client.keepalive else None
        self._actions.append(SetReadTimeout(timeout))
        self._actions.append(OpenSession(client, connack_properties))

    def _bridge_refused(self, packet: Connect, client_id: str) -> bool:
        """Refuse a client id under `BRIDGE_CLIENT_PREFIX` from outside (the broker's own
        bridges' sessions), and say so (True); note a 3.x bridge (the bridge bit of its
        CONNECT: `_subscribe`)."""
        if client_id.startswith(BRIDGE_CLIENT_PREFIX) and not self._settings.internal:
            self._refuse(
                ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                f"client id {client_id!r}: ids starting with {BRIDGE_CLIENT_PREFIX!r} belong to "
                "the broker's own bridges (choose another client id)",
            )
            return True
        self._bridge = packet.bridge
        return False

    def _strings_refused(self, packet: Connect, client_id: str) -> bool:
        """Refuse a CONNECT whose client id is over `max_client_id_length`, or (unless
        `allow_control_characters`) whose client id or will topic holds a control
        character, which a UTF-8 string SHOULD NOT (3.1.1 section 1.5.3, 5.0 section
        1.5.4), and say so (True). The id: CONNACK 0x85 (3.x: 0x02 identifier rejected).
        The will topic: 5.0 CONNACK 0x90, "the Will Topic Name is not malformed, but is not
        accepted by this Server" (3.2.2.2); no 3.x return code fits, so a 3.x client is
        closed."""
        settings = self._settings
        if len(client_id) > settings.max_client_id_length:
            self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")
            return True
        if settings.allow_control_characters:
            return False
        if has_control_characters(packet.client_id):
            why = f"client id {packet.client_id!r} holds control characters (section 1.5.4)"
            self._refuse(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, why)
            return True
        will = packet.will
        if will is None or not has_control_characters(will.topic):
            return False
        why = f"will topic {will.topic!r} holds control characters (section 1.5.4)"
        if self.version >= 5:
            self._refuse(ReasonCode.TOPIC_NAME_INVALID, why)
        else:
            self._violation(why)
        return True

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
            self._refuse(
                result.reason.connack_v5,
                f"authentication failed: {result.reason.value}",
                result.user_properties,
            )
            return
        packet, connack_properties = exchange.pending, exchange.connack_properties
        connack_properties[AUTHENTICATION_METHOD] = exchange.method
        if result.data is not None:
            connack_properties[AUTHENTICATION_DATA] = result.data
        exchange.pending, exchange.connack_properties, exchange.state = None, {}, None
        if result.username is not None and self.client is not None:
            self.client = replace(self.client, username=result.username)
        self._accept(packet, connack_properties, result.user_properties)
        self._expire_at(result)

    def _expire_at(self, result: AuthResult) -> None:
        """An accepted client whose credentials expire is closed then (or at the time a
        re-authentication's credentials expire, which replaces it)."""
        if result.expires_at is not None and self.phase is not Phase.CLOSED:
            self._actions.append(ExpireCredentials(result.expires_at))

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
            self._expire_at(result)
            logger.info("%s re-authenticated (%s)", self._name(), exchange.method)
        else:
            assert result.reason is not None
            # DISCONNECT has no 0x86: a refusal is 0x87 unless the method is the problem
            # [MQTT-4.12.1-2].
            code = result.reason.connack_v5
            if code != ReasonCode.BAD_AUTHENTICATION_METHOD:
                code = _NOT_AUTHORIZED
            why = f"re-authentication failed: {result.reason.value}"
            logger.warning("closing %s: %s", self._name(), why)
            self._last_words(code, why)
            self._close(DisconnectReason.NOT_AUTHORIZED)

    def _accept_will(self, will: Will, client: ClientInfo) -> bool:
        """Keep the CONNECT's will for the close; False (CONNECT refused) if it asks for
        more than the broker offers or (5.0) the ACL denies it."""
        offer = self._settings.offer
        if will.qos > offer.maximum_qos or (will.retain and not offer.retain_available):
            # A will beyond what the broker offers is refused [MQTT-3.2.2-12/13].
            self._refuse(
                ReasonCode.QOS_NOT_SUPPORTED
                if will.qos > offer.maximum_qos
                else ReasonCode.RETAIN_NOT_SUPPORTED,
                f"will with QoS {will.qos}, retain {will.retain}: not offered ([mqtt])",
            )
            return False
        if self.version >= 5 and not may_publish(self._hooks, client, will.topic, will.qos):
            # 5.0 can say why [MQTT-3.2.2-8]; 3.x clients learn nothing, and their will
            # is checked again (and dropped) when it would be published.
            self._refuse(_NOT_AUTHORIZED, f"will on {will.topic!r} not authorised")
            return False
        self._will = Message(
            topic=will.topic,
            payload=will.payload,
            qos=will.qos,
            retain=will.retain,
            publisher=client.client_id,
            username=client.username,
            properties=will.properties,
        )
        return True

    def _refuse(self, reason_code: int, why: str, pairs: tuple[tuple[str, str], ...] = ()) -> None:
        """CONNACK `reason_code` and close. A 5.0 client is told `why` in a Reason String,
        and gets the authentication's User Properties `pairs`, whatever its Request Problem
        Information (CONNACK is exempt, [MQTT-3.1.2-29]), each only if it fits [MQTT-3.2.2-19]
        [MQTT-3.2.2-20]."""
        logger.info(
            "refused CONNECT from %s: %s (CONNACK reason 0x%02x)", self._name(), why, reason_code
        )
        connack = ConnAck(session_present=False, reason_code=reason_code)
        if self.version >= 5:
            additions = (reason_string(why), user_properties(pairs))
            data = with_properties(connack, additions, self._packet_limit)[1]
        else:
            data = encode(connack, self.version)
        self._actions.append(Send(data))
        self.client = None
        self._close(DisconnectReason.NOT_AUTHORIZED)

    # ----- closing ----------------------------------------------------------------------

    def _violation(self, why: str, reason_code: int = ReasonCode.PROTOCOL_ERROR) -> None:
        logger.warning("closing %s: protocol violation: %s", self._name(), why)
        self._last_words(reason_code, why)
        self._close(DisconnectReason.PROTOCOL_ERROR)

    def _last_words(self, reason_code: int, why: str) -> None:
        """A 5.0 client that connected learns why the server closes [MQTT-4.13.1-1]: the
        reason code, and `why` as a Reason String unless that would break its Maximum Packet
        Size [MQTT-3.14.2-3]. DISCONNECT may carry it whatever the client's Request Problem
        Information [MQTT-3.1.2-29]."""
        if self.phase is Phase.CONNECTED and self.version >= 5:
            disconnect = Disconnect(reason_code=reason_code)
            data = with_properties(disconnect, (reason_string(why),), self._packet_limit)[1]
            self._actions.append(Send(data))

    def _close(self, reason: DisconnectReason, will_now: bool = False) -> None:
        """Everything a connection's end does; reached once (the phase guards it).
        `will_now`: the session ends too, so a delayed will does not wait."""
        was_connected = self.phase is Phase.CONNECTED
        if was_connected:
            self._flush_batch()
        self.phase = Phase.CLOSED
        if self._waiting:
            # Never acknowledged: a client that keeps its session sends them again.
            logger.info(
                "%s: %d packets that waited for PUBRELs are dropped with the connection",
                self._name(),
                len(self._waiting),
            )
        self._waiting = None
        will, self._will = self._will, None
        client = self.client
        actions = self._actions
        end = End(reason, was_connected, session_expiry=self._session_expiry)
        if will is not None and client is not None:
            # The will goes out on any close but a DISCONNECT, which discarded it unless it
            # asked for it (5.0 reason 0x04) [MQTT-3.1.2-8]; only if the client may publish
            # it now (the ACL may have changed since CONNECT). Its Message Expiry Interval
            # counts from now. Its Will Delay Interval is the broker's to keep, not a PUBLISH
            # property (section 3.3.2.3): subscribers and a pool's other workers never see it.
            delay = 0.0 if will_now else self._will_delay(will, client)
            will = replace(will, timestamp=time.time(), properties=_publish_properties(will))
            if not may_publish(self._hooks, client, will.topic, will.qos):
                actions.append(Drop(will, DropReason.NOT_AUTHORIZED))
            elif delay:
                # The session publishes it after the delay unless it is resumed first, or
                # when it ends, whichever comes first [MQTT-3.1.3-9].
                end.will, end.will_delay = will, delay
            else:
                actions.append(Publish([will]))
        actions.append(end)
        if was_connected and client is not None:
            if reason in (DisconnectReason.CLIENT_DISCONNECT, DisconnectReason.SOCKET_CLOSED):
                logger.info("%s disconnected: %s", self._name(), reason.value)
            if self._hooks.has(HookPoint.CLIENT_DISCONNECTED):
                self._hooks.run(
                    HookPoint.CLIENT_DISCONNECTED,
                    ClientDisconnected(
                        client=client, reason=reason, properties=self._disconnect_properties or {}
                    ),
                )

    def _will_delay(self, will: Message, client: ClientInfo) -> float:
        """Seconds the will waits: its Will Delay Interval, at most as long as the session
        lives on (0: publish now, also when the session ends with the connection)."""
        delay = will.properties.get(PropertyId.WILL_DELAY_INTERVAL, 0) if will.properties else 0
        if not delay:
            return 0.0
        expiry = client.session_expiry if self._session_expiry is None else self._session_expiry
        return float(min(delay, expiry))

    def _name(self) -> str:
        if self.client is not None:
            return f"client {self.client.client_id!r} ({self.peer})"
        return f"connection {self.peer}"


def _publish_properties(will: Message) -> dict[int, Any]:
    """The will's properties without Will Delay Interval, which PUBLISH may not carry."""
    properties = will.properties
    if PropertyId.WILL_DELAY_INTERVAL not in properties:
        return properties
    return {k: v for k, v in properties.items() if k != PropertyId.WILL_DELAY_INTERVAL}


def _close_text(reason: DisconnectReason, detail: str) -> str:
    """The Reason String of a server close: what `reason` means, then the close's detail."""
    text = _CLOSE_TEXTS.get(reason, reason.value.replace("_", " "))
    detail = detail.strip(" ()")
    return f"{text}: {detail}" if detail else text


def _shared_refusal(topic_filter: str) -> tuple[int, str, str] | None:
    """(SUBACK reason code, filter, why) for a `$share/...` filter that does not parse."""
    if not is_shared(topic_filter):
        return None
    try:
        parse_shared(topic_filter)
    except TopicError as error:
        return ReasonCode.TOPIC_FILTER_INVALID, topic_filter, str(error)
    return None


def _is_utf8(payload: bytes) -> bool:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _subscription_refusal(topic_filter: str, has_identifier: bool, offer: Offer) -> int | None:
    """The SUBACK reason code for a filter that asks for what the broker does not offer (as
    CONNACK announced it), or None."""
    if is_shared(topic_filter) and not offer.shared_subscriptions:
        return ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED  # 3.2.2.3.13
    if not offer.wildcard_subscriptions and ("+" in topic_filter or "#" in topic_filter):
        return ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED  # 3.2.2.3.11
    if has_identifier and not offer.subscription_identifiers:
        return ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED  # 3.2.2.3.12
    return None


# What waits behind a QoS 2 PUBLISH that waits for room (`Channel._wait`): what must keep
# its order with it. Acknowledgements, PUBREL (which frees the room), PINGREQ, DISCONNECT and
# AUTH are handled at once.
_WAIT_BEHIND = frozenset({PublishPacket, Subscribe, Unsubscribe})

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
