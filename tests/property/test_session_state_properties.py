"""SessionState under random interleavings: the window bound holds and no delivery is lost.

Hypothesis draws a list of steps that deliver batches of QoS 0/1/2 deliveries to a connected
(possibly slow) or offline session, acknowledge batches of random or in-flight packet ids with
PUBACK/PUBREC/PUBCOMP, resume the session and connect/disconnect, and a small model carries out
the actions the transitions return and checks after every step that:

- the in-flight window never exceeds `max_inflight`;
- every delivered QoS 1/2 delivery is in exactly one of in flight, queued, completed, or
  dropped with QUEUE_FULL (never lost, never duplicated); every QoS 0 one is in exactly one
  of sent, queued or dropped;
- packet ids in flight are within 1..65535, and a new one is never an id still in flight
  [MQTT-2.3.1-2] (server: [MQTT-2.3.1-4]);
- an ack batch answers each ack as its stage says (PUBREC -> SendPubrel, even a repeated
  one [MQTT-4.3.3-1]; PUBACK/PUBCOMP -> Completed; for an id not in flight nothing), then
  refills the window from the head of the queue, only when connected and a slot was freed;
  an ack of an id in flight that does not fit its stage ends the batch with a
  ProtocolViolation, after the acks before it and without a refill;
- resume resends every in-flight entry in send order (PUBLISH with DUP, or PUBREL once
  PUBREC came) [MQTT-4.4.0-1] before anything from the queue;
- a full queue drops its oldest first; drops carry the reason that applies;
- deliveries leave in the order they were delivered [MQTT-4.6.0-6].
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from core.message import Message
from core.reasons import DropReason
from core.session_state import (
    Ack,
    Action,
    Completed,
    Delivery,
    Dropped,
    InflightEntry,
    ProtocolViolation,
    SendPublish,
    SendPubrel,
    SessionState,
    Stage,
)

# The stage an ack must find, and the stage it leads to (None: the delivery is complete).
EXPECTED_TRANSITION = {
    Ack.PUBACK: (Stage.AWAIT_PUBACK, None),
    Ack.PUBREC: (Stage.AWAIT_PUBREC, Stage.AWAIT_PUBCOMP),
    Ack.PUBCOMP: (Stage.AWAIT_PUBCOMP, None),
}


@dataclass(frozen=True)
class DeliverBatch:
    qos: tuple[int, ...]
    slow: bool  # the owner's slow-consumer verdict (only while connected)


@dataclass(frozen=True)
class AckExpected:
    """The client acks the `pick`-th in-flight entry with the ack its stage waits for."""

    pick: int


@dataclass(frozen=True)
class AckAnything:
    """Any ack for the `pick`-th in-flight id, or for `stray_id` when there is none."""

    ack: Ack
    pick: int
    stray_id: int


@dataclass(frozen=True)
class AckBatch:
    acks: tuple[AckExpected | AckAnything, ...]


@dataclass(frozen=True)
class Resume:
    """The client (re)attaches, connected or not before (a takeover): the session resumes."""


@dataclass(frozen=True)
class ToggleConnection:
    pass


Step = DeliverBatch | AckBatch | Resume | ToggleConnection

acks = st.one_of(
    st.builds(AckExpected, st.integers(0, 3)),
    st.builds(AckAnything, st.sampled_from(list(Ack)), st.integers(0, 4), st.integers(1, 65535)),
)
steps = st.one_of(
    st.builds(
        DeliverBatch,
        st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=4).map(tuple),
        st.booleans(),
    ),
    st.builds(AckBatch, st.lists(acks, min_size=1, max_size=3).map(tuple)),
    st.just(Resume()),
    st.just(ToggleConnection()),
)


# Packet ids near both ends of the range, so allocation wraps and meets ids in flight.
edge_packet_ids = st.one_of(st.integers(1, 4), st.integers(65530, 65535))


@dataclass(frozen=True)
class Start:
    """Limits and the state a session starts from; `restored` are in-flight entries as a
    restarted broker rebuilds them from the store: (packet id, stage)."""

    max_inflight: int
    max_queued: int
    queue_qos0: bool
    next_packet_id: int
    connected: bool
    restored: tuple[tuple[int, Stage], ...]


@st.composite
def starts(draw: st.DrawFn) -> Start:
    max_inflight = draw(st.integers(1, 4))
    restored_ids = draw(st.lists(edge_packet_ids, unique=True, max_size=max_inflight))
    return Start(
        max_inflight=max_inflight,
        max_queued=draw(st.integers(0, 5)),
        queue_qos0=draw(st.booleans()),
        next_packet_id=draw(st.one_of(st.just(1), edge_packet_ids)),
        connected=draw(st.booleans()),
        restored=tuple((packet_id, draw(st.sampled_from(Stage))) for packet_id in restored_ids),
    )


class SessionModel:
    """Drives one SessionState and tracks where each delivery went (keyed by its `seq`)."""

    def __init__(self, start: Start) -> None:
        self.state = SessionState(
            client_id="c",
            persistent=True,
            max_inflight=start.max_inflight,
            max_queued=start.max_queued,
            queue_qos0=start.queue_qos0,
            next_packet_id=start.next_packet_id,
        )
        self.connected = start.connected
        self.admitted = 0
        self.qos12_admitted: set[int] = set()  # seqs of delivered QoS 1/2 deliveries
        self.qos0_admitted: set[int] = set()
        self.completed: list[int] = []  # seqs of QoS 1/2 deliveries fully acknowledged
        self.sent_qos0: list[int] = []
        self.dropped: list[Dropped] = []
        self.left_in_order: list[int] = []  # seqs as they left, in order
        for packet_id, stage in start.restored:
            qos = 1 if stage is Stage.AWAIT_PUBACK else 2
            seq = self.new_seq(qos)
            self.state.inflight[packet_id] = InflightEntry(self.delivery(seq, qos), stage)
            self.left_in_order.append(seq)

    def new_seq(self, qos: int) -> int:
        self.admitted += 1
        (self.qos12_admitted if qos else self.qos0_admitted).add(self.admitted)
        return self.admitted

    @staticmethod
    def delivery(seq: int, qos: int) -> Delivery:
        return Delivery(Message(topic="t", payload=b"%d" % seq, qos=qos), qos, False, seq=seq)

    def run(self, step: Step) -> None:
        match step:
            case DeliverBatch(qos, slow):
                self.deliver(qos, slow and self.connected)
            case AckBatch(batch):
                self.acknowledge(batch)
            case Resume():
                self.connected = True
                self.resume()
            case ToggleConnection():
                if self.connected:
                    self.connected = False
                else:  # the client attaches: the session resumes
                    self.connected = True
                    self.resume()

    # ----- carrying out actions -------------------------------------------------------

    def sent_from_queue(
        self, actions: list[Action], queue_before: list[Delivery], filled: bool
    ) -> None:
        """`actions` are the window refill: the head of the queue, in order, as it must go;
        `filled`: the window was to be filled, so what still waits has no free slot."""
        in_flight_before = set(self.state.inflight) - {
            a.packet_id for a in actions if type(a) is SendPublish
        }
        assert len(actions) <= len(queue_before)
        for action, expected in zip(actions, queue_before, strict=False):
            if expected.qos == 0:
                assert action is expected
                self.sent_qos0.append(expected.seq)
            else:
                assert type(action) is SendPublish and not action.dup
                assert action.delivery is expected
                self.check_new_packet_id(action.packet_id, in_flight_before)
                in_flight_before.add(action.packet_id)
                assert self.state.inflight[action.packet_id].delivery is expected
            self.left_in_order.append(expected.seq)
        assert list(self.state.queue or ()) == queue_before[len(actions) :]
        if filled and self.state.queue:  # stopped only because the window is full again
            assert len(self.state.inflight) == self.state.max_inflight

    def drop(self, action: Dropped) -> None:
        self.dropped.append(action)

    def deliver(self, qos: tuple[int, ...], slow: bool) -> None:
        batch = [self.delivery(self.new_seq(q), q) for q in qos]
        queued_before = {d.seq for d in self.state.queue or ()}
        in_flight_before = set(self.state.inflight)
        actions = self.state.deliver(batch, self.connected, drop_qos0=slow)
        accounted: list[int] = []
        for action in actions:
            if type(action) is Dropped:
                delivery, reason = action.delivery, action.reason
                if reason is DropReason.QUEUE_FULL:
                    assert delivery.seq in queued_before or delivery in batch
                else:
                    assert delivery.qos == 0 and delivery in batch
                    if reason is DropReason.SLOW_CONSUMER:
                        assert slow
                    else:
                        assert reason is DropReason.QOS0_OFFLINE
                        assert not self.connected and not self.state.queue_qos0
                    accounted.append(delivery.seq)
                self.drop(action)
            elif type(action) is Delivery:
                assert action.qos == 0 and self.connected and not slow
                self.sent_qos0.append(action.seq)
                self.left_in_order.append(action.seq)
                accounted.append(action.seq)
            else:
                assert type(action) is SendPublish and not action.dup
                assert self.connected
                self.check_new_packet_id(action.packet_id, in_flight_before)
                in_flight_before.add(action.packet_id)
                assert self.state.inflight[action.packet_id].delivery is action.delivery
                self.left_in_order.append(action.delivery.seq)
                accounted.append(action.delivery.seq)
        # what was not sent or dropped outright waits in the queue (or was pushed out of it)
        queued_now = {d.seq for d in self.state.queue or ()}
        full_drops = {a.delivery.seq for a in actions if type(a) is Dropped}
        for delivery in batch:
            if delivery.seq not in accounted:
                assert delivery.seq in queued_now or delivery.seq in full_drops
        # a full queue drops its oldest first
        for dropped_seq in (a.delivery.seq for a in actions if type(a) is Dropped):
            if dropped_seq not in accounted and queued_now:
                assert dropped_seq < min(queued_now)

    def resolve(self, batch: tuple[AckExpected | AckAnything, ...]) -> list[tuple[Ack, int]]:
        """The acks as the client sends them, picked against the stages they will meet."""
        stages = {pid: e.stage for pid, e in self.state.inflight.items()}
        resolved = []
        for item in batch:
            match item:
                case AckExpected(pick):
                    if not stages:
                        continue
                    packet_id = list(stages)[pick % len(stages)]
                    ack = next(
                        a
                        for a, (stage, _) in EXPECTED_TRANSITION.items()
                        if stage is stages[packet_id]
                    )
                case AckAnything(ack, pick, stray_id):
                    in_flight = list(stages)
                    packet_id = in_flight[pick] if pick < len(in_flight) else stray_id
            expected_stage, next_stage = EXPECTED_TRANSITION[ack]
            if stages.get(packet_id) is expected_stage:
                if next_stage is None:
                    del stages[packet_id]
                else:
                    stages[packet_id] = next_stage
            resolved.append((ack, packet_id))
        return resolved

    def acknowledge(self, batch: tuple[AckExpected | AckAnything, ...]) -> None:
        """Apply a batch of acks and check each answer against the expected transition."""
        resolved = self.resolve(batch)
        entries = dict(self.state.inflight)
        stages = {pid: e.stage for pid, e in entries.items()}
        queue_before = list(self.state.queue or ())
        expected: list[Action] = []
        violated = False
        for ack, packet_id in resolved:
            expected_stage, next_stage = EXPECTED_TRANSITION[ack]
            stage = stages.get(packet_id)
            if (
                stage is not None
                and stage is not expected_stage
                and (ack is not Ack.PUBREC or stage is Stage.AWAIT_PUBACK)
            ):
                violated = True
                break
            if stage is expected_stage:
                delivery = entries[packet_id].delivery
                if next_stage is None:
                    del stages[packet_id]
                    expected.append(Completed(delivery))
                    self.completed.append(delivery.seq)
                else:
                    stages[packet_id] = next_stage
                    expected.append(SendPubrel(packet_id, delivery))
            elif ack is Ack.PUBREC:
                # 5.0 answers a PUBREC of an id not in flight with 0x92
                expected.append(SendPubrel(packet_id, None, found=packet_id in stages))
        actions = self.state.acknowledge(resolved, self.connected, now=0.0)
        assert actions[: len(expected)] == expected
        refill = actions[len(expected) :]
        if violated:
            [violation] = refill
            assert type(violation) is ProtocolViolation
            refill = []
        freed = any(type(a) is Completed for a in expected) and not violated
        if not (self.connected and freed):
            assert refill == []
        self.sent_from_queue(refill, queue_before, filled=self.connected and freed)
        # the acked entries moved as expected; the others did not change
        for packet_id, stage in stages.items():
            assert self.state.inflight[packet_id].stage is stage
            assert self.state.inflight[packet_id] is entries[packet_id]
        assert set(self.state.inflight) - set(stages) == {
            a.packet_id for a in refill if type(a) is SendPublish
        }

    def resume(self) -> None:
        entries = list(self.state.inflight.items())
        queue_before = list(self.state.queue or ())
        actions = self.state.resume(now=0.0)
        resent = actions[: len(entries)]
        assert len(resent) == len(entries)
        for action, (packet_id, entry) in zip(resent, entries, strict=True):
            if entry.stage is Stage.AWAIT_PUBCOMP:
                assert action == SendPubrel(packet_id, None)
            else:
                assert action == SendPublish(packet_id, entry.delivery, dup=True)
        assert list(self.state.inflight.items())[: len(entries)] == entries  # unchanged
        self.sent_from_queue(actions[len(entries) :], queue_before, filled=True)

    # ----- checks ---------------------------------------------------------------------

    def check_new_packet_id(self, packet_id: int, in_flight_before: set[int]) -> None:
        assert 1 <= packet_id <= 65535
        assert packet_id not in in_flight_before

    def window_is_bounded(self) -> None:
        assert len(self.state.inflight) <= self.state.max_inflight

    def packet_ids_are_valid(self) -> None:
        assert all(1 <= packet_id <= 65535 for packet_id in self.state.inflight)
        assert all(entry.delivery.qos in (1, 2) for entry in self.state.inflight.values())

    def queue_respects_its_bound(self) -> None:
        if self.state.max_queued:
            assert len(self.state.queue or ()) <= self.state.max_queued

    def every_qos12_delivery_is_in_exactly_one_place(self) -> None:
        places: Counter[int] = Counter()
        places.update(entry.delivery.seq for entry in self.state.inflight.values())
        places.update(d.seq for d in self.state.queue or () if d.qos)
        places.update(self.completed)
        places.update(
            d.delivery.seq
            for d in self.dropped
            if d.delivery.qos and d.reason is DropReason.QUEUE_FULL
        )
        assert set(places) == self.qos12_admitted
        assert all(count == 1 for count in places.values()), places

    def every_qos0_delivery_is_in_exactly_one_place(self) -> None:
        places: Counter[int] = Counter(self.sent_qos0)
        places.update(d.seq for d in self.state.queue or () if not d.qos)
        places.update(d.delivery.seq for d in self.dropped if not d.delivery.qos)
        assert set(places) == self.qos0_admitted
        assert all(count == 1 for count in places.values()), places

    def drops_have_the_right_reason(self) -> None:
        for drop in self.dropped:
            if drop.reason in (DropReason.QOS0_OFFLINE, DropReason.SLOW_CONSUMER):
                assert drop.delivery.qos == 0
            else:
                assert drop.reason is DropReason.QUEUE_FULL

    def queued_deliveries_leave_in_admission_order(self) -> None:
        assert self.left_in_order == sorted(self.left_in_order)
        queued = [d.seq for d in self.state.queue or ()]
        assert queued == sorted(queued)
        if self.left_in_order and queued:
            assert self.left_in_order[-1] < queued[0]

    def check_invariants(self) -> None:
        self.window_is_bounded()
        self.packet_ids_are_valid()
        self.queue_respects_its_bound()
        self.every_qos12_delivery_is_in_exactly_one_place()
        self.every_qos0_delivery_is_in_exactly_one_place()
        self.drops_have_the_right_reason()
        self.queued_deliveries_leave_in_admission_order()


@settings(max_examples=200, deadline=None)
@given(start=starts(), run=st.lists(steps, min_size=15, max_size=50))
def test_random_interleavings_keep_the_window_bounded_and_lose_nothing(
    start: Start, run: list[Step]
) -> None:
    model = SessionModel(start)
    for step in run:
        model.run(step)
        model.check_invariants()
