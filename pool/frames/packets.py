"""The packet layout of a `Forward`'s messages: a batch of 3.x QoS 0 messages carried as the
PUBLISH packets they came in, encoded and decoded here, checked as they are decoded.

A worker's publish batch comes from one connection. When every message of a `Forward`
carries the 3.x QoS 0 PUBLISH without RETAIN its client sent (`Message.wire`: the frames of a
QoS 0 fan-in across workers or nodes), the frame sends those packets instead of one record
per message (pool.frames.messages): the packet already holds the topic and the payload, so
what is left per message is its timestamp and id, and each column is packed and unpacked
with one C-level pass instead of a Python step per message. The layout:

- two 4-byte lengths: the message count and the size of the names;
- the names, an orjson list: `[publisher, username, [[topic, count], ...]]`, the client id
  and username the batch was published with and its runs of one topic, in order;
- the messages' timestamps (8-byte floats), then their ids (8 bytes), then the sizes of
  their packets (4 bytes), each a column of `count` little-endian values;
- the packets, back to back.

The receiver takes the packets as they are (`core.wire_messages.WireMessages`): a 3.x
subscriber's session writes them, and the `Message`s are built only for a session that needs
more, each with the payload its own packet holds. A packet's first byte (a QoS 0 PUBLISH
without DUP or RETAIN) and its size are checked, as the record layout checks them; the
bytes between the first byte and the payload are the publisher's, taken on trust from the
sending worker as in that layout.
"""

from __future__ import annotations

import struct
from functools import partial
from itertools import accumulate, groupby
from math import isfinite
from operator import attrgetter
from typing import Any

import orjson

from core.message import Message, stored_message
from core.wire_messages import WireMessages
from pool.frames.validation import FrameError

_COUNTS = struct.Struct("<II")  # messages, size of the names
_COLUMN_BYTES = 20  # a message's timestamp (8), id (8) and packet size (4)
_PLAIN_QOS0_PUBLISH = 0x30  # the first byte of a 3.x QoS 0 PUBLISH without DUP or RETAIN
_MIN_PACKET = 5  # that byte, a 1-byte length, a topic of at least 1 byte [MQTT-4.7.3-1]
_MAX_LENGTH_BYTES = 4  # of a packet's Remaining Length (MQTT 3.1.1 section 2.2.3)

_wire = attrgetter("wire")
_timestamp = attrgetter("timestamp")
_message_id = attrgetter("message_id")
_topic = attrgetter("topic")
_publisher = attrgetter("publisher")
_username = attrgetter("username")


def _same(values: list[Any]) -> bool:
    return values.count(values[0]) == len(values)


def encode_packets(messages: tuple[Message, ...]) -> bytes | None:
    """The packet layout of `messages` if every one carries its 3.x QoS 0 PUBLISH and they
    share a publisher and a username (one connection's batch); else None.

    A message with a `wire` is QoS 0 without RETAIN or properties: only the decoder of a
    3.x PUBLISH sets it (`mqtt.decoder`), and a message changed with `dataclasses.replace`
    loses it."""
    if not messages:
        return None
    wires = list(map(_wire, messages))
    if None in wires:
        return None
    publishers = list(map(_publisher, messages))
    usernames = list(map(_username, messages))
    if not (_same(publishers) and _same(usernames)):
        return None
    count = len(messages)
    runs = [[topic, len(list(run))] for topic, run in groupby(map(_topic, messages))]
    names = orjson.dumps([publishers[0], usernames[0], runs])
    return b"".join(
        (
            _COUNTS.pack(count, len(names)),
            names,
            struct.pack(f"<{count}d", *map(_timestamp, messages)),
            struct.pack(f"<{count}Q", *map(_message_id, messages)),
            struct.pack(f"<{count}I", *map(len, wires)),
            *wires,
        )
    )


