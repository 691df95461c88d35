"""Packet encoding: `encode(packet, protocol_version)` for all 15 types, `encode_publish` fast.

Reason codes are MQTT 5.0 reason codes (`mqtt.reason_codes.ReasonCode`) in every version:
the broker decides in 5.0 terms and this module alone maps a decision down for a 3.1/3.1.1
client, where the packets carry less:
- CONNACK: a failure (>= 0x80) becomes the nearest 3.1.1 return code
  (`connack_return_code`, 3.1.1 section 3.2.2.3). Codes below 0x80 go out unchanged, so a
  3.x return code 0..5 given as such still encodes as itself.
- SUBACK: any failure becomes 0x80, the one failure return code of 3.1.1 [MQTT-3.9.3-2].
- PUBACK, PUBREC, PUBREL, PUBCOMP, UNSUBACK and DISCONNECT carry no reason code before 5.0:
  it is left out, as are all properties.

CONNECT is encoded in its own `protocol_version`/`protocol_name`. Optional 5.0 fields are
omitted when they hold their defaults (ack/DISCONNECT/AUTH reason code 0 without
properties), as the spec allows, so encoding is the inverse of decoding. The encoder trusts
its input: it does not re-validate topic syntax or property placement (that is the
decoder's job on the receiving side).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mqtt.decode_connect import BRIDGE_BIT as _BRIDGE_BIT
from mqtt.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from mqtt.properties import EMPTY_PROPERTY_BLOCK, encode_properties
from mqtt.reason_codes import SUBACK_FAILURE_V311, ReasonCode, connack_return_code
from mqtt.wire import MAX_VARINT, encode_binary, encode_string, encode_varint, frame

AckPacket = PubAck | PubRec | PubRel | PubComp


def encode_publish(  # noqa: PLR0917 - positional on purpose: the broker's hot-path signature
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int | None,
    properties: dict[int, Any] | None,
    protocol_version: int,
) -> bytes:
    """Encode a PUBLISH from its fields (the broker's hot path: no packet object needed)."""
    raw_topic = topic.encode()
    topic_size = len(raw_topic)
    if topic_size > 0xFFFF:
        raise ValueError(f"topic of {topic_size} bytes exceeds 65535 (section 1.5.4)")
    first = 0x30 | (qos << 1) | (8 if dup else 0) | (1 if retain else 0)
    if protocol_version == 5:
        props = encode_properties(properties) if properties else EMPTY_PROPERTY_BLOCK
    else:
        props = b""
    if qos:
        if packet_id is None:
            raise ValueError(f"a QoS {qos} PUBLISH needs a packet identifier")
        variable = topic_size.to_bytes(2, "big") + raw_topic + packet_id.to_bytes(2, "big")
    else:
        variable = topic_size.to_bytes(2, "big") + raw_topic
    remaining = len(variable) + len(props) + len(payload)
    if remaining < 128:
        return b"".join((bytes((first, remaining)), variable, props, payload))
    if remaining > MAX_VARINT:
        raise ValueError(f"PUBLISH of {remaining} bytes exceeds the MQTT maximum")
    return b"".join((bytes((first,)), encode_varint(remaining), variable, props, payload))


def _props(packet: Connect | ConnAck | Subscribe | SubAck | Unsubscribe, version: int) -> bytes:
    return encode_properties(packet.properties) if version == 5 else b""


def _connect(packet: Connect, _version: int) -> bytes:
    version = packet.protocol_version
    will = packet.will
    flags = 0x02 if packet.clean_start else 0
    payload = [encode_string(packet.client_id)]
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        if version == 5:
            payload.append(encode_properties(will.properties))
        payload += (encode_string(will.topic), encode_binary(will.payload))
    if packet.username is not None:
        flags |= 0x80
        payload.append(encode_string(packet.username))
    if packet.password is not None:
        flags |= 0x40
        payload.append(encode_binary(packet.password))
    header = (
        encode_string(packet.protocol_name)
        + bytes((version | (_BRIDGE_BIT if packet.bridge and version < 5 else 0), flags))
        + packet.keepalive.to_bytes(2, "big")
        + _props(packet, version)
    )
    return frame(0x10, header + b"".join(payload))


def _connack(packet: ConnAck, version: int) -> bytes:
    code = packet.reason_code
    if version < 5 and code >= ReasonCode.UNSPECIFIED_ERROR:
        code = connack_return_code(code)
    flags = 1 if packet.session_present and version >= 4 else 0
    return frame(0x20, bytes((flags, code)) + _props(packet, version))


def _publish(packet: Publish, version: int) -> bytes:
    return encode_publish(
        packet.topic,
        packet.payload,
        packet.qos,
        packet.retain,
        packet.dup,
        packet.packet_id,
        packet.properties,
        version,
    )


_ACK_HEADERS: dict[int, bytes] = {
    PacketType.PUBACK: b"\x40\x02",
    PacketType.PUBREC: b"\x50\x02",
    PacketType.PUBREL: b"\x62\x02",  # PUBREL's reserved flags are 0b0010 [MQTT-3.6.1-1]
    PacketType.PUBCOMP: b"\x70\x02",
}


def encode_ack(packet_type: int, packet_id: int, reason_code: int, protocol_version: int) -> bytes:
    """PUBACK/PUBREC/PUBREL/PUBCOMP without properties, in the shortest form (3.4.2.1).

    The broker's hot path: no packet object needed. Version 3/4 has no reason code.
    """
    header = _ACK_HEADERS[packet_type]
    if reason_code and protocol_version == 5:
        return bytes((header[0], 3)) + packet_id.to_bytes(2, "big") + bytes((reason_code,))
    return header + packet_id.to_bytes(2, "big")


def _ack(first: int) -> Callable[[AckPacket, int], bytes]:
    """Encoder for PUBACK/PUBREC/PUBREL/PUBCOMP packet objects (what `encode_ack` writes,
    plus properties in 5.0)."""
    header = _ACK_HEADERS[first >> 4]

    def encode_ack_packet(packet: AckPacket, version: int) -> bytes:
        code = packet.reason_code
        if version < 5 or (not code and not packet.properties):
            return header + packet.packet_id.to_bytes(2, "big")
        properties = encode_properties(packet.properties) if packet.properties else b""
        return frame(first, packet.packet_id.to_bytes(2, "big") + bytes((code,)) + properties)

    return encode_ack_packet


def _subscribe(packet: Subscribe, version: int) -> bytes:
    parts = [packet.packet_id.to_bytes(2, "big"), _props(packet, version)]
    for sub in packet.subscriptions:
        options = sub.qos
        if version == 5:
            options |= (
                (4 if sub.no_local else 0)
                | (8 if sub.retain_as_published else 0)
                | (sub.retain_handling << 4)
            )
        parts += (encode_string(sub.topic_filter), bytes((options,)))
    return frame(0x82, b"".join(parts))


def _suback(packet: SubAck, version: int) -> bytes:
    codes = packet.reason_codes
    if version < 5:
        codes = [min(code, SUBACK_FAILURE_V311) for code in codes]
    return frame(0x90, packet.packet_id.to_bytes(2, "big") + _props(packet, version) + bytes(codes))


def _unsubscribe(packet: Unsubscribe, version: int) -> bytes:
    filters = b"".join(encode_string(topic_filter) for topic_filter in packet.topic_filters)
    return frame(0xA2, packet.packet_id.to_bytes(2, "big") + _props(packet, version) + filters)


def _unsuback(packet: UnsubAck, version: int) -> bytes:
    body = packet.packet_id.to_bytes(2, "big")
    if version == 5:
        body += encode_properties(packet.properties) + bytes(packet.reason_codes)
    return frame(0xB0, body)


def _pingreq(_packet: PingReq, _version: int) -> bytes:
    return b"\xc0\x00"


def _pingresp(_packet: PingResp, _version: int) -> bytes:
    return b"\xd0\x00"


def _disconnect(packet: Disconnect, version: int) -> bytes:
    """DISCONNECT: no body before 5.0; in 5.0 the shortest form (section 3.14.2.1)."""
    if version < 5 or (not packet.reason_code and not packet.properties):
        return b"\xe0\x00"
    if not packet.properties:
        return bytes((0xE0, 1, packet.reason_code))
    return frame(0xE0, bytes((packet.reason_code,)) + encode_properties(packet.properties))


def _auth(packet: Auth, version: int) -> bytes:
    """AUTH (5.0 only): both fields omitted only for Success without properties (3.15.2.1)."""
    if version < 5:
        raise ValueError(f"AUTH does not exist in protocol version {version}")
    if not packet.reason_code and not packet.properties:
        return b"\xf0\x00"
    return frame(0xF0, bytes((packet.reason_code,)) + encode_properties(packet.properties))


_ENCODERS: dict[int, Callable[[Any, int], bytes]] = {
    PacketType.CONNECT: _connect,
    PacketType.CONNACK: _connack,
    PacketType.PUBLISH: _publish,
    PacketType.PUBACK: _ack(0x40),
    PacketType.PUBREC: _ack(0x50),
    PacketType.PUBREL: _ack(0x62),
    PacketType.PUBCOMP: _ack(0x70),
    PacketType.SUBSCRIBE: _subscribe,
    PacketType.SUBACK: _suback,
    PacketType.UNSUBSCRIBE: _unsubscribe,
    PacketType.UNSUBACK: _unsuback,
    PacketType.PINGREQ: _pingreq,
    PacketType.PINGRESP: _pingresp,
    PacketType.DISCONNECT: _disconnect,
    PacketType.AUTH: _auth,
}


def encode(packet: Packet, protocol_version: int = 4) -> bytes:
    """The wire bytes of `packet` in `protocol_version` (3, 4 or 5; CONNECT uses its own)."""
    return _ENCODERS[packet.packet_type](packet, protocol_version)
