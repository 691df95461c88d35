"""WebSocket frames as a client sends them, built by hand (RFC 6455 section 5.2).

wsproto's client sends nothing before the server's 101 and reads every answer; tests that
send frames right behind the upgrade request, or pings while reading nothing, build their
frames here. Client frames are always masked (section 5.3).
"""

from __future__ import annotations

BINARY = 0x2
PING = 0x9
_MASK = b"\x01\x02\x03\x04"


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked frame of `opcode` carrying `payload` (under 64 KiB)."""
    size = len(payload)
    if size < 126:
        header = bytes((0x80 | opcode, 0x80 | size))
    else:
        header = bytes((0x80 | opcode, 0x80 | 126)) + size.to_bytes(2, "big")
    masked = bytes(byte ^ _MASK[index % 4] for index, byte in enumerate(payload))
    return header + _MASK + masked
