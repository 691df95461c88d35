"""Forwarded 3.x QoS 0 messages held as their PUBLISH packets (`core.wire_messages`) and
fanned out a run of one topic at a time (`Dispatcher._fan_out_wires`), in-process under
hypothesis: a frame of them, through the frame codec, decodes to the packets if one client
published them (a publish batch; several publishers' go as messages); over random
subscriptions (No Local, Retain As Published, identifiers, overlapping filters) and random
frames (topics mixed, publishers one or mixed, a subscriber among them), every session gets
exactly what the per-message path gives it, in the frame's order, in one message; and the
messages are built only when something asks for them. The frame layout itself:
tests/property/test_packet_frames.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.messages import DeliverWires
from core.message import Message, new_message
from core.session_state import Delivery, SubscriptionOptions
from core.wire_messages import WireMessages
from mqtt.encoder import encode_publish
from pool.frames.codec import FrameDecoder, encode_frame
from pool.frames.forwarding import Forward
from tests.unit.test_dispatch import Broker, Recorder

CLIENTS = ("c0", "c1", "c2", "c3")
PUBLISHERS = ("c0", "p1", "p2", None)  # c0 also subscribes: No Local applies to it
TOPICS = ("a/b", "a/c", "x/y")
FILTERS = ("a/b", "a/+", "a/#", "#", "x/y")

subscriptions = st.lists(
    st.tuples(
        st.sampled_from(CLIENTS),
        st.sampled_from(FILTERS),
        st.integers(0, 2),
        st.booleans(),  # no_local
        st.booleans(),  # retain_as_published
        st.sampled_from((0, 1, 2)),  # subscription identifier (0: none)
    ),
    max_size=12,
)
frames = st.lists(st.tuples(st.sampled_from(TOPICS), st.sampled_from(PUBLISHERS)), max_size=40)
one_publisher = st.sampled_from(PUBLISHERS).flatmap(
    lambda publisher: st.lists(st.sampled_from(TOPICS), max_size=40).map(
        lambda topics: [(topic, publisher) for topic in topics]
    )
)


def plain(topic: str, publisher: str | None) -> Message:
    """A message as a 3.x client's QoS 0 PUBLISH makes it: with the PUBLISH it came in."""
    payload = f"{topic} from {publisher}".encode()
    wire = encode_publish(topic, payload, 0, False, False, None, None, 4)
    return new_message(topic, payload, 0, False, publisher, None, {}, wire)


def broker_with(subscribed: list[tuple[str, str, int, bool, bool, int]]) -> Broker:
    broker = Broker()
    for client_id, topic_filter, qos, no_local, as_published, identifier in subscribed:
        options = SubscriptionOptions(qos, no_local, as_published, 0, identifier or None)
        broker.subscribe(client_id, topic_filter, options)
    return broker


def through_codec(messages: tuple[Message, ...]) -> Sequence[Message]:
    """`messages` as another worker's `Forward` frame brings them."""
    [frame] = FrameDecoder().feed(encode_frame(Forward(messages, 0, 0)))
    assert isinstance(frame, Forward)
    return frame.messages


def received(session: Recorder) -> list[tuple[object, ...]]:
    """What a session was told, one row per delivery, the message named by its id."""
    rows: list[tuple[object, ...]] = []
    for told in session.told:
        deliveries = told.deliveries() if type(told) is DeliverWires else told.deliveries
        if type(told) is DeliverWires:  # the packets are the deliveries' own encodings
            assert told.wires == [delivery.wire for delivery in deliveries]
        rows += [(d.message.message_id, *d[1:]) for d in deliveries]
    return rows


@settings(max_examples=300, deadline=None)
@given(subscriptions, one_publisher | frames)
def test_a_frame_of_packets_reaches_each_session_as_the_per_message_path_sends_it(
    subscribed: list[tuple[str, str, int, bool, bool, int]],
    published: list[tuple[str, str | None]],
) -> None:
    messages = tuple(plain(topic, publisher) for topic, publisher in published)
    decoded = through_codec(messages)
    one_client = len({publisher for _topic, publisher in published}) == 1
    assert (type(decoded) is WireMessages) == one_client
    runs = broker_with(subscribed)
    runs.dispatcher.publish_forwarded(decoded)
    # The same messages without their encoding take the per-message path (`_fan_out`),
    # which encodes the same 3.x PUBLISH for them.
    reference = broker_with(subscribed)
    reference.dispatcher.publish_forwarded(tuple(dataclasses.replace(m) for m in messages))
    assert runs.sessions.keys() == reference.sessions.keys()
    for client_id, session in runs.sessions.items():
        assert len(session.told) <= 1  # one message per session for the frame
        assert received(session) == received(reference.sessions[client_id]), client_id


def test_a_fan_out_of_forwarded_packets_builds_no_message_and_keeps_the_frame_order() -> None:
    broker = Broker()
    sessions = [
        broker.subscribe(f"s{index}", topic_filter, SubscriptionOptions(1, subscription_id=7))
        for index in range(50)
        for topic_filter in ("a/b", "x/y")
    ]
    frame = tuple(plain(topic, "p") for topic in ("a/b", "a/b", "x/y", "a/b", "x/y"))
    decoded = through_codec(frame)
    assert isinstance(decoded, WireMessages)
    assert decoded.runs == [("a/b", 0, 2), ("x/y", 2, 3), ("a/b", 3, 4), ("x/y", 4, 5)]
    broker.dispatcher.publish_forwarded(decoded)
    told = [session.told for session in dict.fromkeys(sessions)]
    assert all(len(got) == 1 and type(got[0]) is DeliverWires for got in told)
    assert all(got[0].wires == [m.wire for m in frame] for got in told)  # the frame's order
    assert decoded._messages is None  # nothing built them
    deliveries = told[0][0].deliveries()
    assert [d.message for d in deliveries] == list(frame)
    assert all(d.qos == 0 and not d.retain and d.subscription_ids == (7,) for d in deliveries)


def test_a_subscriber_that_published_in_the_frame_gets_only_what_no_local_allows() -> None:
    broker = Broker()
    own = broker.subscribe("c0", "a/#", SubscriptionOptions(0, no_local=True))
    other = broker.subscribe("c1", "a/#", SubscriptionOptions(0))
    frame = (plain("a/b", "c0"), plain("a/b", "p1"), plain("a/b", "c0"))
    broker.dispatcher.publish_forwarded(through_codec(frame))
    assert [d.message for d in own.deliveries()] == [frame[1]]  # [MQTT-3.8.3-3]
    assert [d.message for d in other.deliveries()] == list(frame)
    assert all(type(d) is Delivery for d in other.deliveries())
