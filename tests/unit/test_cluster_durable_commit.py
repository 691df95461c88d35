"""A node's `Committed` answers its store's commit (docs/cluster.md "Forwarding a QoS 1/2
message"), at once where a publisher's acknowledgement waits for it, else gathered with the
next ones for a moment. A `ClusterMember` is made before `Broker.start` opens the store and
replaces the context's persistence (none) with the store's, so its forwarding must answer
through the persistence the context has when the `CommitSync` comes, not the one it had
when it was made: that one has no store and answered at once, before the puts of the batch
were committed, so the publisher's PUBACK did not wait for them.

In-process: the member's real `NatsFabric`, not started, so what it publishes stays in its
link's outgoing queue, decoded here with the real codec; a real `StoreWriter` over a
`MemoryStore` whose commits are held until the test lets them through.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gevent
import gevent.event
import pytest

from actors.config import BrokerConfig
from actors.context import BrokerContext
from actors.persistence import Persistence
from cluster.config import ClusterConfig
from cluster.member import FORWARD_BYTES, ClusterMember
from cluster.numbered_forwarding import CONFIRM_DELAY
from core.message import Message
from core.share_origin import ShareMark
from core.stats import BrokerStats
from hooks.hook_bus import HookBus
from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.frames.forwarding import (
    CommitSync,
    Committed,
    Forward,
    ForwardShared,
    Numbered,
    Unconfirmed,
)
from pool.frames.peers import Hello
from router.route_table import RouteTable
from store.base import Op, PutRetained
from store.memory_store import MemoryStore
from store.writer import StoreWriter

CLUSTER = ClusterConfig(name="t", node="b", nats=("nats://127.0.0.1:4222",))


class HeldStore(MemoryStore):
    """A memory store whose commits wait until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = gevent.event.Event()

    def apply(self, ops: Sequence[Op]) -> None:
        self.release.wait()
        super().apply(ops)


def sent_to_a(member: ClusterMember) -> list[Frame]:
    """The frames node b's worker published to a.0 so far."""
    subject = "mqtt.t.to.a.0.b.0"
    return [
        frame
        for sent_subject, body in member.fabric.link._out
        if sent_subject == subject
        for frame in FrameDecoder().feed(body)
    ]


def new_member() -> tuple[BrokerContext, ClusterMember]:
    """Node b's worker 0, with no store yet, as `Broker.__init__` makes it."""
    context = BrokerContext(
        config=BrokerConfig(),
        hooks=HookBus(),
        route_table=RouteTable(),
        stats=BrokerStats(),
        persistence=Persistence(None),
    )
    member = ClusterMember(CLUSTER, 0, context, None, retained=lambda: None, clears=lambda: None)
    return context, member


class Delivered:
    """Stands in for the worker's dispatcher: what reached this worker's subscribers, and
    the share marks it came with."""

    def __init__(self) -> None:
        self.batches: list[tuple[Message, ...]] = []
        self.marks: list[tuple[ShareMark, ...] | None] = []

    def publish_forwarded(
        self, messages: tuple[Message, ...], marks: tuple[ShareMark, ...] | None, _gate: object
    ) -> None:
        self.batches.append(messages)
        self.marks.append(marks)


def test_committed_waits_for_the_store_opened_after_the_member_was_made() -> None:
    context, member = new_member()
    context.dispatcher = Delivered()  # type: ignore[assignment]
    store = HeldStore()
    context.persistence = Persistence(StoreWriter(store))  # as `Broker.start` opens the store
    receive = member.fabric._messages
    receive([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])  # a.0 links
    receive([("mqtt.t.to.b.0.a.0", encode_frame(Numbered(1, 1, member.fabric.epoch, True, 0)))])
    # What a delivery of the numbered batch submitted (its puts), then the batch's end.
    context.persistence.submit([PutRetained(Message(topic="r", payload=b"x", retain=True))])
    receive([("mqtt.t.to.b.0.a.0", encode_frame(CommitSync(5, 1)))])
    gevent.sleep(0.05)
    assert Committed(5) not in sent_to_a(member)  # the put is not committed yet
    store.release.set()
    gevent.sleep(0.05)
    assert Committed(5) in sent_to_a(member)


