"""The incremental, bounded packet decoder: bytes in, complete packets out (sans-I/O).

`PacketDecoder.feed(data)` frames every complete packet in the buffered bytes and decodes it.
Invariants:
- The remaining length is checked against `max_packet_size` as soon as the fixed header is
  read, so an oversized packet is rejected before its body arrives, and the bytes held
  between calls never exceed the maximum packet size.
- A feed copies its input at most once: incomplete bytes accumulate in a `bytearray` and are
  turned into one `bytes` buffer when a packet can complete; packets are then parsed by
  offsets over that buffer, so each payload is sliced (copied) exactly once. The leftover
  tail is compacted once per feed, not per packet.
- The first error raises an `MqttError` subclass and makes the decoder unusable: the
  connection must be closed.
- Before the protocol version is known only CONNECT is accepted [MQTT-3.1.0-1]; reading a
  CONNECT's protocol level sets `protocol_version` (if still unset) before the rest of the
  packet is validated, so a broker can answer a bad CONNECT in the client's version.
- A broker's decoder (`from_client`) refuses the packets only a server sends (CONNACK,
  SUBACK, UNSUBACK, PINGRESP; the direction column of table 2-1, section 2.1.2) as a
  Protocol Error (0x82) as soon as their fixed header is read, before their flags or body
  are looked at: the type alone breaks the protocol [MQTT-4.8.0-1]. Not on the PUBLISH
  path: only packets that reach the general decoding pay for the check.
"""

from __future__ import annotations

from mqtt.decode_bodies import BODY_DECODERS, decode_publish
from mqtt.decode_connect import BRIDGE_BIT, decode_connack, decode_connect, read_protocol
from mqtt.errors import MalformedPacketError, MqttError, PacketTooLargeError, ProtocolError
from mqtt.packets import Packet, PacketType, PubAck, PubComp, PubRec, PubRel
from mqtt.wire import MAX_VARINT

MAX_PACKET_SIZE = MAX_VARINT + 5
"""The largest packet MQTT can frame: a 4-byte remaining length of 268,435,455 plus header."""

_PLAIN_QOS0_PUBLISH = 0x30  # PUBLISH, QoS 0, no DUP, no RETAIN
_PUBLISH = PacketType.PUBLISH
# The acknowledgements, by their first byte with the flags each must have [MQTT-2.2.2-1]
# (PUBREL 0b0010 [MQTT-3.6.1-1], the others 0).
_BARE_ACKS: dict[int, type[PubAck | PubRec | PubRel | PubComp]] = {
    PacketType.PUBACK << 4: PubAck,
    PacketType.PUBREC << 4: PubRec,
    PacketType.PUBREL << 4 | 0b0010: PubRel,
    PacketType.PUBCOMP << 4: PubComp,
}
_CONNECT = PacketType.CONNECT
_CONNACK = PacketType.CONNACK
_FLAGS_0010 = frozenset({PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE})
# What only a server sends (section 2.1.2, table 2-1), refused by a broker's decoder.
_SERVER_ONLY = frozenset(
    {PacketType.CONNACK, PacketType.SUBACK, PacketType.UNSUBACK, PacketType.PINGRESP}
)
_NONE: frozenset[int] = frozenset()


def _read_remaining_length(buf: bytes, pos: int, size: int) -> tuple[int, int]:
    """`(remaining_length, body_start)`, or `(-1, bytes_needed)` if the header is incomplete."""
    value = 0
    shift = 0
    index = pos + 1
    for _ in range(4):
        if index >= size:
            return -1, index - pos + 1
        byte = buf[index]
        index += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index
        shift += 7
    raise MalformedPacketError("remaining length is longer than 4 bytes (section 2.2.3)")


def _check_flags(packet_type: int, flags: int, version: int) -> None:
    """Reserved fixed-header flags [MQTT-2.2.2-1] [MQTT-2.2.2-2]; 3.1 also allows DUP."""
    if packet_type in _FLAGS_0010:
        if flags == 0b0010 or (version == 3 and flags & 0b0111 == 0b0010):
            return
        raise MalformedPacketError(
            f"{PacketType(packet_type).name} fixed-header flags are 0b{flags:04b}, must be "
            "0b0010 [MQTT-2.2.2-1] [MQTT-2.2.2-2] [MQTT-3.6.1-1] [MQTT-3.8.1-1] [MQTT-3.10.1-1]"
        )
    if flags:
        raise MalformedPacketError(
            f"{PacketType(packet_type).name} fixed-header flags are 0b{flags:04b}, must be "
            "0 [MQTT-2.2.2-1] [MQTT-2.2.2-2]"
        )


