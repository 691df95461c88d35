"""The state of one connection's protocol, its batch of answers, and how it ends.

`ChannelBase` holds everything a `channel.channel.Channel` knows about its connection (the
phase, the client, the will, the work collected from one batch of packets, the QoS 2 ids
awaiting PUBREL and what waits for them) and what every part of it shares: the flush of a
batch into actions (`_flush_batch`), and the one way a connection ends (`_close`, reached
once, with the CONNACK refusal `_refuse`, the protocol violation `_violation` and the
server's last words `_last_words` before it). The packet handlers build on it:
`channel.connect` (CONNECT and authentication), `channel.publish_intake` (PUBLISH, its
acknowledgements, PUBREL, and QoS 2 PUBLISHes waiting for room) and `channel.subscriptions`
(SUBSCRIBE, UNSUBSCRIBE). Pure: no I/O, no actors.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from channel.ack_order import AckOrder, AckSlot
from channel.actions import (
    Acknowledged,
    Action,
    Drop,
    End,
    InboundQos2,
    Publish,
    Released,
    Send,
)
from channel.authorization import may_publish
from channel.enhanced_auth import AuthExchange
from channel.negotiation import Offer
from channel.problems import (
    reason_string,
    user_properties,
    with_properties,
)
from channel.pubacks import Pubacks
from channel.publish_acl import PublishAcl
from core.client import NO_LIMIT, ClientInfo
from core.message import Message
from core.reasons import DisconnectReason, DropReason
from core.session_state import NO_PACKET_IDS, Ack
from hooks.events import ClientDisconnected
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt.encoder import encode
from mqtt.packets import (
    ConnAck,
    Disconnect,
    Packet,
)
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode

# One logger for the whole connection protocol, whichever module of it speaks: operators
# (and the pool's tests) know its lines by this name.
logger = logging.getLogger("channel.channel")


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
    # `[auth] acl_cache_ttl` and the clock its entries expire by (channel.publish_acl).
    acl_cache_ttl: float = 0.0
    clock: Callable[[], float] = time.monotonic


class ChannelBase:
    """The protocol state of one connection; `channel.channel.Channel` is the whole of it."""

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
        "_publish_acl",
        "_qos1_in_batch",
        "_qos2",
        "_releases",
        "_session_expiry",
        "_settings",
        "_to_route",
        "_waiting",
        "_waiting_bytes",
        "_will",
        "ack_order",
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
        # The order the acknowledgements of the batches leave in (`channel.ack_order`),
        # from the first QoS 1/2 PUBLISH on; the client actor writes what it releases.
        self.ack_order: AckOrder | None = None
        self._qos2: list[tuple[int, Message | None, bytes]] = _IDLE
        self._acks: list[tuple[Ack, int]] = _IDLE
        self._releases: list[int] = _IDLE
        self._check_acl = False  # whether a client.authorize callback exists (per batch)
        self._publish_acl: PublishAcl | None = None  # made at the first PUBLISH it checks
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

    def _handle(self, packet: Packet) -> None:
        """Handle one packet of a connected client (`Channel` picks its handler by type)."""
        raise NotImplementedError

    def _flush_batch(self) -> None:
        """The work collected from the batch so far, as actions in packet order: the QoS 0/1
        messages to route with the PUBACKs, then the session inputs."""
        actions = self._actions
        pubacks = self._pubacks
        if pubacks is not None:
            # Its PUBACKs leave after every earlier batch's acknowledgements, and before every
            # later one's, whenever they are known (`channel.ack_order`).
            pubacks.slot = self._ack_slot()
        if self._to_route:
            # The PUBACKs are written once routing is done (and durable, if it must be).
            actions.append(Publish(self._to_route, pubacks))
            self._to_route = []
        elif pubacks is not None:
            # Refusals only: nothing to route, the bytes are known now.
            actions.append(Send(pubacks.routed(), pubacks.slot))
        if pubacks is not None:
            self._pubacks = None
            self._qos1_in_batch = 0
        if self._qos2:
            # The PUBRECs, in the same order: the session fills the slot once it knows them.
            actions.append(InboundQos2(self._qos2, slot=self._ack_slot()))
            self._qos2 = []
        if self._acks:
            actions.append(Acknowledged(self._acks))
            self._acks = []
        if self._releases:
            actions.append(Released(self._releases))
            self._releases = []

    def _ack_slot(self) -> AckSlot:
        """The place of a batch's acknowledgements, after those of every batch before it."""
        order = self.ack_order
        if order is None:
            order = self.ack_order = AckOrder()
        return order.reserve()

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
