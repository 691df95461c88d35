"""MQTT 5.0 properties (section 2.2.2): identifiers, data types, where each may appear, codec.

Representation (the contract of `mqtt.packets`): a property block is a `dict` from
`PropertyId` to value. Integers are `int`, UTF-8 strings `str`, binary data `bytes`.
User Property (0x26) maps to a `list` of `(name, value)` tuples in wire order, and
Subscription Identifier (0x0B) maps to a `list[int]` everywhere, even when it appears once,
so that decode and encode are inverse of each other whatever the count.

Rules enforced when decoding:
- an unknown identifier, or one not allowed in this packet type, is a Malformed Packet
  (section 2.2.2.2);
- only User Property may repeat, and Subscription Identifier may repeat in PUBLISH only;
  any other repetition is a Protocol Error (section 3.x.2.x: "It is a Protocol Error to
  include ... more than once");
- value ranges the spec calls Protocol Errors (a 0/1 byte holding 2, Receive Maximum 0,
  Maximum Packet Size 0, Topic Alias 0 [MQTT-3.3.2-8], Subscription Identifier 0).
Will properties are checked against the pseudo packet type `WILL`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

from mqtt.errors import MalformedPacketError, ProtocolError
from mqtt.packets import PacketType, Properties
from mqtt.wire import (
    encode_binary,
    encode_string,
    encode_string_pair,
    encode_u16,
    encode_u32,
    encode_varint,
    read_binary,
    read_byte,
    read_string,
    read_string_pair,
    read_u16,
    read_u32,
    read_varint,
)

WILL = 0
"""Pseudo packet type for the will properties of CONNECT (section 3.1.3.2)."""

EMPTY_PROPERTY_BLOCK = b"\x00"


class PropertyId(IntEnum):
    """MQTT 5.0 property identifiers (table 2-4)."""

    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


class DataType(Enum):
    """The data representations of section 1.5."""

    BYTE = "byte"
    TWO_BYTE_INT = "two-byte integer"
    FOUR_BYTE_INT = "four-byte integer"
    VARINT = "variable byte integer"
    UTF8_STRING = "UTF-8 string"
    STRING_PAIR = "UTF-8 string pair"
    BINARY = "binary data"


_READERS: dict[DataType, Callable[[bytes, int, int], tuple[Any, int]]] = {
    DataType.BYTE: read_byte,
    DataType.TWO_BYTE_INT: read_u16,
    DataType.FOUR_BYTE_INT: read_u32,
    DataType.VARINT: read_varint,
    DataType.UTF8_STRING: read_string,
    DataType.STRING_PAIR: read_string_pair,
    DataType.BINARY: read_binary,
}

_WRITERS: dict[DataType, Callable[[Any], bytes]] = {
    DataType.BYTE: lambda value: bytes((value,)),
    DataType.TWO_BYTE_INT: encode_u16,
    DataType.FOUR_BYTE_INT: encode_u32,
    DataType.VARINT: encode_varint,
    DataType.UTF8_STRING: encode_string,
    DataType.STRING_PAIR: encode_string_pair,
    DataType.BINARY: encode_binary,
}


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """What the spec says about one property: its type and the packets that may carry it."""

    property_id: PropertyId
    data_type: DataType
    packet_types: frozenset[int]
    reader: Callable[[bytes, int, int], tuple[Any, int]]
    writer: Callable[[Any], bytes]


_P = PacketType
_ACKS = (_P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP)
_TABLE: list[tuple[PropertyId, DataType, tuple[int, ...]]] = [
    (PropertyId.PAYLOAD_FORMAT_INDICATOR, DataType.BYTE, (_P.PUBLISH, WILL)),
    (PropertyId.MESSAGE_EXPIRY_INTERVAL, DataType.FOUR_BYTE_INT, (_P.PUBLISH, WILL)),
    (PropertyId.CONTENT_TYPE, DataType.UTF8_STRING, (_P.PUBLISH, WILL)),
    (PropertyId.RESPONSE_TOPIC, DataType.UTF8_STRING, (_P.PUBLISH, WILL)),
    (PropertyId.CORRELATION_DATA, DataType.BINARY, (_P.PUBLISH, WILL)),
    (PropertyId.SUBSCRIPTION_IDENTIFIER, DataType.VARINT, (_P.PUBLISH, _P.SUBSCRIBE)),
    (
        PropertyId.SESSION_EXPIRY_INTERVAL,
        DataType.FOUR_BYTE_INT,
        (_P.CONNECT, _P.CONNACK, _P.DISCONNECT),
    ),
    (PropertyId.ASSIGNED_CLIENT_IDENTIFIER, DataType.UTF8_STRING, (_P.CONNACK,)),
    (PropertyId.SERVER_KEEP_ALIVE, DataType.TWO_BYTE_INT, (_P.CONNACK,)),
    (PropertyId.AUTHENTICATION_METHOD, DataType.UTF8_STRING, (_P.CONNECT, _P.CONNACK, _P.AUTH)),
    (PropertyId.AUTHENTICATION_DATA, DataType.BINARY, (_P.CONNECT, _P.CONNACK, _P.AUTH)),
    (PropertyId.REQUEST_PROBLEM_INFORMATION, DataType.BYTE, (_P.CONNECT,)),
    (PropertyId.WILL_DELAY_INTERVAL, DataType.FOUR_BYTE_INT, (WILL,)),
    (PropertyId.REQUEST_RESPONSE_INFORMATION, DataType.BYTE, (_P.CONNECT,)),
    (PropertyId.RESPONSE_INFORMATION, DataType.UTF8_STRING, (_P.CONNACK,)),
    (PropertyId.SERVER_REFERENCE, DataType.UTF8_STRING, (_P.CONNACK, _P.DISCONNECT)),
    (
        PropertyId.REASON_STRING,
        DataType.UTF8_STRING,
        (_P.CONNACK, *_ACKS, _P.SUBACK, _P.UNSUBACK, _P.DISCONNECT, _P.AUTH),
    ),
    (PropertyId.RECEIVE_MAXIMUM, DataType.TWO_BYTE_INT, (_P.CONNECT, _P.CONNACK)),
    (PropertyId.TOPIC_ALIAS_MAXIMUM, DataType.TWO_BYTE_INT, (_P.CONNECT, _P.CONNACK)),
    (PropertyId.TOPIC_ALIAS, DataType.TWO_BYTE_INT, (_P.PUBLISH,)),
    (PropertyId.MAXIMUM_QOS, DataType.BYTE, (_P.CONNACK,)),
    (PropertyId.RETAIN_AVAILABLE, DataType.BYTE, (_P.CONNACK,)),
    (
        PropertyId.USER_PROPERTY,
        DataType.STRING_PAIR,
        (
            _P.CONNECT,
            _P.CONNACK,
            _P.PUBLISH,
            WILL,
            *_ACKS,
            _P.SUBSCRIBE,
            _P.SUBACK,
            _P.UNSUBSCRIBE,
            _P.UNSUBACK,
            _P.DISCONNECT,
            _P.AUTH,
        ),
    ),
    (PropertyId.MAXIMUM_PACKET_SIZE, DataType.FOUR_BYTE_INT, (_P.CONNECT, _P.CONNACK)),
    (PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE, DataType.BYTE, (_P.CONNACK,)),
    (PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE, DataType.BYTE, (_P.CONNACK,)),
    (PropertyId.SHARED_SUBSCRIPTION_AVAILABLE, DataType.BYTE, (_P.CONNACK,)),
]

PROPERTY_SPECS: dict[int, PropertySpec] = {
    prop_id: PropertySpec(
        prop_id, data_type, frozenset(types), _READERS[data_type], _WRITERS[data_type]
    )
    for prop_id, data_type, types in _TABLE
}

LIST_VALUED = frozenset({PropertyId.USER_PROPERTY, PropertyId.SUBSCRIPTION_IDENTIFIER})
"""Properties represented as a list of values (see the module docstring)."""

_BOOLEAN_BYTES = frozenset(
    {
        PropertyId.PAYLOAD_FORMAT_INDICATOR,
        PropertyId.REQUEST_PROBLEM_INFORMATION,
        PropertyId.REQUEST_RESPONSE_INFORMATION,
        PropertyId.MAXIMUM_QOS,
        PropertyId.RETAIN_AVAILABLE,
        PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE,
        PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
        PropertyId.SHARED_SUBSCRIPTION_AVAILABLE,
    }
)
_NON_ZERO = frozenset(
    {
        PropertyId.RECEIVE_MAXIMUM,
        PropertyId.MAXIMUM_PACKET_SIZE,
        PropertyId.TOPIC_ALIAS,
        PropertyId.SUBSCRIPTION_IDENTIFIER,
    }
)

_SPEC_BY_BYTE: list[PropertySpec | None] = [None] * 256
for _spec in PROPERTY_SPECS.values():
    _SPEC_BY_BYTE[_spec.property_id] = _spec


def _packet_name(packet_type: int) -> str:
    return "will properties" if packet_type == WILL else PacketType(packet_type).name


_RANGE_REFS = {
    PropertyId.PAYLOAD_FORMAT_INDICATOR: "section 3.3.2.3.2",
    PropertyId.REQUEST_PROBLEM_INFORMATION: "section 3.1.2.11.7",
    PropertyId.REQUEST_RESPONSE_INFORMATION: "section 3.1.2.11.6",
    PropertyId.MAXIMUM_QOS: "section 3.2.2.3.4",
    PropertyId.RETAIN_AVAILABLE: "section 3.2.2.3.5",
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE: "section 3.2.2.3.11",
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE: "section 3.2.2.3.12",
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE: "section 3.2.2.3.13",
    PropertyId.RECEIVE_MAXIMUM: "section 3.1.2.11.3",
    PropertyId.MAXIMUM_PACKET_SIZE: "section 3.1.2.11.4",
    PropertyId.TOPIC_ALIAS: "[MQTT-3.3.2-8]",
    PropertyId.SUBSCRIPTION_IDENTIFIER: "section 3.8.2.1.2",
}


def _check_range(prop_id: PropertyId, value: int, packet_type: int) -> None:
    if prop_id in _BOOLEAN_BYTES and value > 1:
        raise ProtocolError(
            f"{prop_id.name} must be 0 or 1, got {value} in {_packet_name(packet_type)} "
            f"({_RANGE_REFS[prop_id]})"
        )
    if prop_id in _NON_ZERO and value == 0:
        raise ProtocolError(
            f"{prop_id.name} of 0 in {_packet_name(packet_type)} is a protocol error "
            f"({_RANGE_REFS[prop_id]})"
        )


def _store(props: Properties, spec: PropertySpec, value: Any, packet_type: int) -> None:
    prop_id = spec.property_id
    if prop_id in LIST_VALUED:
        values = props.get(prop_id)
        if values is None:
            props[prop_id] = [value]
        elif prop_id is PropertyId.USER_PROPERTY or packet_type == PacketType.PUBLISH:
            values.append(value)
        else:
            raise ProtocolError(
                f"{prop_id.name} appears more than once in {_packet_name(packet_type)}; "
                "it may repeat in PUBLISH only (section 3.8.2.1.2)"
            )
    elif prop_id in props:
        raise ProtocolError(
            f"{prop_id.name} appears more than once in {_packet_name(packet_type)}; "
            "only User Property may repeat (section 2.2.2.2)"
        )
    else:
        props[prop_id] = value


def read_properties(buf: bytes, pos: int, end: int, packet_type: int) -> tuple[Properties, int]:
    """Read a property block (length, then properties) allowed in `packet_type`."""
    length, pos = read_varint(buf, pos, end)
    stop = pos + length
    if stop > end:
        raise MalformedPacketError(
            f"property length {length} runs past the end of the packet (section 2.2.2.1)"
        )
    props: Properties = {}
    while pos < stop:
        spec = _SPEC_BY_BYTE[buf[pos]]
        if spec is None:
            raise MalformedPacketError(
                f"unknown property identifier 0x{buf[pos]:02X} (section 2.2.2.2)"
            )
        if packet_type not in spec.packet_types:
            raise MalformedPacketError(
                f"property {spec.property_id.name} is not allowed in "
                f"{_packet_name(packet_type)} (section 2.2.2.2)"
            )
        value, pos = spec.reader(buf, pos + 1, stop)
        if isinstance(value, int):
            _check_range(spec.property_id, value, packet_type)
        _store(props, spec, value, packet_type)
    return props, stop


def encode_properties(props: Properties) -> bytes:
    """Encode a property block (length prefix included); the encoder does not police types."""
    if not props:
        return EMPTY_PROPERTY_BLOCK
    parts: list[bytes] = []
    for key, value in props.items():
        spec = PROPERTY_SPECS.get(key)
        if spec is None:
            raise ValueError(f"unknown property identifier {key!r}")
        prefix = bytes((key,))
        if key in LIST_VALUED:
            parts.extend(prefix + spec.writer(item) for item in value)
        else:
            parts.append(prefix + spec.writer(value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body
