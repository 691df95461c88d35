"""Channel: the MQTT protocol of one connection, as pure state with packets in and actions out.

In the manner of h11 and EMQX's `emqx_channel`: each method takes what happened (packets
decoded from one read, the session attached, the connection lost, a close asked by the
server) and returns the `channel.actions` to carry out, in order. It does no I/O and tells no
actor; it calls the hook bus (authentication, ACL and the client hooks), which plugins
implement.

`Channel` is put together from one part per responsibility, each in its module on top of
`channel.base` (the state, the flush of a batch into actions, how a connection ends):
`channel.connect` (CONNECT, the will, authentication), `channel.publish_intake` (PUBLISH,
acknowledgements, PUBREL, QoS 2 PUBLISHes waiting for room) and `channel.subscriptions`
(SUBSCRIBE, UNSUBSCRIBE); `channel.pubacks` decides every PUBACK/PUBREC the channel sends.
This module holds its inputs (the public methods), the handling of a read's packets by
phase and by type, PINGREQ and DISCONNECT.

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

Every reason code of an answer to what the client sent is chosen in this package, in 5.0
terms (`mqtt.reason_codes.ReasonCode`); the encoder maps it down for 3.1/3.1.1 clients. What only
the session knows (a PUBREC's 0x10 or 0x97, PUBREL/PUBCOMP, SUBACK grants, UNSUBACK codes)
is the session protocol's (`session.protocol`). A 5.0 client is also told why in a Reason
String: on a refused CONNACK and a server DISCONNECT always, on a refused PUBACK/PUBREC and
SUBACK when it asked for problem information; `channel.problems` keeps the rules (which
packets, what size).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

from channel.actions import (
    Acknowledged,
    Action,
    InputHandled,
    Send,
)
from channel.base import _IDLE, ChannelSettings, Phase
from channel.connect import ConnectHandling
from channel.negotiation import disconnect_session_expiry
from channel.publish_intake import ACK_OF_PACKET, PublishIntake
from channel.subscriptions import SubscriptionHandling
from core.reasons import DisconnectReason
from core.session_state import NO_PACKET_IDS, Ack
from hooks.events import ClientConnected
from hooks.hookpoints import HookPoint
from mqtt.errors import MqttError, UnsupportedProtocolVersionError
from mqtt.packets import (
    Auth,
    Connect,
    Disconnect,
    Packet,
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

# One logger for the whole connection protocol, whichever module of it speaks: operators
# (and the pool's tests) know its lines by this name.
logger = logging.getLogger("channel.channel")


# What other modules take from here: the channel, its settings and its phases.
__all__ = ["Channel", "ChannelSettings", "Phase"]

PINGRESP = b"\xd0\x00"
_CLIENT_AUTHORIZE = HookPoint.CLIENT_AUTHORIZE  # Enum member lookups cost ~0.2 µs

# The 5.0 DISCONNECT reason a server close sends a connected 5.0 client [MQTT-4.13.1-1].
_CLOSE_CODES: dict[DisconnectReason, int] = {
    DisconnectReason.TAKEN_OVER: ReasonCode.SESSION_TAKEN_OVER,
    DisconnectReason.SERVER_SHUTDOWN: ReasonCode.SERVER_SHUTTING_DOWN,
    DisconnectReason.KEEPALIVE_TIMEOUT: ReasonCode.KEEP_ALIVE_TIMEOUT,
    DisconnectReason.PROTOCOL_ERROR: ReasonCode.PROTOCOL_ERROR,
    DisconnectReason.SERVER_ERROR: ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR,
    DisconnectReason.ADMINISTRATIVE_ACTION: ReasonCode.ADMINISTRATIVE_ACTION,
    DisconnectReason.CREDENTIALS_EXPIRED: ReasonCode.NOT_AUTHORIZED,
    DisconnectReason.CLUSTER_UNREACHABLE: ReasonCode.USE_ANOTHER_SERVER,
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
    DisconnectReason.CLUSTER_UNREACHABLE: "this node lost its cluster: use another server",
}


class Channel(ConnectHandling, PublishIntake, SubscriptionHandling):
    """The protocol state of one connection; see the module docstring for the phases."""

    __slots__ = ()

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

    def _handle(self, packet: Packet) -> None:
        """One packet of a connected client, to the handler of its type."""
        _PACKET_HANDLERS[type(packet)](self, packet)

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


def _close_text(reason: DisconnectReason, detail: str) -> str:
    """The Reason String of a server close: what `reason` means, then the close's detail."""
    text = _CLOSE_TEXTS.get(reason, reason.value.replace("_", " "))
    detail = detail.strip(" ()")
    return f"{text}: {detail}" if detail else text


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
