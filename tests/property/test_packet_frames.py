"""The packet layout of a `Forward` (`pool.frames.packets`), in-process: a batch of 3.x QoS 0
messages from one publisher travels as its PUBLISH packets and decodes to the same messages
(hypothesis: any topics, payloads past one byte of Remaining Length, runs of topics); the
layout is pinned by a hand-written frame; the payload is read from each packet, also one
whose Remaining Length is not in its shortest form; and a frame out of the layout's ranges
breaks the link with a reason.
"""

from __future__ import annotations

import math
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.message import Message, stored_message
from core.wire_messages import WireMessages
from mqtt.decoder import PacketDecoder
from mqtt.encoder import encode_publish
from mqtt.packets import Publish
from pool.frames.codec import FrameDecoder, encode_frame
from pool.frames.forwarding import Forward
from pool.frames.validation import FrameError
from tests.property.test_codec_properties import texts, topic_names

_FORWARD = 4  # the frame kind
_PACKETS = 1  # a Forward's packet layout


def plain(topic: str, payload: bytes, publisher: str | None, username: str | None) -> Message:
    wire = encode_publish(topic, payload, 0, False, False, None, None, 4)
    return stored_message(topic, payload, 0, False, publisher, username, 1.5, {}, 7, wire)


def decoded(frame: Forward) -> Forward:
    [got] = FrameDecoder().feed(encode_frame(frame))
    assert isinstance(got, Forward)
    return got


def packet_frame(
    names: object,
    timestamps: list[float],
    ids: list[int],
    packets: list[bytes],
    *,
    sizes: list[int] | None = None,
    count: int | None = None,
) -> bytes:
    """A Forward in the packet layout, written by hand (publisher id 3, batch 0)."""
    names_json = orjson.dumps(names)
    count = len(packets) if count is None else count
    sizes = [len(packet) for packet in packets] if sizes is None else sizes
    body = b"".join(
        (
            struct.pack("<IQB", 3, 0, _PACKETS),
            struct.pack("<II", count, len(names_json)),
            names_json,
            struct.pack(f"<{len(timestamps)}d", *timestamps),
            struct.pack(f"<{len(ids)}Q", *ids),
            struct.pack(f"<{len(sizes)}I", *sizes),
            *packets,
        )
    )
    return struct.pack("<IB", len(body), _FORWARD) + body


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(topic_names, st.binary(max_size=20_000)), min_size=1, max_size=8),
    st.none() | texts,
    st.none() | texts,
    st.lists(st.floats(0, 4e9, allow_nan=False), min_size=8, max_size=8),
    st.lists(st.integers(1, 2**63 - 1), min_size=8, max_size=8, unique=True),
)
def test_a_batch_of_one_publisher_s_packets_decodes_to_the_same_messages(
    published: list[tuple[str, bytes]],
    publisher: str | None,
    username: str | None,
    timestamps: list[float],
    ids: list[int],
) -> None:
    sent = tuple(
        stored_message(
            topic,
            payload,
            0,
            False,
            publisher,
            username,
            timestamps[index],
            {},
            ids[index],
            encode_publish(topic, payload, 0, False, False, None, None, 4),
        )
        for index, (topic, payload) in enumerate(published)
    )
    got = decoded(Forward(sent, 9, 2**40))
    assert type(got.messages) is WireMessages
    assert got.messages.wires == [message.wire for message in sent]
    assert got.messages.publishers == {publisher}
    assert [message.wire for message in got.messages] == [message.wire for message in sent]
    assert got == Forward(sent, 9, 2**40)  # each message's fields, payload included


def test_the_hand_written_packet_layout_is_the_codec_s() -> None:
    batch = (plain("a/b", b"1", "p", "u"), plain("a/b", b"22", "p", "u"), plain("c", b"", "p", "u"))
    data = packet_frame(
        ["p", "u", [["a/b", 2], ["c", 1]]],
        [1.5] * 3,
        [7] * 3,
        [message.wire or b"" for message in batch],
    )
    assert encode_frame(Forward(batch, 3)) == data
    assert FrameDecoder().feed(data) == [Forward(batch, 3)]


def test_a_packet_s_remaining_length_in_a_longer_form_still_gives_its_payload() -> None:
    # 0x86 0x00 is 6 in two bytes: not the shortest form, which the MQTT decoder accepts.
    packet = b"\x30\x86\x00\x00\x01tpay"
    [publish] = PacketDecoder(protocol_version=4).feed(packet)
    assert isinstance(publish, Publish) and publish.payload == b"pay"
    data = packet_frame(_ONE_RUN, [1.0], [5], [packet])
    [frame] = FrameDecoder().feed(data)
    assert isinstance(frame, Forward)
    [message] = frame.messages
    assert (message.topic, message.payload, message.wire) == ("t", b"pay", packet)


def test_a_batch_of_several_publishers_or_other_messages_keeps_the_record_layout() -> None:
    mixed = (plain("a/b", b"1", "p", None), plain("a/b", b"2", "q", None))
    qos1 = stored_message("a/b", b"3", 1, False, "p", None, 1.5, {}, 8)
    for batch in (mixed, (plain("a/b", b"1", "p", None), qos1)):
        got = decoded(Forward(batch))
        assert type(got.messages) is tuple
        assert got == Forward(batch)


_PACKET = b"\x30\x06\x00\x01tpay"  # "pay" to the topic "t"
_ONE_RUN = [None, None, [["t", 1]]]  # no publisher or username, one message to "t"


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (packet_frame([None, None, [["t", 2]]], [1.0], [1], [_PACKET]), "do not add up"),
        (packet_frame([None, None, [["t", 0]]], [], [], [], count=0), "no message"),
        (packet_frame([None, None, [["", 1]]], [1.0], [1], [_PACKET]), "run is"),
        (packet_frame([None, None, [["t", 1, 2]]], [1.0], [1], [_PACKET]), "run is"),
        (packet_frame([None, 5, [["t", 1]]], [1.0], [1], [_PACKET]), "publisher and username"),
        (packet_frame([None, None], [1.0], [1], [_PACKET]), "names are"),
        (packet_frame(_ONE_RUN, [math.nan], [1], [_PACKET]), "not finite"),
        (packet_frame(_ONE_RUN, [math.inf], [1], [_PACKET]), "not finite"),
        (packet_frame(_ONE_RUN, [1.0], [1], [b"\x30\x02\x00\x00"]), "4 bytes"),
        (packet_frame(_ONE_RUN, [1.0], [1], [_PACKET], sizes=[9]), "packets end"),
        (packet_frame(_ONE_RUN, [1.0], [1], [_PACKET + b"x"], sizes=[8]), "packets end"),
        (packet_frame(_ONE_RUN, [1.0], [1], [b"\x32" + _PACKET[1:]]), "plain"),
        (packet_frame(_ONE_RUN, [], [], [], count=1), "columns run past"),
    ],
)
def test_a_packet_frame_out_of_its_ranges_breaks_the_link(frame: bytes, why: str) -> None:
    with pytest.raises(FrameError, match=why):
        FrameDecoder().feed(frame)


def test_a_forward_of_an_unknown_layout_breaks_the_link() -> None:
    data = bytearray(encode_frame(Forward((plain("t", b"p", None, None),))))
    data[5 + 12] = 2  # after the frame header, the publisher id and the batch: the layout
    with pytest.raises(FrameError, match="unknown layout 2"):
        FrameDecoder().feed(bytes(data))
