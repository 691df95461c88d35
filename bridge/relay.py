"""The packets a bridge passes between its local session and the remote broker (pure).

The bridge is a client on both sides: of this broker, as the session `$bridge/<name>` (an
MQTT 5.0 connection), and of the remote broker. It relays each QoS flow as it is, with the
same packet id on both sides, so the two brokers' sessions do all the bookkeeping:

- out: the local session's PUBLISH (packet id L) goes to the remote with id L and the
  remote topic; the remote's PUBACK / PUBREC / PUBCOMP for L goes back to the local session
  as its acknowledgement, and the local session's PUBREL for L goes to the remote. The local
  session gives a message up only once the remote has taken it (PUBACK, or PUBREC for
  QoS 2), and it stores what is in flight: after a lost connection or a restart it resends
  the same PUBLISH (DUP, id L) or PUBREL, and a remote that kept the bridge's session takes
  a QoS 2 resend as the same message [MQTT-4.3.3-9]: exactly once end to end.
- in: the remote's PUBLISH (packet id R) is published locally with id R and the local
  topic; this broker's acknowledgement of R goes back to the remote, and the remote's PUBREL
  to this broker. The remote gives a message up only once this broker has it.

The ids never collide: the local session's ids are its own outgoing ones, unique while in
flight [MQTT-2.2.1-3], and only the relay sends PUBLISHes to the remote; the same holds for
the remote's ids toward the bridge.

A message that matches no topic line of its direction (a subscription left over from an
older configuration) is acknowledged at once and counted in `unmapped`. A 3.1.1 remote gets
no properties and sends none; reason codes cross only between 5.0 sides.

What the remote takes bounds what goes out (`RemoteLimits`): a PUBLISH larger than the
bridge's `max_packet_size` or the remote's Maximum Packet Size is not sent [MQTT-3.2.2-15]
but acknowledged to the local session as if the remote had taken it, as a server discards a
packet too large for its client [MQTT-3.1.2-25], and counted in `too_large`: sent, the
remote would close the connection, and the resend after the reconnect would stop the
bridge for good. The retain flag is cleared on the way out without `outgoing_retain`, or
when a 5.0 remote says Retain Available 0 [MQTT-3.2.2-14]. A PUBLISH above a 5.0 remote's
Maximum QoS goes at that QoS [MQTT-3.2.2-11]: at QoS 0 the local flow is acknowledged here
at once; a QoS 2 message sent at QoS 1 has the remote's PUBACK passed on as the PUBREC the
local session waits for, and its PUBREL answered here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.frames import RawPublish, for_3_1_1
from bridge.topics import TopicMap
from mqtt.encoder import encode
from mqtt.packets import Packet, PubAck, PubComp, Publish, PubRec, PubRel
from mqtt.properties import PropertyId

# Properties that belong to one connection, not to the message [MQTT-3.3.4-6] [MQTT-3.3.2-7]
_PER_CONNECTION = (PropertyId.TOPIC_ALIAS, PropertyId.SUBSCRIPTION_IDENTIFIER)
_SUCCESS_LIMIT = 0x80  # reason codes below are successes (section 2.4)


@dataclass(slots=True)
class Relayed:
    """The packets one side's input makes: for the local session and for the remote."""

    # bytes: a 3.1.1 remote's plain acknowledgement (`bridge.frames.is_plain_ack`)
    to_local: list[Packet | bytes] = field(default_factory=list)
    to_remote: list[Packet | bytes] = field(default_factory=list)  # bytes: a RawPublish's


@dataclass(slots=True)
class RelayCounts:
    """Messages relayed, for the operations surface."""

    sent: int = 0  # PUBLISHes forwarded to the remote broker
    received: int = 0  # PUBLISHes from the remote broker published here
    unmapped: int = 0  # acknowledged without being forwarded: no topic line has them
    too_large: int = 0  # acknowledged without being forwarded: larger than the remote takes


