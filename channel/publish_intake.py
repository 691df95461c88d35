"""PUBLISH intake: what a connected client publishes, acknowledges and releases, pure.

`PublishIntake` is the part of `channel.channel.Channel` that handles PUBLISH, PUBACK,
PUBREC, PUBCOMP and PUBREL. A PUBLISH is checked against what CONNACK announced (5.0:
Maximum QoS, Retain Available, Receive Maximum [MQTT-3.3.4-7], topic aliases), the topic
levels and the ACL (`channel.authorization`) and, if asked, its UTF-8 payload; QoS 0/1
messages are collected for the batch's `Publish`, each QoS 1 one with its PUBACK
(`channel.pubacks`, which chooses every PUBACK/PUBREC code), and QoS 2 ones go to the
session with their PUBREC (`InboundQos2`). Acknowledgements and PUBRELs become session
inputs. A QoS 2 PUBLISH with a new id while `limits.max_awaiting_rel` ids await PUBREL
waits here, with what must stay in order behind it, until a PUBREL frees room
(docs/overload.md). (The bound on a connection's unhandled input is `channel.intake`.)
"""

from __future__ import annotations

import logging
from collections import deque
from typing import cast

from channel.actions import Drop
from channel.base import ChannelBase, Phase
from channel.pubacks import Pubacks, pubrec, refusal
from channel.publish_acl import PublishAcl
from core.client import ClientInfo
from core.message import Message, new_message
from core.reasons import DisconnectReason, DropReason
from core.session_state import Ack, with_packet_id, without_packet_id
from mqtt.packets import (
    Packet,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
)
from mqtt.packets import (
    Publish as PublishPacket,
)
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode

# One logger for the whole connection protocol, whichever module of it speaks: operators
# (and the pool's tests) know its lines by this name.
logger = logging.getLogger("channel.channel")


ACK_OF_PACKET: dict[type, Ack] = {PubAck: Ack.PUBACK, PubRec: Ack.PUBREC, PubComp: Ack.PUBCOMP}

_PUBREC = PubRec.packet_type
_TOPIC_ALIAS = PropertyId.TOPIC_ALIAS
_PAYLOAD_FORMAT_INDICATOR = PropertyId.PAYLOAD_FORMAT_INDICATOR
_SUCCESS = ReasonCode.SUCCESS
_NOT_AUTHORIZED = ReasonCode.NOT_AUTHORIZED


class PublishIntake(ChannelBase):
    """PUBLISH, its acknowledgements and PUBREL; QoS 2 PUBLISHes that wait for room."""

    __slots__ = ()

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
        allowed = not (self._check_acl or topic.startswith("$")) or self._may_publish(
            client, topic, packet.qos
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

    def _may_publish(self, client: ClientInfo, topic: str, qos: int) -> bool:
        """The ACL's answer for a PUBLISH, kept by this connection for a while."""
        acl = self._publish_acl
        if acl is None:
            settings = self._settings
            acl = PublishAcl(self._hooks, settings.acl_cache_ttl, settings.clock)
            self._publish_acl = acl
        return acl.allows(client, topic, qos)

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
            self._handle(packet)
            if self.phase is not Phase.CONNECTED:
                return
        self._waiting = None
        logger.debug("%s: PUBRELs freed room, no PUBLISH waits any more", self._name())


def _is_utf8(payload: bytes) -> bool:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