def receiving_from_a() -> tuple[Delivered, Callable[[list[tuple[str, bytes]]], None], int]:
    """Node b's worker, linked to a.0 (its `Hello` received): what reaches its dispatcher,
    how it is handed NATS messages, and its epoch (which a's batches are addressed to)."""
    context, member = new_member()
    delivered = Delivered()
    context.dispatcher = delivered  # type: ignore[assignment]
    receive = member.fabric._messages
    receive([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])
    return delivered, receive, member.fabric.epoch


def test_confirmations_nothing_waits_for_are_gathered_and_an_awaited_one_goes_at_once() -> None:
    context, member = new_member()  # no store: every batch is committed when it arrives
    delivered = Delivered()
    context.dispatcher = delivered  # type: ignore[assignment]
    receive = member.fabric._messages
    receive([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])  # a.0 links
    epoch = member.fabric.epoch  # the life of b.0 that a.0's batches are for

    def batch(seq: int, awaited: bool) -> None:
        """a.0's numbered batch `seq` (commit token `seq`), with no messages."""
        subject = "mqtt.t.to.b.0.a.0"
        receive([(subject, encode_frame(Numbered(seq, 1, epoch, awaited, 0)))])
        receive([(subject, encode_frame(CommitSync(seq, seq)))])

    def confirmations() -> list[Frame]:
        gevent.sleep(0)  # the fabric sends what a loop turn gathered
        return [frame for frame in sent_to_a(member) if isinstance(frame, Committed)]

    batch(1, awaited=False)
    batch(2, awaited=False)
    assert confirmations() == []  # gathered
    gevent.sleep(CONFIRM_DELAY * 3)
    assert confirmations() == [Committed(2)]  # one, which confirms both
    batch(3, awaited=False)
    batch(4, awaited=True)
    assert confirmations() == [Committed(2), Committed(4)]  # at once, confirming 3 too
    gevent.sleep(CONFIRM_DELAY * 3)
    assert confirmations() == [Committed(2), Committed(4)]  # 3's gathered one is not sent
    assert delivered.batches == [(), (), (), ()]  # each batch taken once
    batch(5, awaited=False)
    member.numbered.stop()  # a clean stop: what is gathered is confirmed, not left to resend
    assert confirmations() == [Committed(2), Committed(4), Committed(5)]


def test_a_numbered_batch_of_share_picks_is_delivered_once_whole_with_its_marks() -> None:
    delivered, receive, epoch = receiving_from_a()
    subject = "mqtt.t.to.b.0.a.0"
    first, second = (Message(topic=f"jobs/{n}", payload=b"x", qos=1) for n in (1, 2))
    picked, ordinary = ShareMark(False, ()), ShareMark(True, ())
    # The batch's ForwardShared, split in two parts (past FORWARD_BYTES), as its sender
    # sends it, then sends it again (its confirmation was lost with a NATS connection).
    batch = [
        encode_frame(Numbered(1, 1, epoch, False, 2)),
        encode_frame(ForwardShared((first,), (picked,), 0, 1)),
        encode_frame(ForwardShared((second,), (ordinary,), 0, 1)),
        encode_frame(CommitSync(1, 1)),
    ]
    receive([(subject, frame) for frame in batch[:3]])
    assert delivered.batches == []  # not before its end
    receive([(subject, batch[3])])
    receive([(subject, frame) for frame in batch])  # the resend: skipped
    assert delivered.batches == [(first, second)]
    assert delivered.marks == [(picked, ordinary)]


