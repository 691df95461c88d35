"""The fabric's frame codec (pool/frames/) under hypothesis.

- decode(encode(frames)) == frames, for every frame kind, whatever the messages carry (MQTT 5
  properties with binary values, empty and large payloads);
- any chunking of a link's byte stream gives the same frames;
- arbitrary or truncated-then-garbled bytes give frames or FrameError, never another error.
"""

from __future__ import annotations

import contextlib
import math
import struct
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.message import Message, stored_message
from core.session_state import Delivery
from core.share_origin import ShareMark, ShareOrigin
from mqtt.encoder import encode_publish
from mqtt.packets import PacketType
from pool.frames.admission import (
    AuthFailed,
    AuthFailing,
    AuthFailures,
    AuthSucceeded,
    Connecting,
    ListenerCounts,
)
from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.frames.flow import FLOW_REASONS, FlowHold, FlowRelease
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
from pool.frames.moves import (
    Adopted,
    MovedDeliveries,
    MoveEnded,
    MoveRoutesKnown,
    MovingOut,
    Orphans,
)
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
from pool.frames.validation import FrameError
from tests.property.test_codec_properties import properties, texts, topic_filters, topic_names

SETTINGS = settings(max_examples=100, deadline=None)

worker_ids = st.integers(0, 63)
client_ids = texts


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """Any message; a 3.x QoS 0 one may carry the PUBLISH its client sent (`wire`)."""
    topic, payload = draw(topic_names), draw(st.binary(max_size=300))
    qos, retain = draw(st.integers(0, 2)), draw(st.booleans())
    plain = qos == 0 and not retain and draw(st.booleans())
    return stored_message(
        topic,
        payload,
        qos,
        retain,
        draw(st.none() | client_ids),
        draw(st.none() | texts),
        draw(st.floats(0, 4e9, allow_nan=False)),
        {} if plain else draw(properties(PacketType.PUBLISH)),
        draw(st.integers(1, 2**53)),
        encode_publish(topic, payload, 0, False, False, None, None, 4) if plain else None,
    )


message_batches = st.lists(messages(), max_size=5).map(tuple)
publisher_ids = st.integers(0, 2**32 - 1)  # a Forward's 4-byte publisher id
batch_numbers = st.integers(0, 2**64 - 1)  # a numbered batch's number (0: none), 8 bytes
flow_reasons = st.sampled_from(FLOW_REASONS)


@st.composite
def deliveries(draw: st.DrawFn) -> Delivery:
    """A delivery as it crosses the fabric: no shared 3.x encoding, no share origin."""
    return Delivery(
        draw(messages()),
        draw(st.integers(0, 2)),
        draw(st.booleans()),
        tuple(draw(st.lists(st.integers(1, 268_435_455), max_size=3))),
        None,
        draw(st.integers(0, 2**53)),
    )


delivery_batches = st.lists(deliveries(), max_size=4).map(tuple)


@st.composite
def moving_out(draw: st.DrawFn) -> MovingOut:
    qos0 = draw(delivery_batches)
    after = tuple(draw(st.integers(0, 2**53)) for _ in qos0)
    user = draw(st.none() | texts)
    return MovingOut(draw(client_ids), user, draw(st.sampled_from([0, 1])), qos0, after)


filter_sets = st.lists(topic_filters, max_size=5).map(tuple)

share_marks = st.builds(
    ShareMark,
    st.booleans(),
    st.lists(
        st.builds(ShareOrigin, texts, topic_filters, st.frozensets(client_ids, max_size=3)),
        max_size=3,
    ).map(tuple),
)


@st.composite
def forward_shared(draw: st.DrawFn) -> ForwardShared:
    batch = draw(message_batches)
    marks = draw(st.lists(share_marks, min_size=len(batch), max_size=len(batch)))
    return ForwardShared(batch, tuple(marks), draw(publisher_ids), draw(batch_numbers))


@st.composite
def share_counts(draw: st.DrawFn) -> tuple[tuple[str, ...], tuple[int, ...]]:
    filters = draw(filter_sets)
    counts = draw(st.lists(st.integers(0, 2**31), min_size=len(filters), max_size=len(filters)))
    return tuple(f"$share/g/{f}" for f in filters), tuple(counts)


