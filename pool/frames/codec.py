"""The frame codec: every frame's kind on the wire, `encode_frame`, and the incremental
`FrameDecoder` that turns a link's bytes into frames, checking each as it is decoded.

A frame is a 4-byte little-endian body length, a 1-byte kind, then the body (the layout of
the store process's frames, `store.process_protocol`). A control frame's body is the orjson
list of its field values, checked against their annotations as it is decoded
(pool.frames.validation); the frames that carry messages have binary bodies
(pool.frames.messages).

`FrameDecoder.feed(bytes)` is incremental: a link is a byte stream, and a read may end in
the middle of a frame. A frame that does not parse raises `FrameError`; the link that sent
it is broken and is closed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter
from typing import Any

import orjson

from mqtt.errors import MqttError
from pool.frames.admission import (
    AuthFailed,
    AuthFailing,
    AuthFailures,
    AuthSucceeded,
    Connecting,
    ListenerCounts,
)
from pool.frames.flow import FlowHold, FlowRelease
from pool.frames.forwarding import (
    CommitSync,
    Committed,
    Forward,
    ForwardShared,
    Numbered,
    Retained,
    RetainedSnapshot,
    Unconfirmed,
)
from pool.frames.messages import DECODERS, ENCODERS
from pool.frames.moves import (
    Adopted,
    MovedDeliveries,
    MoveEnded,
    MoveRoutesKnown,
    MovingOut,
    Orphans,
)
from pool.frames.operations import BanLifted, BanSet, BansSnapshot, OpsReply, OpsRequest
from pool.frames.ownership import (
    Claim,
    ClaimRefused,
    Declined,
    GiveUp,
    Granted,
    HandedOver,
    HandOver,
    Owned,
    Release,
    SessionHandedOver,
    Settled,
)
from pool.frames.peers import Hello, Leaving
from pool.frames.routes import (
    RoutesChanged,
    RoutesSnapshot,
    RoutesSync,
    RoutesSynced,
    SharesChanged,
    SharesSnapshot,
)
from pool.frames.store import DurableRoutes, DurableSnapshot, StoreFailing
from pool.frames.validation import FrameError, checked_values, field_shape

_FRAME_HEADER = struct.Struct("<IB")
MAX_FRAME = 256 * 1024 * 1024  # a frame longer than this is a broken link, not a big batch

Frame = (
    Hello
    | RoutesChanged
    | RoutesSnapshot
    | Forward
    | Retained
    | Claim
    | Granted
    | Settled
    | Release
    | Declined
    | HandOver
    | HandedOver
    | GiveUp
    | SessionHandedOver
    | RetainedSnapshot
    | Owned
    | RoutesSync
    | RoutesSynced
    | CommitSync
    | Committed
    | Leaving
    | SharesChanged
    | SharesSnapshot
    | ForwardShared
    | OpsRequest
    | OpsReply
    | BanSet
    | BanLifted
    | BansSnapshot
    | FlowHold
    | FlowRelease
    | MovingOut
    | MovedDeliveries
    | MoveRoutesKnown
    | MoveEnded
    | Connecting
    | ClaimRefused
    | AuthFailed
    | AuthFailures
    | AuthFailing
    | AuthSucceeded
    | StoreFailing
    | DurableRoutes
    | DurableSnapshot
    | ListenerCounts
    | Adopted
    | Orphans
    | Numbered
    | Unconfirmed
)

# Frame kinds on the wire. New kinds get new numbers; a number is never reused.
_KINDS: dict[type[Frame], int] = {
    Hello: 1,
    RoutesChanged: 2,
    RoutesSnapshot: 3,
    Forward: 4,
    Retained: 5,
    Claim: 6,
    Granted: 7,
    Release: 8,
    Settled: 9,
    HandOver: 10,
    HandedOver: 11,
    Owned: 12,
    RoutesSync: 13,
    RoutesSynced: 14,
    CommitSync: 15,
    Committed: 16,
    Leaving: 17,
    # 40-49: shared subscriptions across the pool.
    SharesChanged: 40,
    SharesSnapshot: 41,
    ForwardShared: 42,
    # 50-59: flow control across the pool.
    FlowHold: 50,
    FlowRelease: 51,
    # 60-79: the operations surface.
    OpsRequest: 60,
    OpsReply: 61,
    BanSet: 62,
    BanLifted: 63,
    BansSnapshot: 64,
    # 80-99: moving a session between workers.
    MovingOut: 80,
    MovedDeliveries: 81,
    MoveRoutesKnown: 82,
    MoveEnded: 83,
    Adopted: 84,
    Orphans: 85,
    # 100-109: flapping detection across the pool.
    Connecting: 100,
    ClaimRefused: 101,
    # 110-119: refused-CONNECT delays and the store's state across the pool.
    AuthFailed: 110,
    AuthFailures: 111,
    AuthFailing: 112,
    AuthSucceeded: 113,
    StoreFailing: 114,
    DurableRoutes: 115,
    DurableSnapshot: 116,
    # 120-129: listeners' connection counts across the pool.
    ListenerCounts: 120,
    GiveUp: 130,
    SessionHandedOver: 131,
    RetainedSnapshot: 132,
    Numbered: 133,
    Unconfirmed: 134,
    Declined: 135,
}
# The control frames (orjson bodies): every kind whose body is not pool.frames.messages'.
_CONTROL_FIELDS = {
    cls: tuple(field_shape(field) for field in fields(cls)) for cls in _KINDS if cls not in ENCODERS
}


def _field_values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A control frame's field values in order, for its orjson body."""
    if len(names) == 1:
        get_one = attrgetter(names[0])
        return lambda frame: (get_one(frame),)
    return attrgetter(*names)


