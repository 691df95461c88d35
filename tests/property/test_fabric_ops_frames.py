"""The operations surface's fabric frames (pool/frames/operations.py, kinds 60-79) under hypothesis:
decode(encode(frame)) == frame for any JSON rows, and a field of another type is refused."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.frames.operations import BanLifted, BanSet, BansSnapshot, OpsReply, OpsRequest
from pool.frames.validation import FrameError

SETTINGS = settings(max_examples=100, deadline=None)

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts
json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)
objects = st.dictionaries(texts, json_values, max_size=5)
rows = st.lists(objects, max_size=5).map(tuple)

frames: st.SearchStrategy[Frame] = st.one_of(
    st.builds(OpsRequest, st.integers(0, 2**40), texts, st.dictionaries(texts, texts)),
    st.builds(OpsReply, st.integers(0, 2**40), rows),
    st.builds(BanSet, objects),
    st.builds(BanLifted, texts, texts),
    st.builds(BansSnapshot, rows),
)


@SETTINGS
@given(st.lists(frames, max_size=6))
def test_decode_of_encode_is_identity(sent: list[Frame]) -> None:
    decoded = FrameDecoder().feed(b"".join(encode_frame(frame) for frame in sent))
    assert decoded == sent


def raw_frame(kind: int, body: object) -> bytes:
    data = orjson.dumps(body)
    return struct.pack("<IB", len(data), kind) + data


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (60, [1, "clients", ["not", "a", "dict"]]),  # OpsRequest args
        (60, ["1", "clients", {}]),  # token
        (61, [1, [{"a": 1}, "not a row"]]),  # OpsReply rows
        (61, [1, {}]),  # rows as an object, not a list
        (62, [["kind", "clientid"]]),  # BanSet ban
        (63, ["clientid", 7]),  # BanLifted value
        (64, [[1, 2]]),  # BansSnapshot bans
        (61, [1]),  # a field short
    ],
)
def test_a_field_of_another_type_is_refused(kind: int, body: object) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(raw_frame(kind, body))


def test_the_kinds_are_in_the_operations_range() -> None:
    for frame in (
        OpsRequest(1, "x", {}),
        OpsReply(1, ()),
        BanSet({}),
        BanLifted("a", "b"),
        BansSnapshot(()),
    ):
        kind = encode_frame(frame)[4]
        assert 60 <= kind <= 79, frame
