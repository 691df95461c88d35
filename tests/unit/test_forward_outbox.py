"""The outbox of a publish batch (pool/outbox.py): one frame per worker, a message once."""

from __future__ import annotations

from core.message import Message
from core.share_origin import ShareMark, ShareOrigin
from pool.frames.forwarding import Forward, ForwardShared
from pool.outbox import ForwardOutbox


def message(topic: str) -> Message:
    return Message(topic=topic, payload=b"x", qos=1)


def test_ordinary_only_is_a_plain_forward_and_the_outbox_empties() -> None:
    outbox = ForwardOutbox()
    first, second = message("a"), message("b")
    outbox.add((1, 2), first)
    outbox.add((2,), second)
    assert outbox.frames() == [(1, Forward((first,))), (2, Forward((first, second)))]
    assert not outbox
    assert outbox.frames() == []


def test_a_share_pick_rides_on_the_ordinary_copy_or_travels_marked_alone() -> None:
    outbox = ForwardOutbox()
    both, shared_only, plain = message("a"), message("b"), message("c")
    g = ShareOrigin("g", "a")
    h = ShareOrigin("h", "#", frozenset({"gone"}))
    outbox.add((1,), both)
    outbox.add_share(1, both, g)
    outbox.add_share(1, both, h)
    outbox.add_share(1, shared_only, g)
    outbox.add((1,), plain)
    ((worker, frame),) = outbox.frames()
    assert worker == 1
    assert frame == ForwardShared(
        (both, shared_only, plain),
        (ShareMark(True, (g, h)), ShareMark(False, (g,)), ShareMark(True, ())),
    )