frames: st.SearchStrategy[Frame] = st.one_of(
    st.builds(
        Hello,
        worker_ids,
        st.integers(0, 2**40),
        st.lists(st.text(max_size=8), max_size=3).map(tuple),
    ),
    st.builds(RoutesChanged, filter_sets, filter_sets),
    st.builds(RoutesSnapshot, filter_sets),
    st.builds(Forward, message_batches, publisher_ids, batch_numbers),
    st.builds(FlowHold, st.integers(1, 2**40), flow_reasons),
    st.builds(FlowRelease, st.integers(1, 2**40), flow_reasons),
    st.builds(Retained, message_batches),
    st.builds(RetainedSnapshot, message_batches),
    st.builds(Claim, client_ids, worker_ids),
    st.builds(Granted, client_ids, worker_ids, st.none() | worker_ids),
    st.builds(ClaimRefused, client_ids, st.text(max_size=40)),
    st.builds(Connecting, client_ids),
    st.builds(Settled, client_ids, worker_ids),
    st.builds(Release, client_ids, worker_ids),
    st.builds(Declined, client_ids, worker_ids),
    st.builds(HandOver, client_ids, worker_ids, st.sampled_from([0, 1])),
    st.builds(HandedOver, client_ids),
    st.builds(GiveUp, client_ids, st.integers(0, 2**63 - 1), st.sampled_from([0, 1])),
    st.builds(SessionHandedOver, client_ids, st.integers(0, 2**63 - 1), texts),
    st.builds(Owned, worker_ids, st.lists(client_ids, max_size=5).map(tuple)),
    st.builds(RoutesSync, st.integers(0, 2**40)),
    st.builds(RoutesSynced, st.integers(0, 2**40)),
    st.builds(CommitSync, st.integers(0, 2**40), batch_numbers),
    st.builds(Committed, st.integers(0, 2**40)),
    st.builds(Leaving, worker_ids),
    st.builds(ListenerCounts, st.lists(st.integers(0, 2**31), max_size=4).map(tuple)),
    share_counts().map(lambda pair: SharesChanged(*pair)),
    share_counts().map(lambda pair: SharesSnapshot(*pair)),
    forward_shared(),
    moving_out(),
    st.builds(MovedDeliveries, client_ids, delivery_batches),
    st.builds(MoveRoutesKnown, client_ids),
    st.builds(MoveEnded, client_ids),
    st.builds(AuthFailed, st.integers(0, 2**40), texts),
    st.builds(AuthFailures, st.integers(0, 2**40), st.integers(0, 2**40)),
    st.builds(AuthFailing, texts),
    st.builds(AuthSucceeded, texts),
    st.builds(StoreFailing, st.sampled_from([0, 1])),
    st.builds(DurableRoutes, filter_sets, filter_sets),
    st.builds(DurableSnapshot, filter_sets),
    st.builds(Adopted, worker_ids, st.integers(0, 2**32 - 1)),
    st.builds(Orphans, message_batches, worker_ids, st.integers(0, 2**32 - 1)),
    st.builds(Unconfirmed, message_batches, st.integers(0, 2**48 - 1), batch_numbers),
    st.builds(
        Numbered,
        batch_numbers,
        batch_numbers,
        st.integers(0, 2**63 - 1),
        st.booleans(),
        st.integers(0, 2**31),
    ),
)


def _same(decoded: list[Frame], sent: list[Frame]) -> None:
    assert decoded == sent
    # Message equality leaves out the 3.x wire bytes, which travel too.
    assert [_wires(frame) for frame in decoded] == [_wires(frame) for frame in sent]


def _wires(frame: Frame) -> list[bytes | None]:
    carried = getattr(frame, "messages", None) or getattr(frame, "deliveries", ())
    return [getattr(item, "message", item).wire for item in carried]


@SETTINGS
@given(st.lists(frames, max_size=6))
def test_decode_of_encode_is_identity(sent: list[Frame]) -> None:
    decoded = FrameDecoder().feed(b"".join(encode_frame(frame) for frame in sent))
    _same(decoded, sent)