def decode_packets(body: bytes, start: int) -> WireMessages:
    """The messages of a packet layout that begins at `start` and fills the rest of `body`;
    else FrameError."""
    count, names_size = _COUNTS.unpack_from(body, start)
    if not count:
        raise FrameError("a packet frame holds no message")
    pos = start + _COUNTS.size + names_size
    publisher, username, runs = _checked_names(orjson.loads(body[start + _COUNTS.size : pos]))
    if sum(length for _topic, length in runs) != count:
        raise FrameError(f"a packet frame's runs do not add up to its {count} messages")
    wires_at = pos + count * _COLUMN_BYTES
    if wires_at > len(body):
        raise FrameError(f"a packet frame's {count} columns run past its end")
    timestamps = struct.unpack_from(f"<{count}d", body, pos)
    ids = struct.unpack_from(f"<{count}Q", body, pos + 8 * count)
    sizes = struct.unpack_from(f"<{count}I", body, pos + 16 * count)
    if not all(map(isfinite, timestamps)):
        raise FrameError("a message's timestamp is not finite")
    if min(sizes) < _MIN_PACKET:
        raise FrameError(f"a packet frame holds a packet of {min(sizes)} bytes")
    ends = list(accumulate(sizes, initial=wires_at))
    if ends[-1] != len(body):
        raise FrameError(f"a packet frame's packets end at {ends[-1]}, its body at {len(body)}")
    starts = ends[:-1]
    if bytes(map(body.__getitem__, starts)).count(_PLAIN_QOS0_PUBLISH) != count:
        raise FrameError("a message's encoded PUBLISH is not a plain QoS 0 PUBLISH")
    wires = list(map(body.__getitem__, map(slice, starts, ends[1:])))
    spans: list[tuple[str, int, int]] = []
    at = 0
    for topic, length in runs:
        spans.append((topic, at, at + length))
        at += length
    build = partial(
        _messages,
        wires,
        spans,
        publisher=publisher,
        username=username,
        timestamps=timestamps,
        ids=ids,
    )
    return WireMessages(wires, spans, {publisher}, build)


def _checked_names(names: object) -> tuple[str | None, str | None, list[tuple[str, int]]]:
    """A packet frame's publisher, username and runs of one topic; else FrameError."""
    if not (type(names) is list and len(names) == 3 and type(names[2]) is list):
        raise FrameError(f"a packet frame's names are {names!r}")
    publisher, username, rows = names
    if not all(name is None or type(name) is str for name in (publisher, username)):
        raise FrameError(f"a packet frame's publisher and username are {publisher!r}, {username!r}")
    runs: list[tuple[str, int]] = []
    for row in rows:
        if not (
            type(row) is list
            and len(row) == 2
            and type(row[0]) is str
            and row[0]
            and type(row[1]) is int
            and row[1] > 0
        ):
            raise FrameError(f"a packet frame's run is {row!r}")
        runs.append((row[0], row[1]))
    return publisher, username, runs


def _payload(wire: bytes) -> bytes:
    """What follows the Remaining Length and the topic of a 3.x QoS 0 PUBLISH of at least
    `_MIN_PACKET` bytes: its payload (never raises, whatever the bytes)."""
    topic_at = 2  # after the first byte and a Remaining Length of 1 byte
    while topic_at <= _MAX_LENGTH_BYTES and wire[topic_at - 1] > 0x7F:
        topic_at += 1
    return wire[topic_at + 2 + int.from_bytes(wire[topic_at : topic_at + 2], "big") :]


def _messages(
    wires: list[bytes],
    spans: list[tuple[str, int, int]],
    *,
    publisher: str | None,
    username: str | None,
    timestamps: tuple[float, ...],
    ids: tuple[int, ...],
) -> tuple[Message, ...]:
    """The messages of a packet frame, each with its packet as its `wire`."""
    messages: list[Message] = []
    append = messages.append
    for topic, begin, end in spans:
        for index in range(begin, end):
            wire = wires[index]
            append(
                stored_message(
                    topic,
                    _payload(wire),
                    0,
                    False,
                    publisher,
                    username,
                    timestamps[index],
                    {},
                    ids[index],
                    wire,
                )
            )
    return tuple(messages)
