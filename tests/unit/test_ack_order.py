"""`channel.ack_order`: a connection's acknowledgements leave in the order of its PUBLISH
batches, whatever order their answers are known in [MQTT-4.6.0-2] [MQTT-4.6.0-3]."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channel.ack_order import AckOrder
from channel.actions import InboundQos2, Publish, Send
from channel.channel import Channel
from mqtt.encoder import encode_ack
from mqtt.packets import PacketType
from mqtt.packets import Publish as PublishPacket
from tests.unit.test_channel import acl, connected, of_type


def _answer(number: int) -> bytes:
    """Slot `number`'s bytes: empty for every third (a batch with nothing to send)."""
    return b"" if number % 3 == 2 else number.to_bytes(2, "big")


@given(st.data(), st.integers(min_value=1, max_value=30))
def test_any_order_of_completions_gives_the_acks_in_slot_order(
    data: st.DataObject, count: int
) -> None:
    order = AckOrder()
    slots = [order.reserve() for _ in range(count)]
    completions = data.draw(st.permutations(range(count)))
    written = b""
    filled: set[int] = set()
    prefix = 0  # the slots filled without a gap before them
    for number in completions:
        released = slots[number].fill(_answer(number))
        filled.add(number)
        before = prefix
        while prefix in filled:
            prefix += 1
        # Released: the slot completed a longer prefix, which has bytes to send.
        assert released == any(_answer(n) for n in range(before, prefix))
        # A writer may take whenever it runs: here sometimes now, sometimes later.
        if data.draw(st.booleans()):
            written += order.take()
        assert order.waiting == count - prefix
        assert order.held == len(filled) - prefix
        # Never more than the filled prefix, in order.
        assert written == b"".join(_answer(n) for n in range(prefix))[: len(written)]
    written += order.take()
    assert written == b"".join(_answer(n) for n in range(count))
    assert (order.waiting, order.held, order.ready) == (0, 0, False)


@given(st.data(), st.integers(min_value=2, max_value=20))
def test_a_slot_never_filled_holds_every_later_one(data: st.DataObject, count: int) -> None:
    # A 3.x client refused while the store fails, a commit that never comes: nothing after
    # it is acknowledged, whatever else completes.
    order = AckOrder()
    slots = [order.reserve() for _ in range(count)]
    stuck = data.draw(st.integers(min_value=0, max_value=count - 1))
    for number in data.draw(st.permutations(range(count))):
        if number != stuck:
            slots[number].fill(bytes((number,)))
    assert order.take() == bytes(range(stuck))
    assert order.waiting == count - stuck
    assert order.held == count - stuck - 1
    more = order.reserve()
    assert not more.fill(b"later")
    assert order.take() == b""


def test_a_slot_is_filled_once() -> None:
    order = AckOrder()
    first, second = order.reserve(), order.reserve()
    second.fill(b"2")
    with pytest.raises(ValueError):
        second.fill(b"2")
    first.fill(b"1")
    with pytest.raises(ValueError):
        first.fill(b"1")
    assert order.take() == b"12"


def _puback(packet_id: int, version: int = 4) -> bytes:
    return encode_ack(PacketType.PUBACK, packet_id, 0, version)


def _batch(channel: Channel, *packets: PublishPacket) -> list[object]:
    return channel.handle_in(list(packets), 10 * len(packets))


def test_the_channel_gives_each_batch_its_slot_in_publish_order() -> None:
    # QoS 1 batches, a refusal-only batch and a QoS 2 batch share one order: a later
    # batch's acknowledgements, though known first, wait for every earlier batch's.
    channel = connected(hooks=acl({"secret"}))
    (first,) = of_type(_batch(channel, PublishPacket("t", b"x", qos=1, packet_id=1)), Publish)
    (refused,) = of_type(_batch(channel, PublishPacket("secret", b"x", qos=1, packet_id=2)), Send)
    (qos2,) = of_type(_batch(channel, PublishPacket("t", b"x", qos=2, packet_id=3)), InboundQos2)
    (last,) = of_type(_batch(channel, PublishPacket("t", b"x", qos=1, packet_id=4)), Publish)
    order = channel.ack_order
    assert order is not None and order.waiting == 4
    assert refused.data == _puback(2)  # 3.1.1: a denied publish is acknowledged anyway
    assert (first.acks.slot.number, refused.slot.number) == (0, 1)
    assert (qos2.slot.number, last.acks.slot.number) == (2, 3)
    # The last batch needed no store, the refusal is known: both wait for the first
    # batch's commit and for the session's PUBREC.
    assert not last.acks.slot.fill(last.acks.routed())
    assert not refused.slot.fill(refused.data)
    assert order.take() == b""
    assert first.acks.slot.fill(first.acks.routed())  # the commit came
    assert order.take() == _puback(1) + _puback(2)
    assert qos2.slot.fill(encode_ack(PacketType.PUBREC, 3, 0, 4))
    assert order.take() == encode_ack(PacketType.PUBREC, 3, 0, 4) + _puback(4)


def test_qos0_publishes_take_no_slot() -> None:
    channel = connected()
    _batch(channel, PublishPacket("t", b"x"))
    assert channel.ack_order is None


@given(st.data(), st.integers(min_value=1, max_value=20))
def test_nothing_after_the_last_slot_is_ever_released(data: st.DataObject, count: int) -> None:
    # A 3.x client refused while the store fails is closed instead of answered: the answers
    # before its slot still leave, in order; none after it, whenever they complete.
    order = AckOrder()
    slots = [order.reserve() for _ in range(count)]
    last = data.draw(st.integers(min_value=0, max_value=count - 1))
    written = b""
    for number in data.draw(st.permutations(range(count))):
        slots[number].fill(bytes((number,)), last=number == last)
        written += order.take()
    assert written == bytes(range(last + 1))
    assert not order.reserve().fill(b"later")
    assert (order.take(), order.held) == (b"", 0)
