"""The bodies of the frames that carry messages (`Forward`, `ForwardShared`, `Retained`,
`RetainedSnapshot`, `Orphans`, `Unconfirmed`, `MovingOut`, `MovedDeliveries`): encoded and
decoded here, checked as they are decoded.

Their message part is the message count and the size of the string table (two 4-byte
lengths), the string table (an orjson list: `null`, then each distinct topic, client id and
username of the frame once), one fixed-size binary record per message (flags, timestamp, id,
string indexes, sizes: `_MESSAGE_RECORD`), then each message's MQTT 5 property block (the
codec's own encoding, so binary values travel as they are) and its payload, raw, or instead
the PUBLISH a 3.x client sent for a QoS 0 message (`Message.wire`, which ends with the
payload), so the receiving worker writes it to QoS 0 subscribers as it is instead of
encoding it again. The records decode in one `struct` pass and the strings once per frame,
not once per message: decoding is what a worker pays for every message another worker
forwards it.

Before the message part: a `Forward`'s 4-byte publisher id, 8-byte batch number and 1-byte
layout, records (0: this message part) or packets (1: a batch of 3.x QoS 0 messages as the
PUBLISH packets they came in, pool.frames.packets); a
`ForwardShared`'s publisher id and batch number, then a 4-byte length and an orjson list of
one `ShareMark` per message; an `Orphans`'s dead worker and round (4 bytes each); an
`Unconfirmed`'s epoch and batch number (8 bytes each). A frame that carries
deliveries (`MovingOut`, `MovedDeliveries`) starts with a 4-byte length and an orjson list of
its other fields and one row per delivery; the message part holds the deliveries'
messages.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import fields
from typing import Any

import orjson

from core.message import Message, stored_message
from core.session_state import Delivery
from core.share_origin import ShareMark, ShareOrigin
from mqtt.packets import PacketType
from mqtt.properties import encode_properties, read_properties
from pool.frames.forwarding import (
    Forward,
    ForwardShared,
    Retained,
    RetainedSnapshot,
    Unconfirmed,
)
from pool.frames.moves import MovedDeliveries, MovingOut, Orphans
from pool.frames.packets import decode_packets, encode_packets
from pool.frames.validation import (
    FrameError,
    checked_delivery_row,
    checked_string_table,
    checked_values,
    field_shape,
    is_share_row,
)

_U32 = struct.Struct("<I")
_U32x2 = struct.Struct("<II")
_U64x2 = struct.Struct("<QQ")
_FORWARD_HEAD = struct.Struct("<IQB")  # publisher, batch, layout of its messages
_RECORDS, _PACKETS = 0, 1  # a Forward's layouts: records (below) or packets (.packets)
_SHARED_HEAD = struct.Struct("<IQI")  # publisher, batch, size of the share marks
# A message's fixed-size record: flags (QoS in bits 0-1, RETAIN in bit 2), timestamp, message
# id, the indexes of its topic, publisher and username in the frame's string table, and the
# sizes of its property block, its payload and the PUBLISH head before it (0: no `wire`).
_MESSAGE_RECORD = struct.Struct("<BdQIIIIII")
_QOS_BITS = 0b011
_RETAIN_FLAG = 0b100
# Every valid record flags: QoS 0-2, with or without RETAIN.
_VALID_FLAGS = frozenset(qos | retain for qos in range(3) for retain in (0, _RETAIN_FLAG))
_INFINITY = float("inf")
_RUNS_PAST = "a message's payload runs past the end of the frame"
_PLAIN_QOS0_PUBLISH = 0x30  # the first byte of a 3.x QoS 0 PUBLISH without DUP or RETAIN
_MIN_PUBLISH_HEAD = 5  # that byte, a 1-byte length, a topic of at least 1 byte [MQTT-4.7.3-1]

MessageFrame = (
    Forward
    | ForwardShared
    | Retained
    | RetainedSnapshot
    | Orphans
    | Unconfirmed
    | MovingOut
    | MovedDeliveries
)


def _encode_forward_shared(frame: ForwardShared) -> bytes:
    marks = orjson.dumps(
        [
            [mark.ordinary, [[s.group, s.topic_filter, sorted(s.tried)] for s in mark.shares]]
            for mark in frame.marks
        ]
    )
    messages = _encode_messages(frame.messages)
    head = _SHARED_HEAD.pack(frame.publisher, frame.batch, len(marks))
    return b"".join((head, marks, messages))


def _encode_forward(frame: Forward) -> bytes:
    messages = tuple(frame.messages)  # a tuple as is: frames this worker made
    packets = encode_packets(messages)
    if packets is not None:
        return _FORWARD_HEAD.pack(frame.publisher, frame.batch, _PACKETS) + packets
    head = _FORWARD_HEAD.pack(frame.publisher, frame.batch, _RECORDS)
    return head + _encode_messages(messages)


def _encode_orphans(frame: Orphans) -> bytes:
    return _U32x2.pack(frame.dead, frame.round) + _encode_messages(frame.messages)


def _encode_unconfirmed(frame: Unconfirmed) -> bytes:
    return _U64x2.pack(frame.epoch, frame.batch) + _encode_messages(frame.messages)


def _encode_retained(frame: Retained | RetainedSnapshot) -> bytes:
    return _encode_messages(frame.messages)


def _encode_messages(messages: Sequence[Message]) -> bytes:
    strings: dict[str | None, int] = {None: 0}  # the frame's string table, in index order
    index = strings.setdefault
    size = _MESSAGE_RECORD.size
    records = bytearray(len(messages) * size)  # packed in place: no bytes object per record
    tail: list[bytes] = []  # each message's property block (if any), then its payload or wire
    append = tail.append
    pack_into = _MESSAGE_RECORD.pack_into
    offset = 0
    # A batch comes in runs of one publisher's messages, mostly to one topic: the previous
    # message's strings and indexes are compared before the table is asked.
    topic = publisher = username = None
    topic_at = publisher_at = username_at = 0
    for message in messages:
        payload, wire = message.payload, message.wire
        props_size = 0
        if message.properties:
            props = encode_properties(message.properties)
            props_size = len(props)
            append(props)
        if message.topic != topic:
            topic = message.topic
            topic_at = index(topic, len(strings))
        if message.publisher != publisher:
            publisher = message.publisher
            publisher_at = index(publisher, len(strings))
        if message.username != username:
            username = message.username
            username_at = index(username, len(strings))
        pack_into(
            records,
            offset,
            message.qos | _RETAIN_FLAG if message.retain else message.qos,
            message.timestamp,
            message.message_id,
            topic_at,
            publisher_at,
            username_at,
            props_size,
            len(payload),
            0 if wire is None else len(wire) - len(payload),
        )
        offset += size
        append(payload if wire is None else wire)
    table = orjson.dumps(list(strings))
    return b"".join((_U32x2.pack(len(messages), len(table)), table, records, *tail))


# The frames that carry deliveries: their other fields (orjson, checked as control fields
# are), then one row per delivery; the deliveries' field is named here.
_CARRY_DELIVERIES: dict[type[MovingOut | MovedDeliveries], str] = {
    MovingOut: "qos0",
    MovedDeliveries: "deliveries",
}
_HEAD_FIELDS = {
    cls: tuple(field_shape(field) for field in fields(cls) if field.name != carried)
    for cls, carried in _CARRY_DELIVERIES.items()
}


def _head_values(frame: MovingOut | MovedDeliveries) -> list[Any]:
    return [getattr(frame, name) for name, _types, _items in _HEAD_FIELDS[type(frame)]]


def _encode_deliveries(frame: MovingOut | MovedDeliveries) -> bytes:
    """A frame's fields and one row per delivery (orjson), then the deliveries' messages."""
    deliveries: tuple[Delivery, ...] = getattr(frame, _CARRY_DELIVERIES[type(frame)])
    rows = [[d.qos, d.retain, d.subscription_ids, d.seq] for d in deliveries]
    head = orjson.dumps([*_head_values(frame), rows])
    messages = _encode_messages(tuple(delivery.message for delivery in deliveries))
    return b"".join((_U32.pack(len(head)), head, messages))


def _decode_deliveries(body: bytes, cls: type[MovingOut | MovedDeliveries]) -> dict[str, Any]:
    """The fields of a frame that carries deliveries, by name, its deliveries included."""
    (head_size,) = _U32.unpack_from(body, 0)
    pos = _U32.size + head_size
    shape = _HEAD_FIELDS[cls]
    values = checked_values(cls.__name__, shape, orjson.loads(body[_U32.size : pos]), extra=1)
    messages = _decode_messages(body[pos:])
    rows = values.pop()
    if type(rows) is not list or len(rows) != len(messages):
        raise FrameError(f"a {cls.__name__} frame's delivery rows are {rows!r}")
    deliveries = tuple(
        Delivery(message, *checked_delivery_row(row))
        for message, row in zip(messages, rows, strict=True)
    )
    named = {name: value for (name, *_shape), value in zip(shape, values, strict=True)}
    return {**named, _CARRY_DELIVERIES[cls]: deliveries}


def _decode_moving_out(body: bytes) -> MovingOut:
    return MovingOut(**_decode_deliveries(body, MovingOut))


def _decode_moved_deliveries(body: bytes) -> MovedDeliveries:
    return MovedDeliveries(**_decode_deliveries(body, MovedDeliveries))


def _decode_messages(body: bytes, start: int = 0) -> tuple[Message, ...]:
    """The messages of a body whose message part begins at `start`."""
    rows, strings, pos = _message_records(body, start)
    return _messages_of(body, pos, rows, strings)


def _message_records(
    body: bytes, start: int
) -> tuple[Iterator[tuple[Any, ...]], list[str | None], int]:
    """A message part's records, its string table and where the records' parts begin."""
    count, table_size = _U32x2.unpack_from(body, start)
    pos = start + _U32x2.size + table_size
    strings = checked_string_table(orjson.loads(body[start + _U32x2.size : pos]))
    records_end = pos + count * _MESSAGE_RECORD.size
    if records_end > len(body):
        raise FrameError(f"a message frame's {count} records run past its end")
    return _MESSAGE_RECORD.iter_unpack(body[pos:records_end]), strings, records_end


def _messages_of(
    body: bytes, pos: int, rows: Iterable[tuple[Any, ...]], strings: list[str | None]
) -> tuple[Message, ...]:
    """The messages of `rows`, whose parts begin at `pos`. The hot loop of a receiving
    worker: one pass, and each message's parts are checked against the frame's end once,
    after the last (a part cut short is a frame that ends too soon)."""
    body_size = len(body)
    messages: list[Message] = []
    append = messages.append
    for flags, timestamp, message_id, topic, publisher, username, props_size, size, head in rows:
        if flags not in _VALID_FLAGS or not topic:
            raise FrameError(f"a message's record has flags {flags} and topic {topic}")
        if not -_INFINITY < timestamp < _INFINITY:
            raise FrameError(f"a message's timestamp is {timestamp}")
        if props_size:
            properties = _property_block(body, pos, pos + props_size)
            pos += props_size
        else:
            properties = {}
        end = pos + head + size
        if head:  # the encoded 3.x QoS 0 PUBLISH (`Message.wire`), which ends with the payload
            if end > body_size:
                raise FrameError(_RUNS_PAST)
            wire = body[pos:end]
            if head < _MIN_PUBLISH_HEAD or wire[0] != _PLAIN_QOS0_PUBLISH or flags:
                raise FrameError("a message's encoded PUBLISH is not a plain QoS 0 PUBLISH")
            payload = body[pos + head : end]
        else:
            wire = None
            payload = body[pos:end]
        pos = end
        append(
            stored_message(
                strings[topic],
                payload,
                flags & _QOS_BITS,
                flags > _QOS_BITS,
                strings[publisher],
                strings[username],
                timestamp,
                properties,
                message_id,
                wire,
            )
        )
    if pos > body_size:
        raise FrameError(_RUNS_PAST)
    if pos != body_size:
        raise FrameError(f"{body_size - pos} bytes follow the last message of the frame")
    return tuple(messages)


def _property_block(body: bytes, start: int, stop: int) -> dict[int, Any]:
    """A message's MQTT 5 properties, which fill `body[start:stop]`; else FrameError."""
    if stop > len(body):
        raise FrameError("a message's property block runs past the end of the frame")
    properties, end = read_properties(body, start, stop, PacketType.PUBLISH)
    if end != stop:
        raise FrameError("a message's property block does not fill its declared size")
    return properties


