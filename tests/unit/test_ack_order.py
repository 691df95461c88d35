"""`channel.ack_order`: a connection's acknowledgements leave in the order of its PUBLISH
batches, whatever order their answers are known in [MQTT-4.6.0-2] [MQTT-4.6.0-3]."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channel.ack_order import AckOrder


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
