"""Frames on the socket between the broker and its store process (`store.process_store`).

A frame is a 4-byte little-endian body length, a 1-byte kind, then the body. The broker sends
one request and waits for its answer before the next, so frames never interleave. The same
functions serve both ends: the broker's gevent socket and the store process's plain one have
the same `send`/`recv_into`. A frame is written with `send` until all of it went, not
`sendall`: gevent's `sendall` asks the socket its buffer size first, a system call per
commit for nothing (3.5 % of the broker's profile samples with one message per commit).
"""

from __future__ import annotations

import struct
from typing import Protocol

_HEADER = struct.Struct("<IB")

# Requests (broker -> store process); bodies: APPLY an op batch (store.op_codec), LOAD_SESSION
# a client id (UTF-8), others none. LOAD_SESSION is answered with a snapshot of that session.
APPLY, LOAD, CLOSE, LOAD_SESSION = 1, 2, 3, 4
# Answers (store process -> broker); bodies: DONE to LOAD a snapshot (store.op_codec), FAILED
# the error message (UTF-8), others none. READY is sent once, when the store is open.
READY, DONE, FAILED = 10, 11, 12


class FrameSocket(Protocol):
    """What the frames need of a socket: a blocking one, or gevent's (the broker's side)."""

    def send(self, data: bytes | memoryview, /) -> int: ...

    def recv_into(self, buffer: memoryview, /) -> int: ...


def send_frame(sock: FrameSocket, kind: int, body: bytes = b"") -> None:
    data = b"".join((_HEADER.pack(len(body), kind), body))
    sent = sock.send(data)  # a gevent socket waits while the socket is full
    while sent < len(data):
        sent += sock.send(memoryview(data)[sent:])


def receive_frame(sock: FrameSocket) -> tuple[int, bytearray]:
    """The next frame's (kind, body); EOFError if the other end closed the socket."""
    length, kind = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    return kind, _receive_exactly(sock, length)


def _receive_exactly(sock: FrameSocket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = sock.recv_into(view[received:])
        if count == 0:
            raise EOFError("the other end closed the socket")
        received += count
    return buffer