class PacketDecoder:
    """Turns a byte stream into MQTT packets; one instance per connection direction.

    `max_packet_size` bounds a whole packet (fixed header included, as MQTT 5.0 Maximum
    Packet Size does). `protocol_version` is 3, 4 or 5, or None until a CONNECT is read;
    clients set it up front. `from_client`: the decoder reads what a client sends (a
    broker's), so the packets only a server sends are a Protocol Error.
    """

    __slots__ = (
        "_failure",
        "_needed",
        "_pending",
        "_refused",
        "max_packet_size",
        "protocol_version",
    )

    def __init__(
        self,
        max_packet_size: int = 1_048_576,
        protocol_version: int | None = None,
        *,
        from_client: bool = False,
    ) -> None:
        if not 2 <= max_packet_size <= MAX_PACKET_SIZE:
            raise ValueError(
                f"max_packet_size {max_packet_size} must be within 2..{MAX_PACKET_SIZE}"
            )
        if protocol_version not in (None, 3, 4, 5):
            raise ValueError(f"protocol_version {protocol_version} must be None, 3, 4 or 5")
        self.max_packet_size = max_packet_size
        self.protocol_version = protocol_version
        self._pending = bytearray()
        self._needed = 0
        self._failure: MqttError | None = None
        self._refused = _SERVER_ONLY if from_client else _NONE

    @property
    def buffered(self) -> int:
        """How many bytes of an incomplete packet are held."""
        return len(self._pending)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        """Add `data`; return the packets it completes, in order. Raises `MqttError`."""
        if self._failure is not None:
            raise ProtocolError(
                f"decoder is unusable after an earlier error ({self._failure}); "
                "close the connection"
            )
        pending = self._pending
        if pending:
            pending += data
            if len(pending) < self._needed:
                return []
            buf = bytes(pending)
            pending.clear()
        else:
            buf = data if type(data) is bytes else bytes(data)
        packets: list[Packet] = []
        try:
            pos = self._split(buf, packets)
        except MqttError as exc:
            self._failure = exc
            raise
        if pos < len(buf):
            pending += memoryview(buf)[pos:]
        return packets

    def _split(self, buf: bytes, packets: list[Packet]) -> int:
        """Decode the complete packets of `buf` into `packets`; return where the rest starts."""
        pos = 0
        size = len(buf)
        limit = self.max_packet_size
        append = packets.append
        while pos < size:
            if pos + 1 < size and buf[pos + 1] < 0x80:
                remaining = buf[pos + 1]
                start = pos + 2
            else:
                remaining, start = _read_remaining_length(buf, pos, size)
                if remaining < 0:
                    if start > limit:  # even the unfinished fixed header is too long
                        raise PacketTooLargeError(
                            f"packet of at least {start} bytes exceeds the maximum packet "
                            f"size {limit}"
                        )
                    self._needed = start
                    return pos
            end = start + remaining
            if end - pos > limit:
                raise PacketTooLargeError(
                    f"packet of {end - pos} bytes exceeds the maximum packet size {limit}"
                )
            if end > size:
                self._needed = end - pos
                return pos
            first = buf[pos]
            if first >> 4 == _PUBLISH and self.protocol_version is not None:
                packet = decode_publish(first & 0x0F, buf, start, end, self.protocol_version)
                if first == _PLAIN_QOS0_PUBLISH and self.protocol_version < 5:
                    packet.wire = buf[pos:end]
                append(packet)
            elif (
                end - start == 2
                and (ack := _BARE_ACKS.get(first)) is not None
                and self.protocol_version is not None
            ):
                # One per QoS 1/2 message each way: a packet id alone (in 5.0: reason code 0
                # and no properties, sections 3.4.2.1-3.7.2.1), read as the full decoder
                # reads it, without its dispatch.
                append(ack((buf[start] << 8) | buf[start + 1]))
            else:
                append(self._decode_other(first, buf, start, end))
            pos = end
        self._needed = 0
        return pos

    def _decode_other(self, first: int, buf: bytes, start: int, end: int) -> Packet:
        packet_type = first >> 4
        flags = first & 0x0F
        if packet_type == _CONNECT:
            if flags:
                raise MalformedPacketError(
                    f"CONNECT fixed-header flags are 0b{flags:04b}, must be 0 [MQTT-2.2.2-2]"
                )
            name, level, pos = read_protocol(buf, start, end)
            if self.protocol_version is None:
                self.protocol_version = level & ~BRIDGE_BIT
            return decode_connect(buf, pos, end, name, level)
        version = self.protocol_version
        if version is None:
            raise ProtocolError(f"first packet is type {packet_type}, not CONNECT [MQTT-3.1.0-1]")
        if packet_type in self._refused:
            raise ProtocolError(
                f"{PacketType(packet_type).name} is sent only by a server (section 2.1.2), "
                "not by a client [MQTT-4.8.0-1]"
            )
        if packet_type == _PUBLISH:
            return decode_publish(flags, buf, start, end, version)
        if packet_type == 0:
            raise MalformedPacketError("packet type 0 is reserved (section 2.1.2)")
        _check_flags(packet_type, flags, version)
        if packet_type == _CONNACK:
            return decode_connack(buf, start, end, version)
        return BODY_DECODERS[packet_type](buf, start, end, version)