_FIELD_VALUES = {
    cls: _field_values(tuple(name for name, _types, _items in shape))
    for cls, shape in _CONTROL_FIELDS.items()
}


def encode_frame(frame: Frame) -> bytes:
    """The bytes of one frame."""
    cls = type(frame)
    encode = ENCODERS.get(cls)
    body = orjson.dumps(_FIELD_VALUES[cls](frame)) if encode is None else encode(frame)
    return _FRAME_HEADER.pack(len(body), _KINDS[cls]) + body


def _control_decoder(cls: type[Frame]) -> Callable[[bytes], Frame]:
    shape = _CONTROL_FIELDS[cls]
    name = cls.__name__

    def decode(body: bytes) -> Frame:
        return cls(*checked_values(name, shape, orjson.loads(body)))

    return decode


class FrameDecoder:
    """Bytes of one link in, complete frames out, in order."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        """Add `data`; return the frames it completes. Raises FrameError."""
        pending = self._pending
        # Whole frames are sliced from the read itself; only a frame that spans reads is
        # put together in `pending`.
        buffer: bytes | bytearray = data
        if pending:
            pending += data
            buffer = pending
        frames: list[Frame] = []
        pos = 0
        end_of_data = len(buffer)
        while end_of_data - pos >= _FRAME_HEADER.size:
            size, kind = _FRAME_HEADER.unpack_from(buffer, pos)
            if size > MAX_FRAME:
                raise FrameError(f"frame of {size} bytes exceeds {MAX_FRAME}: broken link")
            start = pos + _FRAME_HEADER.size
            end = start + size
            if end > end_of_data:
                break
            frames.append(_decode_checked(kind, bytes(buffer[start:end])))
            pos = end
        if buffer is pending:
            del pending[:pos]
        elif pos < end_of_data:
            pending += data[pos:]
        return frames


def _decode_checked(kind: int, body: bytes) -> Frame:
    """The frame of one body, with every way bad bytes can fail turned into FrameError."""
    decode = _DECODERS.get(kind)
    if decode is None:
        raise FrameError(f"unknown frame kind {kind}")
    try:
        return decode(body)
    except FrameError:
        raise
    except (
        orjson.JSONDecodeError,
        MqttError,
        TypeError,
        ValueError,
        IndexError,
        struct.error,
    ) as error:
        raise FrameError(f"frame of kind {kind} does not parse: {error}") from error


# How each kind's body is decoded.
_DECODERS: dict[int, Callable[[bytes], Frame]] = {
    kind: DECODERS.get(cls) or _control_decoder(cls) for cls, kind in _KINDS.items()
}