def test_a_batch_of_plain_and_shared_frames_marks_the_plain_ones_for_ordinary_subscribers() -> None:
    delivered, receive, epoch = receiving_from_a()
    subject = "mqtt.t.to.b.0.a.0"
    first, second, third = (Message(topic=f"jobs/{n}", payload=b"x", qos=1) for n in (1, 2, 3))
    picked, ordinary = ShareMark(False, ()), ShareMark(True, ())
    batch = [
        Numbered(1, 1, epoch, False, 3),
        Forward((first,), 0, 1),
        ForwardShared((second,), (picked,), 0, 1),
        Forward((third,), 0, 1),
        CommitSync(1, 1),
    ]
    receive([(subject, encode_frame(frame)) for frame in batch])
    assert delivered.batches == [(first, second, third)]
    assert delivered.marks == [(ordinary, picked, ordinary)]


def confirmed_to_a(member: ClusterMember) -> list[Frame]:
    """The `Committed` frames node b's worker sent a.0 so far (gathered ones included)."""
    gevent.sleep(CONFIRM_DELAY * 3)
    return [frame for frame in sent_to_a(member) if isinstance(frame, Committed)]


def receiving_member() -> tuple[ClusterMember, Delivered, Callable[[list[Frame]], None]]:
    """Node b's worker, linked to a.0: the member, what reaches its dispatcher, and how a
    NATS message of a.0's frames is handed to it."""
    context, member = new_member()
    delivered = Delivered()
    context.dispatcher = delivered  # type: ignore[assignment]
    receive = member.fabric._messages
    receive([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])

    def nats_message(frames: list[Frame]) -> None:
        body = b"".join(encode_frame(frame) for frame in frames)
        receive([("mqtt.t.to.b.0.a.0", body)])

    return member, delivered, nats_message


def test_a_batch_whose_head_was_lost_is_not_delivered_in_part_nor_confirmed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a.0's batch 1 spans two NATS messages; the first (its `Numbered` and first part) is
    # lost with b.0's NATS connection. Its tail is not a batch of its own: nothing of it is
    # delivered and it is not confirmed (which would let a.0 forget the lost part), while
    # a plain QoS 0 batch still goes at once. Sent again whole, it is delivered once.
    member, delivered, nats_message = receiving_member()
    epoch = member.fabric.epoch
    first, second = (Message(topic="t", payload=str(n).encode(), qos=1) for n in (1, 2))
    plain = Message(topic="t", payload=b"0")
    head = [Numbered(1, 1, epoch, True, 2), Forward((first,), 0, 1)]
    tail = [Forward((second,), 0, 1), CommitSync(9, 1)]
    nats_message(tail)
    nats_message([Forward((plain,))])
    assert delivered.batches == [(plain,)]
    assert confirmed_to_a(member) == []
    assert "the end of batch 1 from a.0 arrived without its start" in caplog.text
    nats_message(head + tail)  # a.0 sends it again (unconfirmed for peer_timeout)
    assert delivered.batches == [(plain,), (first, second)]
    assert confirmed_to_a(member) == [Committed(9)]


def test_a_batch_that_lost_a_part_in_the_middle_is_taken_only_when_it_comes_again_whole() -> None:
    member, delivered, nats_message = receiving_member()
    epoch = member.fabric.epoch
    parts = [Forward((Message(topic="t", payload=str(n).encode(), qos=2),), 0, 1) for n in range(3)]
    numbered, end = Numbered(1, 1, epoch, False, 3), CommitSync(4, 1)
    nats_message([numbered, parts[0]])
    nats_message([parts[2], end])  # the message with parts[1] was lost
    assert delivered.batches == []
    assert confirmed_to_a(member) == []
    nats_message([numbered, *parts, end])
    assert delivered.batches == [tuple(part.messages[0] for part in parts)]
    assert confirmed_to_a(member) == [Committed(4)]


