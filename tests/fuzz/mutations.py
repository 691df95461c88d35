"""Ways to break a valid MQTT byte stream, for the broker fuzzer (`tests/fuzz`).

Each mutation takes the encoded packet (and the protocol version and a `random.Random`) and
returns bytes a broker must answer with a reason code, a DISCONNECT or a closed connection,
never with a crash. Packets the codec cannot encode (a wildcard in a PUBLISH topic, invalid
UTF-8, U+0000, duplicated or misplaced MQTT 5 properties) are built byte by byte here.
"""

from __future__ import annotations

import random
from collections.abc import Callable

Mutation = Callable[[bytes, int, random.Random], bytes]


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value % 128
        value //= 128
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def split_fixed_header(data: bytes) -> tuple[int, bytes]:
    """(first byte, body) of one encoded packet with a valid remaining length."""
    position = 1
    while data[position] & 0x80:
        position += 1
    return data[0], data[position + 1 :]


def _string(raw: bytes) -> bytes:
    return len(raw).to_bytes(2, "big") + raw


def _publish(topic: bytes, version: int, properties: bytes = b"", qos: int = 0) -> bytes:
    body = _string(topic)
    if qos:
        body += (1).to_bytes(2, "big")
    if version == 5:
        body += varint(len(properties)) + properties
    body += b"payload"
    return bytes([0x30 | qos << 1]) + varint(len(body)) + body


# ----- mutations of an encoded packet ----------------------------------------------------


def bad_flags(data: bytes, _version: int, rng: random.Random) -> bytes:
    """Reserved or impossible fixed-header flags (QoS 3, SUBSCRIBE flags not 0b0010...)."""
    return bytes([data[0] ^ rng.randint(1, 15)]) + data[1:]


def bad_length(data: bytes, _version: int, rng: random.Random) -> bytes:
    """A remaining length that disagrees with the body: too short, too long, or huge."""
    first, body = split_fixed_header(data)
    length = rng.choice(
        [max(0, len(body) - rng.randint(1, 8)), len(body) + rng.randint(1, 8), 268_435_455]
    )
    return bytes([first]) + varint(length) + body


def bad_varint(data: bytes, _version: int, rng: random.Random) -> bytes:
    """A remaining length of five bytes, or one that never ends."""
    first, body = split_fixed_header(data)
    length = rng.choice([b"\xff\xff\xff\xff\x7f", b"\x80\x80\x80\x80\x80\x01", b"\xff" * 4])
    return bytes([first]) + length + body


def flip_byte(data: bytes, _version: int, rng: random.Random) -> bytes:
    """One body byte replaced: lengths inside the packet, ids, flags, property ids."""
    if len(data) < 3:
        return data + bytes([rng.randint(0, 255)])
    position = rng.randrange(2, len(data))
    return data[:position] + bytes([rng.randint(0, 255)]) + data[position + 1 :]


def truncate(data: bytes, _version: int, rng: random.Random) -> bytes:
    """Only the start of the packet."""
    return data[: rng.randrange(1, len(data))] if len(data) > 1 else data


# ----- packets the codec refuses to encode ---------------------------------------------


def invalid_utf8_topic(_data: bytes, version: int, rng: random.Random) -> bytes:
    """A PUBLISH whose topic is not UTF-8 [MQTT-1.5.4-1], or an overlong NUL."""
    topic = rng.choice([b"a/\xff\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"ok/\x80"])
    return _publish(topic, version)


def nul_in_topic(_data: bytes, version: int, _rng: random.Random) -> bytes:
    """U+0000 in a topic name [MQTT-1.5.4-2]."""
    return _publish(b"a/\x00/b", version)


def wildcard_topic(_data: bytes, version: int, rng: random.Random) -> bytes:
    """A wildcard in a PUBLISH topic name [MQTT-3.3.2-2]."""
    return _publish(rng.choice([b"a/+/b", b"#", b"a/#", b"+"]), version, qos=rng.randint(0, 1))


def duplicated_property(_data: bytes, version: int, rng: random.Random) -> bytes:
    """A property that may appear once, twice (5.0 section 2.2.2.2)."""
    twice = rng.choice(
        [
            b"\x01\x01\x01\x00",  # Payload Format Indicator twice
            b"\x02\x00\x00\x00\x0a\x02\x00\x00\x00\x0b",  # Message Expiry Interval twice
            b"\x23\x00\x01\x23\x00\x02",  # Topic Alias twice
        ]
    )
    return _publish(b"dup/prop", 5, twice)


def misplaced_property(_data: bytes, version: int, rng: random.Random) -> bytes:
    """A property not allowed in PUBLISH, or an unknown property id."""
    wrong = rng.choice(
        [
            b"\x11\x00\x00\x00\x10",  # Session Expiry Interval
            b"\x21\x00\x05",  # Receive Maximum
            b"\x7f\x00",  # no such property
            b"\x23\x00\x00",  # Topic Alias 0 [MQTT-3.3.2-8]
        ]
    )
    return _publish(b"misplaced/prop", 5, wrong)


ENCODED_MUTATIONS: tuple[Mutation, ...] = (bad_flags, bad_length, bad_varint, flip_byte, truncate)
BUILT_MUTATIONS: tuple[Mutation, ...] = (
    invalid_utf8_topic,
    nul_in_topic,
    wildcard_topic,
    duplicated_property,
    misplaced_property,
)
