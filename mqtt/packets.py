"""MQTT control packets as plain data: one class per packet type of MQTT 3.1, 3.1.1 and 5.0.

These classes are the contract between the codec (`mqtt.decoder`, `mqtt.encoder`) and
everything above it. They hold values only: no I/O, no validation (the codec validates on
the wire; the broker validates semantics).

Conventions:
- Strings are `str`, binary data is `bytes`.
- `properties` is a `dict` from `PropertyId` to value, for MQTT 5.0 only (empty otherwise).
  The two properties that may repeat, User Property and Subscription Identifier, map to a
  `list` (of `(name, value)` tuples and of `int` respectively). Every other property maps to
  its single value.
- `reason_code` fields use MQTT 5.0 numbering; for 3.1/3.1.1 CONNACK the return code
  (0..5) lives in the same field and SUBACK uses 0, 1, 2 and 0x80.
- Instances are mutable slotted dataclasses for speed on the hot path; treat them as
  immutable once built (use `dataclasses.replace` to derive a changed copy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class PacketType(IntEnum):
    """The 4-bit packet type in the fixed header [MQTT-2.1.2]."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


class ProtocolVersion(IntEnum):
    """The protocol level byte of CONNECT."""

    MQTT_3_1 = 3  # protocol name "MQIsdp"
    MQTT_3_1_1 = 4  # protocol name "MQTT"
    MQTT_5 = 5  # protocol name "MQTT"


Properties = dict[int, Any]


@dataclass(slots=True)
class Will:
    """The will message carried in CONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Connect:
    packet_type = PacketType.CONNECT
    client_id: str
    protocol_version: int = ProtocolVersion.MQTT_3_1_1
    clean_start: bool = True  # "clean session" in 3.1/3.1.1
    keepalive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = field(default_factory=dict)
    protocol_name: str = "MQTT"  # "MQIsdp" for 3.1
    # 3.x only: the bridge bit (0x80) of the protocol level, as Mosquitto's bridges set it
    # (`try_private`): the client is another broker, which wants its own publishes not sent
    # back to it and the retain flag of what it receives kept.
    bridge: bool = False


@dataclass(slots=True)
class ConnAck:
    packet_type = PacketType.CONNACK
    session_present: bool = False
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Publish:
    packet_type = PacketType.PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None  # present iff qos > 0
    properties: Properties = field(default_factory=dict)
    # Set by the decoder for a 3.x QoS 0 PUBLISH without RETAIN/DUP: the packet's bytes as
    # received, which are exactly what a QoS 0 subscriber must get, so the broker forwards
    # them instead of re-encoding. Not part of the packet's value.
    wire: bytes | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class PubAck:
    packet_type = PacketType.PUBACK
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubRec:
    packet_type = PacketType.PUBREC
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubRel:
    packet_type = PacketType.PUBREL
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubComp:
    packet_type = PacketType.PUBCOMP
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE with its options (the 5.0 ones are 0/False in 3.x)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    packet_type = PacketType.SUBSCRIBE
    packet_id: int
    subscriptions: list[Subscription]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class SubAck:
    packet_type = PacketType.SUBACK
    packet_id: int
    reason_codes: list[int]  # granted QoS 0/1/2, or a failure code >= 0x80
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Unsubscribe:
    packet_type = PacketType.UNSUBSCRIBE
    packet_id: int
    topic_filters: list[str]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class UnsubAck:
    packet_type = PacketType.UNSUBACK
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)  # 5.0 only; empty in 3.x
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PingReq:
    packet_type = PacketType.PINGREQ


@dataclass(slots=True)
class PingResp:
    packet_type = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    packet_type = PacketType.DISCONNECT
    reason_code: int = 0  # 5.0 only; 3.x DISCONNECT has no body
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Auth:
    """MQTT 5.0 only."""

    packet_type = PacketType.AUTH
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


Packet = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)