def _decode_marks(rows: object) -> tuple[ShareMark, ...]:
    """The share marks of a `ForwardShared`, if every row has its shape; else FrameError."""
    if type(rows) is not list:
        raise FrameError("a ForwardShared's share marks are not a list")
    marks: list[ShareMark] = []
    for row in rows:
        if not (type(row) is list and len(row) == 2 and type(row[0]) is bool):
            raise FrameError(f"a share mark is {row!r}")
        ordinary, shares = row
        if type(shares) is not list or not all(is_share_row(share) for share in shares):
            raise FrameError(f"a share mark's groups are {shares!r}")
        origins = tuple(ShareOrigin(group, f, frozenset(tried)) for group, f, tried in shares)
        marks.append(ShareMark(ordinary, origins))
    return tuple(marks)


def _decode_forward_shared(body: bytes) -> ForwardShared:
    publisher, batch, marks_size = _SHARED_HEAD.unpack_from(body, 0)
    start = _SHARED_HEAD.size + marks_size
    marks = _decode_marks(orjson.loads(body[_SHARED_HEAD.size : start]))
    return ForwardShared(_decode_messages(body, start), marks, publisher, batch)


def _decode_forward(body: bytes) -> Forward:
    publisher, batch, layout = _FORWARD_HEAD.unpack_from(body, 0)
    if layout == _PACKETS:
        return Forward(decode_packets(body, _FORWARD_HEAD.size), publisher, batch)
    if layout != _RECORDS:
        raise FrameError(f"a Forward's messages have the unknown layout {layout}")
    return Forward(_decode_messages(body, _FORWARD_HEAD.size), publisher, batch)


