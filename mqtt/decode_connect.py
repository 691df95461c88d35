"""Decoding of the connection packets' bodies: CONNECT (3.1, 3.1.1, 5.0) and CONNACK.

CONNECT is read in two steps so that the decoder learns the protocol version before the rest
of the packet can fail: `read_protocol` checks the protocol name/level pair, then
`decode_connect` reads flags, keep-alive, properties and payload.
"""

from __future__ import annotations

from mqtt.errors import (
    MalformedPacketError,
    ProtocolError,
    TopicNameInvalidError,
    UnsupportedProtocolVersionError,
)
from mqtt.packets import ConnAck, Connect, PacketType, Properties, Will
from mqtt.properties import WILL, read_properties
from mqtt.topics import TopicError, validate_topic_name
from mqtt.wire import read_binary, read_byte, read_string, read_u16

PROTOCOL_NAMES: dict[int, str] = {3: "MQIsdp", 4: "MQTT", 5: "MQTT"}
"""The protocol name each supported protocol level must come with."""

_USERNAME = 0x80
_PASSWORD = 0x40
_WILL_RETAIN = 0x20
_WILL_QOS = 0x18
_WILL_FLAG = 0x04
_CLEAN_START = 0x02
_RESERVED = 0x01
BRIDGE_BIT = 0x80
"""Set in a 3.x CONNECT's protocol level by a broker's bridge (Mosquitto's `try_private`)."""
_BRIDGED_LEVELS = frozenset({BRIDGE_BIT | 3, BRIDGE_BIT | 4})


def read_protocol(buf: bytes, pos: int, end: int) -> tuple[str, int, int]:
    """Read the protocol name and level of CONNECT; return `(name, level, next_pos)`.

    The level keeps the bridge bit (`BRIDGE_BIT`), which a 3.x bridge may set (not a
    level of the standard: Mosquitto's bridges use it to tell the broker they are one).
    """
    name, pos = read_string(buf, pos, end)
    if name not in ("MQTT", "MQIsdp"):
        raise ProtocolError(f"CONNECT protocol name {name!r} is not MQTT [MQTT-3.1.2-1]")
    level, pos = read_byte(buf, pos, end)
    plain = level & ~BRIDGE_BIT if level in _BRIDGED_LEVELS else level  # not 5.0's
    if PROTOCOL_NAMES.get(plain) != name:
        raise UnsupportedProtocolVersionError(
            f"CONNECT protocol name {name!r} with level {level} is not a supported "
            "version (MQIsdp/3, MQTT/4, MQTT/5) [MQTT-3.1.2-2]",
            protocol_name=name,
            protocol_level=level,
        )
    return name, level, pos


def _check_flags(flags: int, level: int) -> None:
    if flags & _RESERVED:
        raise MalformedPacketError("CONNECT reserved flag is not 0 [MQTT-3.1.2-3]")
    will_qos = (flags & _WILL_QOS) >> 3
    if flags & _WILL_FLAG:
        if will_qos == 3:
            raise MalformedPacketError("CONNECT will QoS is 3 [MQTT-3.1.2-14]")
    elif will_qos:
        raise MalformedPacketError(
            "CONNECT will QoS is set without the will flag [MQTT-3.1.2-11] [MQTT-3.1.2-13]"
        )
    elif flags & _WILL_RETAIN:
        raise MalformedPacketError(
            "CONNECT will retain is set without the will flag [MQTT-3.1.2-15]"
        )
    if level < 5 and flags & _PASSWORD and not flags & _USERNAME:
        raise MalformedPacketError(
            "CONNECT password flag is set without the user name flag [MQTT-3.1.2-22]"
        )


def _read_will(flags: int, buf: bytes, pos: int, end: int, level: int) -> tuple[Will, int]:
    will_props: Properties = {}
    if level == 5:
        will_props, pos = read_properties(buf, pos, end, WILL)
    topic, pos = read_string(buf, pos, end)
    try:
        validate_topic_name(topic)
    except TopicError as exc:
        raise TopicNameInvalidError(f"CONNECT will topic: {exc}") from None
    payload, pos = read_binary(buf, pos, end)
    will = Will(topic, payload, (flags & _WILL_QOS) >> 3, bool(flags & _WILL_RETAIN), will_props)
    return will, pos


def decode_connect(buf: bytes, pos: int, end: int, name: str, level: int) -> Connect:
    """Decode the CONNECT body after the protocol level (section 3.1.2); `level` as
    `read_protocol` returned it, with the bridge bit if it was set."""
    bridge = bool(level & BRIDGE_BIT)
    level &= ~BRIDGE_BIT
    flags, pos = read_byte(buf, pos, end)
    _check_flags(flags, level)
    keepalive, pos = read_u16(buf, pos, end)
    props: Properties = {}
    if level == 5:
        props, pos = read_properties(buf, pos, end, PacketType.CONNECT)
    client_id, pos = read_string(buf, pos, end)
    will = None
    if flags & _WILL_FLAG:
        will, pos = _read_will(flags, buf, pos, end, level)
    username = password = None
    if flags & _USERNAME:
        username, pos = read_string(buf, pos, end)
    if flags & _PASSWORD:
        password, pos = read_binary(buf, pos, end)
    if pos != end:
        raise MalformedPacketError(
            f"CONNECT has {end - pos} bytes after its payload (section 3.1.3)"
        )
    return Connect(
        client_id=client_id,
        protocol_version=level,
        clean_start=bool(flags & _CLEAN_START),
        keepalive=keepalive,
        username=username,
        password=password,
        will=will,
        properties=props,
        protocol_name=name,
        bridge=bridge,
    )


def decode_connack(buf: bytes, pos: int, end: int, version: int) -> ConnAck:
    """Decode a CONNACK body (section 3.2); 3.1 has no session-present flag."""
    ack_flags, pos = read_byte(buf, pos, end)
    reason_code, pos = read_byte(buf, pos, end)
    if version >= 4 and ack_flags & 0xFE:
        raise MalformedPacketError("CONNACK acknowledge flags bits 7-1 are not 0 (3.2.2.1)")
    props: Properties = {}
    if version == 5:
        props, pos = read_properties(buf, pos, end, PacketType.CONNACK)
    if pos != end:
        raise MalformedPacketError(f"CONNACK has {end - pos} trailing bytes (section 3.2)")
    return ConnAck(bool(ack_flags & 1) and version >= 4, reason_code, props)
