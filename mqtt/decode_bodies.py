"""Decoding of every packet body except CONNECT/CONNACK, for protocol versions 3, 4 and 5.

Each decoder reads `buf[pos:end]`, the packet's variable header and payload, and rejects
trailing bytes. The fixed-header flags were already checked by `mqtt.decoder`, except for
PUBLISH whose flags carry DUP/QoS/RETAIN.
"""

from __future__ import annotations

from collections.abc import Callable

from mqtt.errors import (
    MalformedPacketError,
    ProtocolError,
    TopicFilterInvalidError,
    TopicNameInvalidError,
)
from mqtt.packets import (
    Auth,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from mqtt.properties import PropertyId, read_properties
from mqtt.reason_codes import SUBACK_FAILURE_V311
from mqtt.topics import TopicError, validate_topic_filter, validate_topic_name
from mqtt.wire import decode_utf8, read_string, read_u16

BodyDecoder = Callable[[bytes, int, int, int], Packet]

_SUBACK_V311_CODES = frozenset({0, 1, 2, SUBACK_FAILURE_V311})


_SECTIONS = {
    "PUBACK": "3.4",
    "PUBREC": "3.5",
    "PUBREL": "3.6",
    "PUBCOMP": "3.7",
    "UNSUBACK": "3.11",
    "PINGREQ": "3.12",
    "PINGRESP": "3.13",
    "DISCONNECT": "3.14",
    "AUTH": "3.15",
}


def _trailing(name: str, pos: int, end: int) -> MalformedPacketError:
    return MalformedPacketError(
        f"{name} has {end - pos} bytes after its content (section {_SECTIONS[name]})"
    )


def _packet_id(buf: bytes, pos: int, end: int, name: str) -> tuple[int, int]:
    if pos + 2 > end:
        raise MalformedPacketError(f"{name} is too short for its packet identifier")
    packet_id = (buf[pos] << 8) | buf[pos + 1]
    if not packet_id:
        raise ProtocolError(f"{name} has packet identifier 0 [MQTT-2.3.1-1]")
    return packet_id, pos + 2


def _invalid_topic(raw: bytes, version: int, props: Properties) -> Exception:
    """The error for a PUBLISH topic the fast path refused (slow path: find the rule)."""
    try:
        topic = decode_utf8(raw)
        if topic:
            validate_topic_name(topic)
    except TopicError as exc:
        return TopicNameInvalidError(f"PUBLISH: {exc}")
    except MalformedPacketError as exc:
        return exc
    if version < 5:
        return TopicNameInvalidError("PUBLISH topic name is empty [MQTT-4.7.3-1]")
    return ProtocolError("PUBLISH topic name is empty and has no Topic Alias (5.0 3.3.2.1)")


def decode_publish(flags: int, buf: bytes, pos: int, end: int, version: int) -> Publish:
    """Decode PUBLISH (section 3.3); `flags` is the low nibble of the fixed header.

    The hot path: the topic is read inline and checked with one scan for the characters
    that need a closer look (U+0000 [MQTT-1.5.3-2], wildcards [MQTT-3.3.2-2]).
    """
    qos = (flags >> 1) & 3
    if qos == 3:
        raise MalformedPacketError("PUBLISH QoS bits are both set (QoS 3) [MQTT-3.3.1-4]")
    if pos + 2 > end:
        raise MalformedPacketError("PUBLISH is too short for its topic name length")
    start = pos + 2
    pos = start + ((buf[pos] << 8) | buf[pos + 1])
    if pos > end:
        raise MalformedPacketError(
            f"PUBLISH topic name of {pos - start} bytes runs past the end of the packet"
        )
    raw_topic = buf[start:pos]
    packet_id = None
    if qos:
        packet_id, pos = _packet_id(buf, pos, end, "PUBLISH")
    props: Properties = {}
    if version == 5:
        props, pos = read_properties(buf, pos, end, PacketType.PUBLISH)
    try:
        topic = raw_topic.decode()
    except UnicodeDecodeError:
        raise _invalid_topic(raw_topic, version, props) from None
    if ("+" in topic or "#" in topic or "\x00" in topic or not topic) and (
        topic or version < 5 or PropertyId.TOPIC_ALIAS not in props
    ):
        raise _invalid_topic(raw_topic, version, props)
    return Publish(topic, buf[pos:end], qos, bool(flags & 1), bool(flags & 8), packet_id, props)


def _ack_parts(
    buf: bytes, pos: int, end: int, version: int, packet_type: PacketType
) -> tuple[int, int, Properties]:
    """Packet id, reason code and properties of PUBACK/PUBREC/PUBREL/PUBCOMP (3.4-3.7)."""
    if pos + 2 > end:
        raise MalformedPacketError(f"{packet_type.name} is too short for its packet identifier")
    packet_id = (buf[pos] << 8) | buf[pos + 1]
    pos += 2
    reason_code = 0
    props: Properties = {}
    if version == 5 and pos < end:
        reason_code = buf[pos]
        pos += 1
        if pos < end:
            props, pos = read_properties(buf, pos, end, packet_type)
    if pos != end:
        raise _trailing(packet_type.name, pos, end)
    return packet_id, reason_code, props


def decode_puback(buf: bytes, pos: int, end: int, version: int) -> PubAck:
    return PubAck(*_ack_parts(buf, pos, end, version, PacketType.PUBACK))


def decode_pubrec(buf: bytes, pos: int, end: int, version: int) -> PubRec:
    return PubRec(*_ack_parts(buf, pos, end, version, PacketType.PUBREC))


def decode_pubrel(buf: bytes, pos: int, end: int, version: int) -> PubRel:
    return PubRel(*_ack_parts(buf, pos, end, version, PacketType.PUBREL))


def decode_pubcomp(buf: bytes, pos: int, end: int, version: int) -> PubComp:
    return PubComp(*_ack_parts(buf, pos, end, version, PacketType.PUBCOMP))


def _filter(buf: bytes, pos: int, end: int, name: str) -> tuple[str, int]:
    topic_filter, pos = read_string(buf, pos, end)
    try:
        validate_topic_filter(topic_filter)
    except TopicError as exc:
        raise TopicFilterInvalidError(f"{name}: {exc}") from None
    return topic_filter, pos


def _subscription(topic_filter: str, options: int, version: int) -> Subscription:
    qos = options & 3
    if qos == 3:
        raise MalformedPacketError(
            f"SUBSCRIBE requests QoS 3 for {topic_filter!r} [MQTT-3-8.3-4] (5.0 3.8.3.1)"
        )
    if version < 5:
        if options & 0xFC:
            raise MalformedPacketError(
                f"SUBSCRIBE reserved option bits set for {topic_filter!r} [MQTT-3-8.3-4]"
            )
        return Subscription(topic_filter, qos)
    if options & 0xC0:
        raise MalformedPacketError(
            f"SUBSCRIBE reserved option bits 7-6 set for {topic_filter!r} [MQTT-3.8.3-5]"
        )
    retain_handling = (options >> 4) & 3
    if retain_handling == 3:
        raise ProtocolError(f"SUBSCRIBE retain handling 3 for {topic_filter!r} (3.8.3.1)")
    no_local = bool(options & 4)
    if no_local and topic_filter.startswith("$share/"):
        raise ProtocolError(
            f"SUBSCRIBE no-local on shared subscription {topic_filter!r} [MQTT-3.8.3-4]"
        )
    return Subscription(topic_filter, qos, no_local, bool(options & 8), retain_handling)


def decode_subscribe(buf: bytes, pos: int, end: int, version: int) -> Subscribe:
    """Decode SUBSCRIBE (section 3.8)."""
    packet_id, pos = _packet_id(buf, pos, end, "SUBSCRIBE")
    props: Properties = {}
    if version == 5:
        props, pos = read_properties(buf, pos, end, PacketType.SUBSCRIBE)
    subscriptions: list[Subscription] = []
    while pos < end:
        topic_filter, pos = _filter(buf, pos, end, "SUBSCRIBE")
        if pos >= end:
            raise MalformedPacketError(
                f"SUBSCRIBE topic filter {topic_filter!r} has no options byte (3.8.3)"
            )
        subscriptions.append(_subscription(topic_filter, buf[pos], version))
        pos += 1
    if not subscriptions:
        raise ProtocolError("SUBSCRIBE has no topic filter [MQTT-3.8.3-3]")
    return Subscribe(packet_id, subscriptions, props)


def decode_suback(buf: bytes, pos: int, end: int, version: int) -> SubAck:
    """Decode SUBACK (section 3.9)."""
    packet_id, pos = read_u16(buf, pos, end)
    props: Properties = {}
    if version == 5:
        props, pos = read_properties(buf, pos, end, PacketType.SUBACK)
    codes = list(buf[pos:end])
    if version < 5 and not _SUBACK_V311_CODES.issuperset(codes):
        raise MalformedPacketError(
            f"SUBACK return codes {codes} outside 0, 1, 2, 0x80 [MQTT-3.9.3-2]"
        )
    return SubAck(packet_id, codes, props)


def decode_unsubscribe(buf: bytes, pos: int, end: int, version: int) -> Unsubscribe:
    """Decode UNSUBSCRIBE (section 3.10)."""
    packet_id, pos = _packet_id(buf, pos, end, "UNSUBSCRIBE")
    props: Properties = {}
    if version == 5:
        props, pos = read_properties(buf, pos, end, PacketType.UNSUBSCRIBE)
    topic_filters: list[str] = []
    while pos < end:
        topic_filter, pos = _filter(buf, pos, end, "UNSUBSCRIBE")
        topic_filters.append(topic_filter)
    if not topic_filters:
        raise ProtocolError("UNSUBSCRIBE has no topic filter [MQTT-3.10.3-2]")
    return Unsubscribe(packet_id, topic_filters, props)


def decode_unsuback(buf: bytes, pos: int, end: int, version: int) -> UnsubAck:
    """Decode UNSUBACK (section 3.11): reason codes and properties in 5.0 only."""
    packet_id, pos = read_u16(buf, pos, end)
    if version < 5:
        if pos != end:
            raise _trailing("UNSUBACK", pos, end)
        return UnsubAck(packet_id, [], {})
    props, pos = read_properties(buf, pos, end, PacketType.UNSUBACK)
    return UnsubAck(packet_id, list(buf[pos:end]), props)


def _empty(name: str, pos: int, end: int) -> None:
    if pos != end:
        raise MalformedPacketError(
            f"{name} must have remaining length 0, got {end - pos} (section {_SECTIONS[name]})"
        )


def decode_pingreq(buf: bytes, pos: int, end: int, version: int) -> PingReq:
    _empty("PINGREQ", pos, end)
    return PingReq()


def decode_pingresp(buf: bytes, pos: int, end: int, version: int) -> PingResp:
    _empty("PINGRESP", pos, end)
    return PingResp()


def _reason_and_properties(
    buf: bytes, pos: int, end: int, packet_type: PacketType
) -> tuple[int, Properties]:
    """5.0 DISCONNECT/AUTH: both fields may be omitted when 0/empty (3.14.2.1, 3.15.2.1)."""
    if pos == end:
        return 0, {}
    reason_code = buf[pos]
    props: Properties = {}
    if pos + 1 < end:
        props, pos = read_properties(buf, pos + 1, end, packet_type)
        if pos != end:
            raise _trailing(packet_type.name, pos, end)
    return reason_code, props


def decode_disconnect(buf: bytes, pos: int, end: int, version: int) -> Disconnect:
    """Decode DISCONNECT (section 3.14): no body before 5.0."""
    if version < 5:
        _empty("DISCONNECT", pos, end)
        return Disconnect()
    return Disconnect(*_reason_and_properties(buf, pos, end, PacketType.DISCONNECT))


def decode_auth(buf: bytes, pos: int, end: int, version: int) -> Auth:
    """Decode AUTH (section 3.15), which exists in 5.0 only."""
    if version < 5:
        raise MalformedPacketError(
            "packet type 15 (AUTH) is reserved before MQTT 5.0 (section 2.1.2)"
        )
    return Auth(*_reason_and_properties(buf, pos, end, PacketType.AUTH))


BODY_DECODERS: dict[int, BodyDecoder] = {
    PacketType.PUBACK: decode_puback,
    PacketType.PUBREC: decode_pubrec,
    PacketType.PUBREL: decode_pubrel,
    PacketType.PUBCOMP: decode_pubcomp,
    PacketType.SUBSCRIBE: decode_subscribe,
    PacketType.SUBACK: decode_suback,
    PacketType.UNSUBSCRIBE: decode_unsubscribe,
    PacketType.UNSUBACK: decode_unsuback,
    PacketType.PINGREQ: decode_pingreq,
    PacketType.PINGRESP: decode_pingresp,
    PacketType.DISCONNECT: decode_disconnect,
    PacketType.AUTH: decode_auth,
}
"""Body decoders by packet type, for the types whose fixed-header flags are fixed."""