def _decode_orphans(body: bytes) -> Orphans:
    dead, round_ = _U32x2.unpack_from(body, 0)
    return Orphans(_decode_messages(body, _U32x2.size), dead, round_)


def _decode_unconfirmed(body: bytes) -> Unconfirmed:
    epoch, batch = _U64x2.unpack_from(body, 0)
    return Unconfirmed(_decode_messages(body, _U64x2.size), epoch, batch)


def _decode_retained(body: bytes) -> Retained:
    return Retained(_decode_messages(body))


def _decode_retained_snapshot(body: bytes) -> RetainedSnapshot:
    return RetainedSnapshot(_decode_messages(body))


# How each message-carrying frame's body is encoded and decoded (keyed by `type[object]`
# so that the codec looks any frame's class up; each encoder takes its own class).
ENCODERS: dict[type[object], Callable[[Any], bytes]] = {
    ForwardShared: _encode_forward_shared,
    Forward: _encode_forward,
    Retained: _encode_retained,
    RetainedSnapshot: _encode_retained,
    Orphans: _encode_orphans,
    Unconfirmed: _encode_unconfirmed,
    MovingOut: _encode_deliveries,
    MovedDeliveries: _encode_deliveries,
}
DECODERS: dict[type[object], Callable[[bytes], MessageFrame]] = {
    ForwardShared: _decode_forward_shared,
    Forward: _decode_forward,
    Retained: _decode_retained,
    RetainedSnapshot: _decode_retained_snapshot,
    Orphans: _decode_orphans,
    Unconfirmed: _decode_unconfirmed,
    MovingOut: _decode_moving_out,
    MovedDeliveries: _decode_moved_deliveries,
}