@SETTINGS
@given(st.lists(frames, min_size=1, max_size=4), st.lists(st.integers(1, 64), max_size=30))
def test_any_chunking_gives_the_same_frames(sent: list[Frame], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(frame) for frame in sent)
    decoder = FrameDecoder()
    decoded: list[Frame] = []
    pos = 0
    for cut in cuts:
        decoded += decoder.feed(stream[pos : pos + cut])
        pos += cut
    decoded += decoder.feed(stream[pos:])
    _same(decoded, sent)


def test_a_large_payload_travels_raw_after_the_header() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, not JSON-escaped
    message = stored_message("a/b", payload, 1, False, "c", None, 1.0, {}, 7)
    data = encode_frame(Forward((message,)))
    assert len(data) < len(payload) + 200
    assert payload in data
    assert FrameDecoder().feed(data) == [Forward((message,))]


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_give_frames_or_frame_error(data: bytes) -> None:
    with contextlib.suppress(FrameError):
        FrameDecoder().feed(data)


@SETTINGS
@given(frames, st.integers(0, 2**16), st.integers(0, 255))
def test_a_garbled_frame_gives_frame_error_or_frames(frame: Frame, where: int, byte: int) -> None:
    encoded = bytearray(encode_frame(frame))
    encoded[where % len(encoded)] = byte
    with contextlib.suppress(FrameError):
        FrameDecoder().feed(bytes(encoded))


def test_an_oversized_length_is_a_broken_link_not_a_wait() -> None:
    decoder = FrameDecoder()
    try:
        decoder.feed(b"\xff\xff\xff\xff\x04")
    except FrameError as error:
        assert "broken link" in str(error)
    else:
        raise AssertionError("a 4 GiB frame length was accepted")


def test_a_flow_frame_with_an_unknown_reason_is_refused() -> None:
    body = b'[7,"sleepy"]'
    data = len(body).to_bytes(4, "little") + bytes([50]) + body  # FlowHold's kind
    try:
        FrameDecoder().feed(data)
    except FrameError as error:
        assert "sleepy" in str(error)
    else:
        raise AssertionError("a FlowHold for no known reason was accepted")


def test_an_unknown_kind_is_refused() -> None:
    try:
        FrameDecoder().feed(b"\x02\x00\x00\x00\xee[]")
    except FrameError as error:
        assert "unknown frame kind 238" in str(error)
    else:
        raise AssertionError("frame kind 238 was accepted")


def _control_frame(kind: int, values: object) -> bytes:
    body = orjson.dumps(values)
    return len(body).to_bytes(4, "little") + bytes([kind]) + body


@pytest.mark.parametrize(
    ("kind", "values", "field"),
    [
        (6, ["c", "1"], "claimant"),  # Claim: a worker id as a string
        (6, ["c", True], "claimant"),  # JSON true is not an int
        (6, [None, 1], "client_id"),
        (7, ["c", 1, "0"], "previous"),  # Granted: previous is an int or null
        (2, ["a/b", []], "added"),  # RoutesChanged: a string where a list of filters goes
        (2, [["a/b", 3], []], "added"),  # ...and a filter that is not a string
        (60, [1, "stats", []], "args"),  # OpsRequest: args is an object
    ],
)
def test_a_control_field_of_another_type_breaks_the_link(
    kind: int, values: list[Any], field: str
) -> None:
    with pytest.raises(FrameError, match=f"frame's {field} is"):
        FrameDecoder().feed(_control_frame(kind, values))


def test_a_control_frame_with_a_field_missing_breaks_the_link() -> None:
    with pytest.raises(FrameError, match="a Claim frame holds"):
        FrameDecoder().feed(_control_frame(6, ["c"]))


# A `Retained` frame (kind 5) carries nothing but the message part, so its bytes are written
# here by hand: two 4-byte counts, the string table, one record per message
# (`pool.frames.messages._MESSAGE_RECORD`: flags, timestamp, id, three string indexes, three
# sizes), then the payloads.
_RECORD = struct.Struct("<BdQIIIIII")


def _retained_frame(strings: object, *records: tuple[Any, ...], tail: bytes = b"") -> bytes:
    table = orjson.dumps(strings)
    body = b"".join(
        (struct.pack("<II", len(records), len(table)), table, *(_RECORD.pack(*r) for r in records))
    )
    body += tail
    return struct.pack("<IB", len(body), 5) + body


