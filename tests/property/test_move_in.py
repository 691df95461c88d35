"""A session moving in from another worker (core/move_in.py): examples, then a move under
hypothesis.

The move model: one publisher's messages 0..n-1. The new owner loaded a prefix [0, a) from
the store; the previous owner forwards [f0, f1) (f0 <= a: those it forwards that were
loaded carry the same seq); the new owner's routes bring [d0, n) directly (d0 <= f1: no
message went nowhere; d0 may be anywhere below f1, even below a). Forwarded and direct
batches arrive interleaved in any way, each stream in order; the end comes after the last
forwarded batch, the settling after the last direct copy of a forwarded message. Whatever
the interleaving, the session ends up with every message exactly once, in order.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.message import Message
from core.move_in import MoveIn, insert_qos0, queued_qos0
from core.session_state import Delivery


def _delivery(number: int, seq: int = 0, qos: int = 1, published: float = 1000.0) -> Delivery:
    """A delivery of message `number`: its copies (loaded, forwarded, direct) have the same
    id and timestamp, as the message they carry has wherever it went."""
    message = Message(
        topic="t",
        payload=str(number).encode(),
        qos=qos,
        message_id=number + 1,
        timestamp=published + number,
    )
    return Delivery(message, qos, False, (), None, seq)


def _numbers(deliveries: list[Delivery]) -> list[int]:
    return [int(delivery.message.payload) for delivery in deliveries]


def test_direct_deliveries_wait_for_the_end_and_lose_their_duplicates() -> None:
    move = MoveIn([_delivery(0, seq=10)])
    assert move.direct([_delivery(2, seq=31), _delivery(3, seq=33)]) == ([], [])
    # 0 was loaded (same seq), 1 and 2 are new to the session.
    fresh = move.forwarded([_delivery(0, seq=10), _delivery(1, seq=12), _delivery(2, seq=14)])
    assert _numbers(fresh) == [1, 2]
    deliver, duplicates = move.end()
    assert (_numbers(deliver), _numbers(duplicates)) == ([3], [2])
    assert duplicates[0].seq == 31  # the new owner's stored copy, to delete
    # After the end, a late direct copy of a forwarded message is still known.
    assert [_numbers(part) for part in move.direct([_delivery(1), _delivery(4)])] == [[4], [1]]
    assert move.forwarded_count == 3


def test_a_delivery_from_another_node_is_known_by_its_message_id() -> None:
    # Across nodes the stores number apart: the forwarded copy of a loaded delivery comes
    # without a seq and is recognised by its message id; a new one is delivered.
    move = MoveIn([_delivery(0, seq=10), _delivery(1, seq=11)])
    fresh = move.forwarded([_delivery(0), _delivery(1), _delivery(2)])
    assert _numbers(fresh) == [2]
    assert move.end() == ([], [])


def test_two_messages_with_one_id_published_apart_are_two_messages() -> None:
    # Two nodes whose names hash alike count message ids in one space: a message of the
    # other node with the id of one the session has is still delivered, held or not.
    move = MoveIn([_delivery(0, seq=10)])
    other_node = _delivery(0, published=2000.0)  # the same id, published at another time
    assert move.forwarded([other_node, _delivery(1)]) == [other_node, _delivery(1)]
    late = _delivery(1, published=2000.0)
    assert move.direct([late, _delivery(1)]) == ([], [])
    deliver, duplicates = move.end()
    assert deliver == [late] and duplicates == [_delivery(1)]
    fresh, duplicates = move.orphaned([_delivery(0, published=3000.0), _delivery(0)])
    assert (len(fresh), len(duplicates)) == (1, 1)


def test_a_message_without_an_id_is_never_taken_for_a_duplicate() -> None:
    move = MoveIn([])
    anonymous = Delivery(Message(topic="t", payload=b"x", message_id=0), 0, False)
    assert move.forwarded([anonymous]) == [anonymous]
    move.end()
    assert move.direct([anonymous]) == ([anonymous], [])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_message_once_and_in_order_whatever_the_interleaving(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 30), label="n")
    a = data.draw(st.integers(0, n), label="loaded")
    f0 = data.draw(st.integers(0, a), label="f0")
    f1 = data.draw(st.integers(a, n), label="f1")
    d0 = data.draw(st.integers(0, f1), label="d0")
    loaded = [_delivery(i, seq=2 * i + 2) for i in range(a)]
    forwarded = [_delivery(i, seq=2 * i + 2) for i in range(f0, f1)]  # the old owner's seqs
    direct = [_delivery(i, seq=1000 + 2 * i + 1) for i in range(d0, n)]  # the new owner's
    move: MoveIn | None = MoveIn(loaded)
    got = _numbers(loaded)
    deleted: list[int] = []
    # The events in some order: each stream in batches and in order, the end after the
    # last forwarded batch, the settling after the end and the last copy of [0, f1).
    cut = lambda items: data.draw(st.lists(st.integers(1, 4), min_size=len(items)))  # noqa: E731
    batches = {
        "forwarded": _batches(forwarded, cut(forwarded)),
        "direct": _batches(direct, cut(direct)),
    }
    ended = False
    while move is not None:
        choices = [name for name, left in batches.items() if left]
        if not batches["forwarded"] and not ended:
            choices.append("end")
        if ended and not any(int(d.message.payload) < f1 for b in batches["direct"] for d in b):
            choices.append("settle")
        step = data.draw(st.sampled_from(choices))
        if step == "forwarded":
            got += _numbers(move.forwarded(batches["forwarded"].pop(0)))
        elif step == "direct":
            deliver, duplicates = move.direct(batches["direct"].pop(0))
            got += _numbers(deliver)
            deleted += [d.seq for d in duplicates]
        elif step == "end":
            ended = True
            deliver, duplicates = move.end()
            got += _numbers(deliver)
            deleted += [d.seq for d in duplicates]
        else:
            move = None
    for batch in batches["direct"]:  # settled: straight to the session
        got += _numbers(batch)
    assert got == list(range(n))
    # Every duplicate dropped was the new owner's own stored copy.
    assert all(seq > 1000 for seq in deleted)
    assert len(deleted) == len(direct) - (n - max(f1, a))


def _batches(items: list[Delivery], sizes: list[int]) -> list[list[Delivery]]:
    batches: list[list[Delivery]] = []
    position = 0
    for size in sizes:
        if position >= len(items):
            break
        batches.append(items[position : position + size])
        position += size
    return batches


def test_queued_qos0_goes_back_where_it_was() -> None:
    q0a, q0b, q0c = (_delivery(n, qos=0) for n in (100, 101, 102))
    queue = [q0a, _delivery(1, seq=5), q0b, _delivery(2, seq=7), q0c, _delivery(3, seq=9)]
    qos0, after = queued_qos0(queue)
    assert (_numbers(qos0), after) == ([100, 101, 102], [0, 5, 7])
    # On the new owner the store gives back the stored ones; seq 5 went in flight meanwhile.
    restored = [_delivery(2, seq=7), _delivery(3, seq=9)]
    merged = insert_qos0(restored, qos0, after)
    assert merged is not None
    assert _numbers(list(merged)) == [100, 101, 2, 102, 3]
    assert insert_qos0(None, [], []) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=20))
def test_carrying_the_qos0_deliveries_restores_the_queue(kinds: list[bool]) -> None:
    """True: a stored QoS 1 delivery; False: a QoS 0 one, which the store does not hold."""
    queue = [
        _delivery(n, seq=n + 1) if stored else _delivery(n, qos=0) for n, stored in enumerate(kinds)
    ]
    qos0, after = queued_qos0(queue)
    from_store = [delivery for delivery in queue if delivery.seq]
    assert list(insert_qos0(from_store, qos0, after) or []) == queue
