"""Wire primitives of MQTT (section 1.5): integers, variable byte integers, strings, binary data.

Readers take `(buf, pos, end)` over one `bytes` buffer and return `(value, next_pos)`; they
never read at or past `end` (the end of the current packet or property block) and raise
`MalformedPacketError` when a field runs past it. Writers return `bytes`.
"""

from __future__ import annotations

import re

from mqtt.errors import MalformedPacketError

MAX_VARINT = 268_435_455
"""The largest variable byte integer, hence the largest remaining length (section 1.5.5)."""

_SMALL_VARINTS = [bytes((value,)) for value in range(128)]


def encode_varint(value: int) -> bytes:
    """The variable byte integer encoding of `value` (0..268,435,455), minimal length."""
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    if not 0 <= value <= MAX_VARINT:
        raise ValueError(f"{value} does not fit a variable byte integer (0..{MAX_VARINT})")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a variable byte integer of at most 4 bytes, in its minimal encoding."""
    value = 0
    shift = 0
    for index in range(4):
        if pos >= end:
            raise MalformedPacketError(
                "variable byte integer runs past the end of the packet (section 1.5.5)"
            )
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and index:
                raise MalformedPacketError(
                    "variable byte integer is not in its minimal encoding [MQTT-1.5.5-1]"
                )
            return value, pos
        shift += 7
    raise MalformedPacketError("variable byte integer longer than 4 bytes (section 1.5.5)")


def read_byte(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise MalformedPacketError(
            "a one-byte field runs past the end of the packet (section 1.5.1)"
        )
    return buf[pos], pos + 1


def read_u16(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise MalformedPacketError(
            "a two-byte integer runs past the end of the packet (section 1.5.2)"
        )
    return (buf[pos] << 8) | buf[pos + 1], pos + 2


def read_u32(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise MalformedPacketError(
            "a four-byte integer runs past the end of the packet (section 1.5.3)"
        )
    return int.from_bytes(buf[pos : pos + 4], "big"), pos + 4


def read_binary(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    """Read two-byte-length-prefixed binary data (section 1.5.6)."""
    if pos + 2 > end:
        raise MalformedPacketError(
            "a binary data length runs past the end of the packet (section 1.5.6)"
        )
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise MalformedPacketError(
            f"binary data of {stop - pos - 2} bytes runs past the end of the packet (1.5.6)"
        )
    return buf[pos + 2 : stop], stop


def decode_utf8(raw: bytes) -> str:
    """Decode an MQTT UTF-8 string: well-formed, no surrogates, no U+0000."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise MalformedPacketError(
            f"string is not well-formed UTF-8 ({exc.reason}) [MQTT-1.5.3-1]"
        ) from None
    if "\x00" in text:
        raise MalformedPacketError("string contains U+0000 [MQTT-1.5.3-2]")
    return text


_CONTROL_CHARACTERS = re.compile("[\x01-\x1f\x7f-\x9f]")


def has_control_characters(text: str) -> bool:
    """Whether `text` holds a control character U+0001-U+001F or U+007F-U+009F. A UTF-8
    string SHOULD NOT, and a receiver MAY treat one that does as malformed (3.1.1 section
    1.5.3, 5.0 section 1.5.4); `decode_utf8` accepts them, whether to is the caller's
    policy."""
    return _CONTROL_CHARACTERS.search(text) is not None


def read_string(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    """Read a two-byte-length-prefixed UTF-8 string (section 1.5.4)."""
    if pos + 2 > end:
        raise MalformedPacketError(
            "a string length runs past the end of the packet (section 1.5.4)"
        )
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise MalformedPacketError(
            f"string of {stop - pos - 2} bytes runs past the end of the packet (section 1.5.4)"
        )
    return decode_utf8(buf[pos + 2 : stop]), stop


def read_string_pair(buf: bytes, pos: int, end: int) -> tuple[tuple[str, str], int]:
    name, pos = read_string(buf, pos, end)
    value, pos = read_string(buf, pos, end)
    return (name, value), pos


def encode_u16(value: int) -> bytes:
    return value.to_bytes(2, "big")


def encode_u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


def encode_binary(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ValueError(f"binary data of {len(data)} bytes exceeds 65535 (section 1.5.6)")
    return len(data).to_bytes(2, "big") + data


def encode_string(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 0xFFFF:
        raise ValueError(f"UTF-8 string of {len(raw)} bytes exceeds 65535 (section 1.5.4)")
    return len(raw).to_bytes(2, "big") + raw


def encode_string_pair(pair: tuple[str, str]) -> bytes:
    return encode_string(pair[0]) + encode_string(pair[1])


def frame(first_byte: int, body: bytes) -> bytes:
    """A whole packet: the fixed header (type/flags byte, remaining length) then `body`."""
    size = len(body)
    if size < 128:
        return bytes((first_byte, size)) + body
    return bytes((first_byte,)) + encode_varint(size) + body
