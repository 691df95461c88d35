"""SessionState under random interleavings: the window bound holds and no delivery is lost.

Hypothesis draws a list of steps that admit QoS 0/1/2 deliveries to a connected or offline session,
acknowledge random or in-flight packet ids with PUBACK/PUBREC/PUBCOMP, fill the window and
connect/disconnect, and a small model checks after every step that:

- the in-flight window never exceeds `max_inflight`;
- every admitted QoS 1/2 delivery is in exactly one of in flight, queued, completed, or
  dropped with QUEUE_FULL (never lost, never duplicated);
- packet ids in flight are within 1..65535, and a new one is never an id still in flight
  [MQTT-2.3.1-2] (server: [MQTT-2.3.1-4]);
- deliveries that go through the queue leave in admission order [MQTT-4.6.0-6] (a QoS 0
  delivery to a connected session goes out at once and is not ordered against the queue).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from core.message import Message
from core.reasons import DropReason
from core.session_state import (
    DROPPED,
    QUEUED,
    SEND_WITHOUT_ID,
    Ack,
    Delivery,
    InflightEntry,
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
class Admit:
    qos: int


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
class FillWindow:
    """What the session actor does when connected, after acks and on reconnect."""


@dataclass(frozen=True)
class ToggleConnection:
    pass


Step = Admit | AckExpected | AckAnything | FillWindow | ToggleConnection

steps = st.one_of(
    st.builds(Admit, st.sampled_from([0, 1, 2])),
    st.builds(AckExpected, st.integers(0, 3)),
    st.builds(AckAnything, st.sampled_from(list(Ack)), st.integers(0, 4), st.integers(1, 65535)),
    st.just(FillWindow()),
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
        self.qos12_admitted: set[int] = set()  # seqs of admitted QoS 1/2 deliveries
        self.completed: list[int] = []  # seqs of QoS 1/2 deliveries fully acknowledged
        self.left_in_order: list[int] = []  # seqs as they left through the ordered path
        self.dropped_seen = 0
        for packet_id, stage in start.restored:
            qos = 1 if stage is Stage.AWAIT_PUBACK else 2
            seq = self.new_seq(qos)
            self.state.inflight[packet_id] = InflightEntry(self.delivery(seq, qos), stage)
            self.left_in_order.append(seq)

    def new_seq(self, qos: int) -> int:
        self.admitted += 1
        if qos:
            self.qos12_admitted.add(self.admitted)
        return self.admitted

    @staticmethod
    def delivery(seq: int, qos: int) -> Delivery:
        return Delivery(Message(topic="t", payload=b"%d" % seq, qos=qos), qos, False, seq=seq)

    def run(self, step: Step) -> None:
        match step:
            case Admit(qos):
                self.admit(qos)
            case AckExpected(pick):
                self.acknowledge_as_expected(pick)
            case AckAnything(ack, pick, stray_id):
                in_flight = list(self.state.inflight)
                self.acknowledge(ack, in_flight[pick] if pick < len(in_flight) else stray_id)
            case FillWindow():
                if self.connected:
                    self.fill_window()
            case ToggleConnection():
                self.connected = not self.connected

    def admit(self, qos: int) -> None:
        seq = self.new_seq(qos)
        delivery = self.delivery(seq, qos)
        in_flight_before = set(self.state.inflight)
        queue_was_empty = not self.state.queue
        answer = self.state.admit(delivery, self.connected)
        if qos == 0:
            assert answer in (SEND_WITHOUT_ID, QUEUED, DROPPED)
            assert answer != SEND_WITHOUT_ID or self.connected
            assert answer != DROPPED or (not self.connected and not self.state.queue_qos0)
        elif answer != QUEUED:
            assert self.connected and queue_was_empty
            self.check_new_packet_id(answer, in_flight_before)
            assert self.state.inflight[answer].delivery is delivery
            self.left_in_order.append(seq)
        else:
            assert delivery in (self.state.queue or ())

    def fill_window(self) -> None:
        in_flight_before = set(self.state.inflight)
        for packet_id, delivery in self.state.fill_window():
            if delivery.qos == 0:
                assert packet_id == SEND_WITHOUT_ID
            else:
                self.check_new_packet_id(packet_id, in_flight_before)
                in_flight_before.add(packet_id)
            self.left_in_order.append(delivery.seq)

    def acknowledge_as_expected(self, pick: int) -> None:
        if not self.state.inflight:
            return
        in_flight = list(self.state.inflight.items())
        packet_id, entry = in_flight[pick % len(in_flight)]
        ack = next(ack for ack, (stage, _) in EXPECTED_TRANSITION.items() if stage is entry.stage)
        self.acknowledge(ack, packet_id)

    def acknowledge(self, ack: Ack, packet_id: int) -> None:
        """Apply one ack and check it against the expected transition."""
        entry = self.state.inflight.get(packet_id)
        stage_before = None if entry is None else entry.stage
        others_before = {pid: e.stage for pid, e in self.state.inflight.items() if pid != packet_id}
        expected_stage, next_stage = EXPECTED_TRANSITION[ack]
        result = self.state.acknowledge(ack, packet_id)
        if entry is None or stage_before is not expected_stage:
            assert result == (None, None)
            assert self.state.inflight.get(packet_id) is entry
            assert entry is None or entry.stage is stage_before
        else:
            assert result == (next_stage, entry.delivery)
            if next_stage is None:
                assert packet_id not in self.state.inflight
                self.completed.append(entry.delivery.seq)
            else:
                assert self.state.inflight[packet_id].stage is next_stage
        others_after = {pid: e.stage for pid, e in self.state.inflight.items() if pid != packet_id}
        assert others_after == others_before

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
            d.seq for d, reason in self.state.dropped if d.qos and reason is DropReason.QUEUE_FULL
        )
        assert set(places) == self.qos12_admitted
        assert all(count == 1 for count in places.values()), places

    def drops_have_the_right_reason(self) -> None:
        for delivery, reason in self.state.dropped[self.dropped_seen :]:
            if reason is DropReason.QOS0_OFFLINE:
                assert delivery.qos == 0
            else:
                assert reason is DropReason.QUEUE_FULL
        self.dropped_seen = len(self.state.dropped)

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
