"""The pure parts of at-least-once forwarding across nodes (cluster.commits): numbered
batches kept until confirmed and sent again, and the receiver taking each number once and
in order (the acknowledgements' waits: tests/unit/test_ack_waits.py)."""

from __future__ import annotations

from cluster.commits import ReceivedBatches, SentBatches, Verdict
from core.message import Message
from core.share_origin import ShareMark, ShareOrigin
from pool.frames.codec import FrameDecoder, encode_frame
from pool.frames.forwarding import Forward, ForwardShared, Numbered


def frame(*topics: str) -> Forward:
    """A batch's frame: a QoS 1 message on each of `topics`."""
    return Forward(tuple(Message(topic=topic, payload=b"x", qos=1) for topic in topics))


def test_batches_are_numbered_per_peer_and_confirmed_up_to_a_token() -> None:
    sent = SentBatches()
    assert sent.peer_up(7, epoch=100) == []
    assert sent.peer_up(8, epoch=200) == []
    first = sent.add(7, 1, frame("a"), now=0.0, awaited=True)
    sent.add(8, 1, frame("a"), now=0.0, awaited=True)
    second = sent.add(7, 2, frame("b"), now=0.0, awaited=True)
    third = sent.add(7, 5, frame("c"), now=0.0, awaited=True)
    assert [first.seq, second.seq, third.seq] == [1, 2, 3]
    assert (sent.first(7), sent.first(8), sent.epoch_of(7)) == (1, 1, 100)
    assert sent.confirmed(7, 2) == [1, 2]  # the receiver takes numbers in order
    assert sent.first(7) == 3
    assert sent.confirmed(7, 4) == []
    assert sent.confirmed(7, 5) == [5]
    assert sent.first(7) == 4  # none left: the next number
    assert sent.confirmed(9, 1) == []  # never linked


def test_unconfirmed_batches_are_due_after_a_while_or_at_once_and_in_order() -> None:
    sent = SentBatches()
    sent.peer_up(7, epoch=1)
    sent.peer_up(8, epoch=1)
    sent.add(7, 1, frame("a"), now=10.0, awaited=True)
    sent.add(7, 2, frame("b"), now=10.5, awaited=True)
    sent.add(8, 2, frame("b"), now=10.5, awaited=True)
    assert sent.due(11.0, after=1.0, peers={7, 8}) == {}
    due = sent.due(11.2, after=1.0, peers={7, 8})  # 7's oldest is 1.2 s old
    assert list(due) == [7]
    assert [batch.seq for batch in due[7]] == [1, 2]
    assert sent.due(11.3, after=1.0, peers={7, 8}) == {}  # just sent again
    assert sorted(sent.due(11.3, after=-1.0, peers={7, 8})) == [7, 8]  # NATS came back
    assert list(sent.due(20.0, after=1.0, peers={8})) == [8]
    assert list(sent.due(20.0, after=-1.0, peers=set())) == []  # only the linked peers


def test_a_peer_back_in_the_same_life_gets_its_batches_again_a_restarted_one_does_not() -> None:
    sent = SentBatches()
    sent.peer_up(7, epoch=1)
    sent.add(7, 1, frame("a", "b"), now=0.0, awaited=True)
    sent.add(7, 2, frame("c"), now=0.0, awaited=True)
    assert sent.forget(7, epoch=1) == ()
    assert [batch.token for batch in sent.peer_up(7, epoch=1)] == [1, 2]
    assert [m.topic for m in sent.forget(7, epoch=2)] == ["a", "b", "c"]
    assert sent.peer_up(7, epoch=2) == []
    assert sent.add(7, 3, frame("d"), now=0.0, awaited=True).seq == 1  # a new life: from 1 again


