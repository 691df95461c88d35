"""`pool.orphans`: what a publisher's worker keeps for a dead worker's persistent sessions,
and when the acknowledgements that wait on them go (docs/pool.md "A worker dies")."""

from __future__ import annotations

from core.message import Message
from core.share_origin import ShareOrigin
from pool.orphans import DurableSends, Lost, OrphanedMessages


def _message(topic: str, number: int) -> Message:
    return Message(topic=topic, payload=str(number).encode(), qos=1)


def test_sends_are_forgotten_once_confirmed_and_the_rest_are_lost_in_order() -> None:
    sends = DurableSends()
    first, second, third = (_message("t", n) for n in range(3))
    group = ShareOrigin("g", "t")
    sends.sent(1, 10, [first], [(first, group)])
    sends.sent(1, 11, [second], [])
    sends.sent(1, 12, [third], [])
    sends.sent(1, 13, [], [(third, group)])  # a share group's pick alone
    sends.sent(2, 11, [second], [])
    sends.confirmed(1, 11)  # confirms 10 and 11 (links are FIFO)
    assert sends.lost(1) == Lost([12, 13], [third], [(third, group)])
    assert sends.lost(1) == Lost([], [], [])
    assert sends.lost(2) == Lost([11], [second], [])


def test_a_dead_workers_messages_are_kept_until_every_worker_committed_its_part() -> None:
    orphans = OrphanedMessages()
    lost = [_message("plant/1/temp", 0)]
    orphans.died(1, ["plant/+/temp"], lost=lost, tokens=[7], workers=range(3), now=0.0)
    later = _message("plant/2/temp", 1)
    assert orphans.keep(later) == [1]
    assert orphans.keep(_message("plant/2/load", 2)) == []  # no persistent session wants it
    orphans.wait(1, 8)
    assert orphans.adopted(1, 0) == (lost[0], later)
    assert orphans.adopted(5, 0) is None  # nothing kept for worker 5
    assert orphans.committed(1, 0, 5.0) is None  # workers 1 and 2 have not adopted yet
    assert orphans.adopted(1, 2) == (lost[0], later)
    assert orphans.adopted(1, 1) == (lost[0], later)  # the dead worker's next life
    assert orphans.committed(1, 2, 5.0) is None
    assert orphans.committed(1, 1, 5.0) == [7, 8]
    assert orphans.active == {}
    assert orphans.keep(_message("plant/3/temp", 3)) == []  # adopted: routed as usual now


def test_a_late_adopter_gets_the_messages_within_the_grace() -> None:
    """A CONNECT that waited for the dead worker's hand-over adopts the session after every
    worker's own round: it is given the same messages, until the grace is over."""
    orphans = OrphanedMessages()
    kept = [_message("a", 0)]
    orphans.died(1, ["a"], lost=kept, tokens=[], workers=range(2), now=0.0)
    orphans.adopted(1, 0)
    orphans.adopted(1, 1)
    orphans.committed(1, 0, 1.0)
    assert orphans.committed(1, 1, 2.0) == []
    assert orphans.adopted(1, 0) == tuple(kept)  # a second round of worker 0
    assert orphans.committed(1, 0, 3.0) is None  # nothing waits on it any more
    assert orphans.expired(now=11.0, timeout=30.0, grace=10.0) == []
    assert orphans.adopted(1, 0) == tuple(kept)
    assert orphans.expired(now=12.0, timeout=30.0, grace=10.0) == []
    assert orphans.adopted(1, 0) is None  # forgotten


def test_a_worker_that_goes_down_is_no_longer_waited_for() -> None:
    orphans = OrphanedMessages()
    orphans.died(1, ["a/#"], lost=[], tokens=[3], workers=range(3), now=0.0)
    assert orphans.adopted(1, 0) == ()
    assert orphans.committed(1, 0, 5.0) is None
    assert orphans.adopted(1, 1) == ()
    assert orphans.committed(1, 1, 5.0) is None
    assert orphans.gone(2, 5.0) == [(1, [3])]
    assert orphans.active == {}


def test_a_worker_dying_again_before_its_adoption_waits_for_everyone_again() -> None:
    orphans = OrphanedMessages()
    orphans.died(1, ["a"], lost=[], tokens=[1], workers=range(2), now=0.0)
    assert orphans.adopted(1, 0) == ()
    orphans.died(1, ["b"], lost=[], tokens=[2], workers=range(2), now=1.0)
    assert orphans.keep(_message("b", 0)) == [1]
    assert orphans.adopted(1, 0) is not None  # worker 0 is asked again
    assert orphans.committed(1, 0, 5.0) is None
    assert orphans.adopted(1, 1) is not None
    assert orphans.committed(1, 1, 5.0) == [1, 2]


def test_sessions_not_adopted_in_time_are_given_up() -> None:
    orphans = OrphanedMessages()
    orphans.died(1, ["a"], lost=[_message("a", 0)], tokens=[4], workers=range(2), now=10.0)
    assert orphans.expired(now=39.0, timeout=30.0, grace=10.0) == []
    [(dead, given_up)] = orphans.expired(now=40.0, timeout=30.0, grace=10.0)
    assert (dead, given_up.acks, len(given_up.messages)) == (1, [4], 1)
    assert orphans.active == {}