def test_a_batch_too_long_for_one_frame_names_itself_in_each_part() -> None:
    # b.0 sends a.0 a numbered batch past FORWARD_BYTES: each part names the batch, and
    # its `Numbered` counts them, so a.0 can tell a part whose batch's head it lost.
    _context, member = new_member()
    member.fabric._messages([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])
    (peer,) = member.fabric.peers
    big = [
        Message(topic="t", payload=bytes(FORWARD_BYTES // 2 + 1), qos=1, message_id=n)
        for n in (1, 2)
    ]
    for message in big:
        member.numbered.add(message, (peer,))
    member.numbered.send([(peer, Forward(tuple(big)))], None)
    gevent.sleep(0)
    batch = [f for f in sent_to_a(member) if isinstance(f, Numbered | Forward | CommitSync)]
    assert [type(frame) for frame in batch] == [Numbered, Forward, Forward, CommitSync]
    numbered, *parts, end = batch
    assert isinstance(numbered, Numbered) and isinstance(end, CommitSync)
    assert numbered.parts == 2
    assert [part.batch for part in parts if isinstance(part, Forward)] == [numbered.seq] * 2
    assert end.batch == numbered.seq


def test_a_peer_that_restarted_gets_the_qos1_and_qos2_messages_it_never_confirmed_first() -> None:
    # b.0 sends a.0 two numbered batches that a.0 never confirms, then hears a.0's next
    # life: it gives that life their QoS 1/2 messages (not the QoS 0 one), addressed to
    # it, as its first numbered batch, before the next batch it sends it; a.0's restored
    # sessions take those they lack.
    _context, member = new_member()
    receive = member.fabric._messages
    receive([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])  # a.0 links, in its life 7
    (peer,) = member.fabric.peers
    first, dropped, second, later = (
        Message(topic="t", payload=str(n).encode(), qos=qos, message_id=n)
        for n, qos in ((1, 1), (2, 0), (3, 2), (4, 1))
    )
    numbered = member.numbered

    def send(batch: tuple[Message, ...]) -> None:
        for message in batch:
            if message.qos:
                numbered.add(message, (peer,))
        numbered.send([(peer, Forward(batch))], None)

    send((first, dropped))
    send((second,))
    gevent.sleep(0)
    sent_before = len(sent_to_a(member))
    receive([("mqtt.t.all.a.0", encode_frame(Hello(0, 8)))])  # a.0 restarted: life 8
    send((later,))
    gevent.sleep(0)
    carrying = [
        frame
        for frame in sent_to_a(member)[sent_before:]
        if isinstance(frame, Unconfirmed | Numbered | Forward)
    ]
    assert carrying == [
        Numbered(1, 1, 8, False, 1),
        Unconfirmed((first, second), 8, 1),
        Numbered(2, 1, 8, False, 1),
        Forward((later,), 0, 2),
    ]


def sent_unconfirmed_to_a() -> tuple[ClusterMember, Message]:
    """Node b's worker, linked to a.0 in its life 7, and a QoS 1 message it sent a.0 in a
    numbered batch that a.0 has not confirmed."""
    _context, member = new_member()
    member.fabric._messages([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])
    (peer,) = member.fabric.peers
    kept = Message(topic="t", payload=b"1", qos=1, message_id=1)
    member.numbered.add(kept, (peer,))
    member.numbered.send([(peer, Forward((kept,)))], None)
    gevent.sleep(0)
    return member, kept


def test_a_restarted_peer_that_greets_in_the_same_turn_still_gets_what_it_never_confirmed() -> None:
    # a.0's next life is heard twice in one batch of NATS messages: its heartbeat (b.0
    # takes it for restarted and queues the `Unconfirmed`) and its own greeting to b.0
    # (a direct `Hello`: it linked b.0 and wants the snapshots again). The greeting re-links
    # a.0 in the same life; what was queued for that life still leaves.
    member, kept = sent_unconfirmed_to_a()
    receive = member.fabric._messages
    sent_before = len(sent_to_a(member))
    receive(
        [
            ("mqtt.t.all.a.0", encode_frame(Hello(0, 8))),
            ("mqtt.t.to.b.0.a.0", encode_frame(Hello(0, 8))),
        ]
    )
    gevent.sleep(0)
    assert Unconfirmed((kept,), 8, 1) in sent_to_a(member)[sent_before:]


def test_what_a_restarted_peer_never_confirmed_is_sent_again_until_it_confirms_it() -> None:
    # The `Unconfirmed` batch for a.0's new life is lost with b.0's NATS connection: once
    # the connection is back it goes again, and again after that, until a.0 confirms it.
    member, kept = sent_unconfirmed_to_a()
    receive = member.fabric._messages
    receive([("mqtt.t.all.a.0", encode_frame(Hello(0, 8)))])  # a.0 restarted: life 8
    gevent.sleep(0)

    def given() -> int:
        return sent_to_a(member).count(Unconfirmed((kept,), 8, 1))

    assert given() == 1
    member.numbered.link_up()  # b.0's NATS connection came back: what it sent may be lost
    member.numbered.start()
    try:
        gevent.sleep(member.config.heartbeat + 0.1)
        assert given() == 2
        token = [f for f in sent_to_a(member) if isinstance(f, CommitSync)][-1].token
        receive([("mqtt.t.to.b.0.a.0", encode_frame(Committed(token)))])
        member.numbered.link_up()
        gevent.sleep(member.config.heartbeat + 0.1)
        assert given() == 2  # confirmed: not sent again
    finally:
        member.numbered.stop()


def relaying_member() -> tuple[ClusterMember, list[tuple[Message, ...]]]:
    """Node b's worker, linked to a.0, and what it hands its restored sessions (here: its
    pool's relay, which passes `Unconfirmed` messages to the pool's other workers)."""
    context, member = new_member()
    context.dispatcher = Delivered()  # type: ignore[assignment]
    relayed: list[tuple[Message, ...]] = []
    member.relay_unconfirmed(relayed.append)
    member.fabric._messages([("mqtt.t.all.a.0", encode_frame(Hello(0, 7)))])
    return member, relayed


def test_a_restarted_worker_gives_its_restored_sessions_a_numbered_unconfirmed_batch_once() -> None:
    # a.0 gives b.0's life the messages b.0's previous life never confirmed, as a numbered
    # batch, and sends it again (its NATS connection was lost meanwhile): b.0 hands them
    # to its restored sessions (here: its pool's relay) once, and confirms the batch.
    member, relayed = relaying_member()
    receive = member.fabric._messages
    epoch = member.fabric.epoch
    first, second = (Message(topic="t", payload=str(n).encode(), qos=1) for n in (1, 2))
    batch = [
        Numbered(1, 1, epoch, False, 2),
        Unconfirmed((first,), epoch, 1),
        Unconfirmed((second,), epoch, 1),
        CommitSync(4, 1),
    ]
    subject = "mqtt.t.to.b.0.a.0"
    for _send in range(2):
        receive([(subject, encode_frame(frame)) for frame in batch])
    gevent.sleep(CONFIRM_DELAY + 0.05)
    assert relayed == [(first, second)]
    assert Committed(4) in sent_to_a(member)


def test_an_unconfirmed_frame_outside_a_numbered_batch_is_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # This version always numbers the batch that carries `Unconfirmed`; one outside a batch
    # comes from a node that runs other code, and is not handed to the restored sessions.
    member, relayed = relaying_member()
    receive = member.fabric._messages
    message = Message(topic="t", payload=b"1", qos=1)
    unconfirmed = Unconfirmed((message,), member.fabric.epoch)
    receive([("mqtt.t.to.b.0.a.0", encode_frame(unconfirmed))])
    assert relayed == []
    assert "a.0 sent 1 messages for restored sessions outside a numbered batch" in caplog.text