@dataclass(frozen=True, slots=True)
class RemoteLimits:
    """What one connection's remote takes: the largest packet (0: no bound), whether the
    retain flag may be set, and the highest QoS."""

    max_packet_size: int = 0
    retain: bool = True
    max_qos: int = 2

    @classmethod
    def of(
        cls, max_packet_size: int, outgoing_retain: bool, connack: dict[int, Any]
    ) -> RemoteLimits:
        """The limits of a bridge configured with `max_packet_size` (0: none) and
        `outgoing_retain`, whose remote answered with the CONNACK properties `connack`."""
        remote_size: int = connack.get(PropertyId.MAXIMUM_PACKET_SIZE, 0)
        sizes = [size for size in (max_packet_size, remote_size) if size]
        retain = outgoing_retain and connack.get(PropertyId.RETAIN_AVAILABLE, 1) == 1
        max_qos: int = connack.get(PropertyId.MAXIMUM_QOS, 2)
        return cls(min(sizes) if sizes else 0, retain, max_qos)


class Relay:
    """One bridge's relay between its local session (5.0) and a remote of `remote_version`."""

    __slots__ = (
        "_limits",
        "_qos2_as_qos1",
        "_released_here",
        "_remote_version",
        "_topics",
        "counts",
    )

    def __init__(
        self,
        topics: TopicMap,
        remote_version: int,
        counts: RelayCounts | None = None,
        limits: RemoteLimits = RemoteLimits(),
    ) -> None:
        self._topics = topics
        self._remote_version = remote_version
        self._limits = limits
        # Out: QoS 2 ids whose local PUBREL is answered here: the remote refused them in its
        # PUBREC (5.0, code >= 0x80), which ends that flow [MQTT-4.3.3-13], or took them at
        # a lower QoS
        self._released_here: set[int] = set()
        # Out: QoS 2 ids sent at QoS 1 (a 5.0 remote's Maximum QoS 1): their PUBACK stands
        # for the PUBREC the local session waits for
        self._qos2_as_qos1: set[int] = set()
        self.counts = counts if counts is not None else RelayCounts()

    def from_local(self, packets: Sequence[Packet | RawPublish | bytes]) -> Relayed:
        """What the local session sent the bridge (a read of its connection); a RawPublish
        only toward a 3.1.1 remote (`bridge.frames`)."""
        out = Relayed()
        for packet in packets:
            if type(packet) is RawPublish:
                self._outgoing_raw(packet, out)
            elif type(packet) is Publish:
                self._outgoing(packet, out)
            elif type(packet) is PubRel and packet.packet_id in self._released_here:
                self._released_here.discard(packet.packet_id)
                out.to_local.append(PubComp(packet.packet_id))
            elif isinstance(packet, PubAck | PubRec | PubRel | PubComp):
                out.to_remote.append(_ack(packet, self._remote_version))
        return out

    def from_remote(self, packets: Sequence[Packet | RawPublish | bytes]) -> Relayed:
        """What the remote broker sent the bridge (never a RawPublish; bytes only from a
        3.1.1 remote: a plain acknowledgement, the same to the local session)."""
        out = Relayed()
        for packet in packets:
            if type(packet) is bytes:
                out.to_local.append(packet)
            elif type(packet) is Publish:
                self._incoming(packet, out)
            elif type(packet) is PubAck and packet.packet_id in self._qos2_as_qos1:
                self._qos2_as_qos1.discard(packet.packet_id)
                self._released_here.add(packet.packet_id)
                out.to_local.append(PubRec(packet.packet_id, packet.reason_code))
            elif type(packet) is PubRec and packet.reason_code >= _SUCCESS_LIMIT:
                self._released_here.add(packet.packet_id)
                out.to_local.append(PubRec(packet.packet_id, packet.reason_code))
            elif isinstance(packet, PubAck | PubRec | PubRel | PubComp):
                out.to_local.append(_ack(packet, 5))
        return out

    def _outgoing(self, packet: Publish, out: Relayed) -> None:
        topic = self._topics.to_remote(packet.topic)
        if topic is None:
            self.counts.unmapped += 1
            self._drop(packet.qos, packet.packet_id or 0, out)
            return
        limits = self._limits
        renamed = _renamed(packet, topic, self._remote_version, limits.retain, limits.max_qos)
        item: Publish | bytes = renamed
        if limits.max_packet_size:  # measured as it goes out
            item = encode(renamed, self._remote_version)
        if not self._send_within(item, packet.qos, packet.packet_id, out):
            return
        if renamed.qos < packet.qos:  # [MQTT-3.2.2-11]: no more than the remote's Maximum QoS
            if renamed.qos == 0:  # nothing comes back: the local flow ends here
                self._drop(packet.qos, packet.packet_id or 0, out)
            else:
                self._qos2_as_qos1.add(renamed.packet_id or 0)

    def _outgoing_raw(self, packet: RawPublish, out: Relayed) -> None:
        """`_outgoing` for a PUBLISH read as bytes, to a 3.1.1 remote."""
        assert self._remote_version < 5, "a RawPublish is for a 3.1.1 remote"
        topic = self._topics.to_remote(packet.topic)
        if topic is None:
            self.counts.unmapped += 1
            self._drop(packet.qos, packet.packet_id, out)
            return
        self._send_within(
            for_3_1_1(packet, topic, self._limits.retain), packet.qos, packet.packet_id, out
        )

    def _send_within(
        self, item: Publish | bytes, qos: int, packet_id: int | None, out: Relayed
    ) -> bool:
        """Send the PUBLISH `item` (encoded where there is a bound) unless it is larger
        than the remote takes: then it is acknowledged to the local session (False)."""
        bound = self._limits.max_packet_size
        if bound and isinstance(item, bytes) and len(item) > bound:
            self.counts.too_large += 1
            self._drop(qos, packet_id or 0, out)
            return False
        self.counts.sent += 1
        out.to_remote.append(item)
        return True

    def _drop(self, qos: int, packet_id: int, out: Relayed) -> None:
        """Acknowledge to the local session a message that does not go out."""
        ack = _unforwarded_ack_of(qos, packet_id)
        if ack is not None:
            out.to_local.append(ack)
            if type(ack) is PubRec:
                self._released_here.add(ack.packet_id)

    def _incoming(self, packet: Publish, out: Relayed) -> None:
        topic = self._topics.to_local(packet.topic)
        if topic is None:
            self.counts.unmapped += 1
            # After a PUBREC the remote sends PUBREL, which this broker answers (PUBCOMP 0x92
            # for an id it does not know; a 3.1.1 session answers any PUBREL).
            ack = _unforwarded_ack_of(packet.qos, packet.packet_id or 0)
            if ack is not None:
                out.to_remote.append(ack)
            return
        self.counts.received += 1
        out.to_local.append(_renamed(packet, topic, 5))