def test_a_gone_peers_share_picks_are_taken_out_and_its_batches_keep_their_numbers() -> None:
    sent = SentBatches()
    sent.peer_up(7, epoch=1)
    a, b, c, d = (Message(topic=topic, payload=b"x", qos=1) for topic in "abcd")
    jobs, alerts = ShareOrigin("jobs", "#", frozenset({"m1"})), ShareOrigin("alerts", "#")
    plain = frame("plain")
    sent.add(7, 1, plain, now=0.0, awaited=False)
    marks = (ShareMark(False, (jobs,)), ShareMark(True, ()), ShareMark(True, (jobs, alerts)))
    sent.add(7, 2, ForwardShared((a, b, c), marks, publisher=3), now=0.0, awaited=False)
    sent.add(7, 3, ForwardShared((d,), (ShareMark(False, (alerts,)),)), now=0.0, awaited=False)
    assert sent.take_picks(7) == [(a, jobs), (c, jobs), (c, alerts), (d, alerts)]
    batches = sent.peer_up(7, epoch=1)  # back in the same life: what it gets again
    assert [batch.seq for batch in batches] == [1, 2, 3]  # no number left out
    assert [batch.frame for batch in batches] == [
        plain,
        Forward((b, c), publisher=3),  # for its ordinary subscribers only
        Forward(()),
    ]
    assert sent.take_picks(7) == []  # taken once
    assert sent.take_picks(8) == []  # never linked


def take(received: ReceivedBatches, sender: int, epoch: int, seq: int, first: int) -> Verdict:
    """A batch that arrives whole: taken at its end when it is to be taken."""
    verdict = received.batch(sender, epoch, seq, first)
    if verdict is Verdict.TAKE:
        received.taken(sender)
    return verdict


def test_the_receiver_takes_each_number_once_and_in_order() -> None:
    received = ReceivedBatches()
    assert take(received, 7, epoch=1, seq=1, first=1) is Verdict.TAKE
    assert take(received, 7, epoch=1, seq=2, first=1) is Verdict.TAKE
    assert take(received, 7, epoch=1, seq=4, first=1) is Verdict.DROP  # 3 was lost
    assert take(received, 7, epoch=1, seq=5, first=1) is Verdict.DROP
    # The sender sends again from its oldest unconfirmed batch: 1 and 2 are known.
    assert take(received, 7, epoch=1, seq=1, first=1) is Verdict.HAVE
    assert take(received, 7, epoch=1, seq=2, first=1) is Verdict.HAVE
    assert take(received, 7, epoch=1, seq=3, first=1) is Verdict.TAKE
    assert take(received, 7, epoch=1, seq=4, first=1) is Verdict.TAKE
    assert take(received, 8, epoch=1, seq=1, first=1) is Verdict.TAKE  # per sender


def test_a_batch_whose_end_was_lost_is_not_taken_until_it_comes_again() -> None:
    received = ReceivedBatches()
    assert take(received, 7, epoch=1, seq=1, first=1) is Verdict.TAKE
    assert received.batch(7, epoch=1, seq=2, first=1) is Verdict.TAKE  # its end: lost
    assert take(received, 7, epoch=1, seq=3, first=1) is Verdict.DROP
    assert take(received, 7, epoch=1, seq=2, first=2) is Verdict.TAKE  # sent again
    assert take(received, 7, epoch=1, seq=3, first=2) is Verdict.TAKE


def test_the_receiver_starts_at_the_senders_first_and_anew_with_its_next_life() -> None:
    received = ReceivedBatches()
    # The first batch heard (this worker started while the sender kept 40..): from 40.
    assert take(received, 7, epoch=1, seq=41, first=40) is Verdict.DROP
    assert take(received, 7, epoch=1, seq=40, first=40) is Verdict.TAKE
    assert take(received, 7, epoch=1, seq=41, first=40) is Verdict.TAKE
    # The sender forgot 42..49 (that life of the receiver's was taken for gone).
    assert take(received, 7, epoch=1, seq=50, first=50) is Verdict.TAKE
    assert take(received, 7, epoch=2, seq=1, first=1) is Verdict.TAKE  # it restarted


def test_numbered_crosses_the_codec() -> None:
    for awaited in (True, False):
        frame = Numbered(seq=3, first=2, epoch=1 << 40, awaited=awaited, parts=2)
        assert FrameDecoder().feed(encode_frame(frame)) == [frame]