def test_the_hand_written_message_part_is_the_codec_s() -> None:
    data = _retained_frame([None, "a/b", "c"], (0b101, 2.5, 9, 1, 2, 0, 0, 1, 0), tail=b"p")
    expected = stored_message("a/b", b"p", 1, True, "c", None, 2.5, {}, 9)
    assert FrameDecoder().feed(data) == [Retained((expected,))]
    assert encode_frame(Retained((expected,))) == data


def test_a_batch_names_each_topic_and_client_once() -> None:
    batch = tuple(
        stored_message(
            "sensors/one/temperature", b"%d" % i, 0, False, "publisher-7", "u", 1.0, {}, i
        )
        for i in range(50)
    )
    data = encode_frame(Forward(batch, 3))
    assert data.count(b"sensors/one/temperature") == 1
    assert data.count(b"publisher-7") == 1
    assert FrameDecoder().feed(data) == [Forward(batch, 3)]


def test_interleaved_publishers_keep_their_own_strings() -> None:
    # The encoder compares each message's strings with the previous one's before it asks
    # the string table: runs and alternations must both name the right entries.
    names = [("a/1", "p1", None), ("a/1", "p1", None), ("b/2", "p2", "user-9"), ("a/1", "p1", None)]
    names += [("b/2", "p1", "user-9"), ("b/2", "p2", None), ("a/1", "p2", "user-9")]
    batch = tuple(
        stored_message(topic, b"%d" % i, 0, False, publisher, user, 1.0, {}, i + 1)
        for i, (topic, publisher, user) in enumerate(names)
    )
    data = encode_frame(Forward(batch, 1))
    assert [data.count(name.encode()) for name in ("a/1", "b/2", "p1", "p2", "user-9")] == [1] * 5
    decoded = FrameDecoder().feed(data)
    assert decoded == [Forward(batch, 1)]
    assert isinstance(decoded[0], Forward)
    assert [(m.topic, m.publisher, m.username) for m in decoded[0].messages] == names


@pytest.mark.parametrize(
    ("strings", "record", "why"),
    [
        ([None, "t"], (3, 1.0, 1, 1, 0, 0, 0, 0, 0), "flags 3"),  # QoS 3 [MQTT-3.3.1-4]
        ([None, "t"], (8, 1.0, 1, 1, 0, 0, 0, 0, 0), "flags 8"),  # an unknown flag
        ([None, "t"], (0, 1.0, 1, 0, 0, 0, 0, 0, 0), "topic 0"),  # the topic is None
        ([None, "t"], (0, math.nan, 1, 1, 0, 0, 0, 0, 0), "timestamp is nan"),
        ([None, "t"], (0, math.inf, 1, 1, 0, 0, 0, 0, 0), "timestamp is inf"),
        ([None, "t"], (0, 1.0, 1, 5, 0, 0, 0, 0, 0), "index out of range"),
        ([None, "t"], (0, 1.0, 1, 1, 0, 0, 0, 4, 0), "payload runs past the end"),
        ([None, "t"], (0, 1.0, 1, 1, 0, 0, 0, 4, 5), "payload runs past the end"),  # a PUBLISH
        (["t"], (0, 1.0, 1, 1, 0, 0, 0, 0, 0), "string table"),
        ([None, 7], (0, 1.0, 1, 1, 0, 0, 0, 0, 0), "string table"),
    ],
)
def test_a_record_out_of_its_ranges_breaks_the_link(
    strings: list[object], record: tuple[Any, ...], why: str
) -> None:
    with pytest.raises(FrameError, match=why):
        FrameDecoder().feed(_retained_frame(strings, record))


def test_records_that_run_past_the_frame_break_the_link() -> None:
    data = _retained_frame([None, "t"], (0, 1.0, 1, 1, 0, 0, 0, 0, 0))
    count_at = 5  # after the frame header: the message count
    data = data[:count_at] + struct.pack("<I", 2) + data[count_at + 4 :]
    with pytest.raises(FrameError, match="2 records run past its end"):
        FrameDecoder().feed(data)