def _ack(packet: PubAck | PubRec | PubRel | PubComp, version: int) -> Packet:
    """`packet` for a side of `version`: reason codes and properties only to 5.0."""
    if version < 5 and (packet.reason_code or packet.properties):
        return type(packet)(packet.packet_id)
    return packet


def _renamed(
    packet: Publish, topic: str, version: int, retain: bool = True, max_qos: int = 2
) -> Publish:
    """`packet` under `topic`, with the properties a side of `version` gets, its retain
    flag kept only if `retain`, at `max_qos` at most."""
    properties = {}
    if version >= 5 and packet.properties:
        properties = {k: v for k, v in packet.properties.items() if k not in _PER_CONNECTION}
    qos = min(packet.qos, max_qos)
    return Publish(
        topic,
        packet.payload,
        qos,
        packet.retain and retain,
        packet.dup,
        packet.packet_id if qos else None,
        properties,
    )


def _unforwarded_ack_of(qos: int, packet_id: int) -> PubAck | PubRec | None:
    """What accepts a message that is not forwarded: PUBACK ends a QoS 1 exchange, PUBREC
    answers a QoS 2 one; QoS 0 needs nothing."""
    if qos == 1:
        return PubAck(packet_id)
    return PubRec(packet_id) if qos == 2 else None
