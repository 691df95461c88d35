"""Flow control decisions (`core.flow`), the intake's holds, and shedding a stuck queue."""

from __future__ import annotations

import pytest

from actors.config import OverloadConfig
from actors.overload import FlowControl
from channel.intake import Intake
from core.flow import (
    FlowState,
    MemoryAlarm,
    SessionLoad,
    Transition,
    Watermarks,
    memory_watermark,
)
from core.message import Message
from core.reasons import DropReason
from core.session_state import Delivery, SessionState
from core.stats import BrokerStats

MARKS = Watermarks(high_messages=10, low_messages=4, high_bytes=1000, low_bytes=500)


class CountingGate:
    def __init__(self) -> None:
        self.holds = 0
        self.reasons: list[FlowState] = []

    def hold(self, why: FlowState) -> None:
        self.holds += 1
        self.reasons.append(why)

    def release(self, why: FlowState) -> None:
        self.holds -= 1


def test_a_load_goes_over_at_either_high_mark_and_drains_at_both_low_marks() -> None:
    load = SessionLoad(MARKS, enabled=True)
    assert load.update(9, 999, now=1.0) is None and not load.over
    assert load.update(10, 0, now=2.0) is Transition.OVER and load.over
    assert load.progress_at == 2.0
    assert load.update(5, 0, now=3.0) is None and load.over  # between the marks: stays over
    assert load.update(4, 501, now=4.0) is None and load.over  # bytes still above low
    assert load.update(4, 500, now=5.0) is Transition.DRAINED and not load.over
    assert load.update(0, 1000, now=6.0) is Transition.OVER  # the byte mark alone


def test_held_publishers_are_released_once_when_the_load_drains() -> None:
    load = SessionLoad(MARKS, enabled=True)
    first, second = CountingGate(), CountingGate()
    load.update(10, 0, now=0.0)
    load.hold(first)
    load.hold(first)  # a second publish while over: still one hold
    load.hold(second)
    assert (first.holds, second.holds) == (1, 1)
    load.update(4, 0, now=1.0)
    assert (first.holds, second.holds) == (0, 0)
    assert not load.held


def test_a_disabled_load_is_never_over() -> None:
    load = SessionLoad(MARKS, enabled=False)
    assert load.update(10_000, 10**9, now=0.0) is None
    assert not load.over


def test_disable_releases_every_held_publisher() -> None:
    load = SessionLoad(MARKS, enabled=True)
    gate = CountingGate()
    load.update(10, 0, now=0.0)
    load.hold(gate)
    load.disable()
    assert gate.holds == 0 and not load.over and not load.enabled


def test_a_stuck_load_stalls_and_releases_until_it_drains() -> None:
    load = SessionLoad(MARKS, enabled=True)
    gate = CountingGate()
    load.update(10, 0, now=100.0)
    load.hold(gate)
    assert not load.stuck(now=109.9, max_stall=10.0)
    load.progressed(now=105.0)  # an ack: the stall clock starts again
    assert not load.stuck(now=114.9, max_stall=10.0)
    assert load.stuck(now=115.0, max_stall=10.0)
    load.stall()
    assert load.stalled and not load.over and gate.holds == 0
    assert load.update(50, 0, now=116.0) is None and not load.over  # stalled: not over again
    assert load.update(4, 0, now=117.0) is None and not load.stalled  # drained: flows again
    assert load.update(10, 0, now=118.0) is Transition.OVER


def test_watermarks_refuse_a_low_mark_not_below_the_high_mark() -> None:
    with pytest.raises(ValueError, match="low_messages"):
        Watermarks(high_messages=10, low_messages=10)
    with pytest.raises(ValueError, match="low_bytes"):
        Watermarks(high_bytes=10, low_bytes=11)


def test_the_memory_alarm_holds_publishers_while_raised_and_releases_on_clear() -> None:
    alarm = MemoryAlarm(high_watermark=1000)
    gate = CountingGate()
    assert alarm.sample(999) is None
    assert alarm.sample(1000) is True and alarm.raised
    alarm.hold(gate)
    alarm.hold(gate)
    assert gate.holds == 1 and gate.reasons == [FlowState.BLOCKED]
    assert alarm.sample(2000) is None
    assert alarm.sample(999) is False and not alarm.raised
    assert gate.holds == 0


def test_memory_watermark_is_a_fraction_up_to_one_else_bytes() -> None:
    assert memory_watermark(0.4, 1000) == 400
    assert memory_watermark(1.0, 1000) == 1000
    assert memory_watermark(5e6, 1000) == 5_000_000
    with pytest.raises(ValueError):
        memory_watermark(0, 1000)


def test_the_workers_of_a_pool_share_the_memory_watermark_evenly() -> None:
    """Each worker's alarm is at its part of the watermark: the pool as a whole stays under
    it, as one process does (docs/pool.md, "Per-worker limits")."""
    config = OverloadConfig(memory_high_watermark=6e6)
    one = FlowControl(config, BrokerStats())
    three = FlowControl(config, BrokerStats(), workers=3)
    assert one.alarm.high_watermark == 6_000_000
    assert three.alarm.high_watermark == 2_000_000


def test_an_intake_holds_reads_until_its_last_release_and_names_its_state() -> None:
    intake = Intake(max_packets=100, max_bytes=10_000)
    resumed: list[bool] = []
    assert intake.state is FlowState.RUNNING
    intake.hold(FlowState.FLOW)
    assert intake.state is FlowState.FLOW
    intake.hold(FlowState.BLOCKED)  # a session and the memory alarm
    assert intake.full() and intake.state is FlowState.BLOCKED
    intake.on_room = lambda: resumed.append(True)
    intake.release(FlowState.BLOCKED)
    assert intake.full() and not resumed and intake.state is FlowState.FLOW
    intake.release(FlowState.FLOW)
    assert not intake.full() and resumed == [True] and intake.state is FlowState.RUNNING


def test_an_intake_over_its_input_bound_stays_paused_after_the_release() -> None:
    intake = Intake(max_packets=2, max_bytes=10_000)
    resumed: list[bool] = []
    intake.add(2, 10)
    intake.hold(FlowState.FLOW)
    intake.on_room = lambda: resumed.append(True)
    intake.release(FlowState.FLOW)
    assert not resumed  # still 2 packets not handled
    intake.done(2, 10)
    assert resumed == [True]


def _delivery(qos: int, payload: bytes) -> Delivery:
    return Delivery(Message(topic="t", payload=payload, qos=qos), qos, False)


def test_shed_drops_the_oldest_beyond_the_bound_and_the_bytes_to_free() -> None:
    state = SessionState("c", persistent=False, max_inflight=1, max_queued=0)
    deliveries = [_delivery(1, bytes([n]) * 10) for n in range(6)]
    state.deliver(deliveries, connected=True)  # one in flight, five queued
    dropped = state.shed(keep=3, free_bytes=0, qos0=False)
    assert [d.delivery for d in dropped] == deliveries[1:3]
    assert {d.reason for d in dropped} == {DropReason.QUEUE_FULL}
    dropped = state.shed(keep=0, free_bytes=15, qos0=False)  # two 10-byte messages free 15
    assert [d.delivery for d in dropped] == deliveries[3:5]
    assert list(state.queue or ()) == deliveries[5:]
    assert len(state.inflight) == 1  # the window is never shed


def test_shed_with_qos0_drops_every_queued_qos0_as_slow_consumer() -> None:
    state = SessionState("c", persistent=False, max_inflight=1, max_queued=0)
    first, zero, one, zero_again = (
        _delivery(1, b"a"),
        _delivery(0, b"b"),
        _delivery(1, b"c"),
        _delivery(0, b"d"),
    )
    state.deliver([first, one, zero, zero_again], connected=True)  # all but `first` wait
    dropped = state.shed(keep=0, free_bytes=0, qos0=True)
    assert [(d.delivery, d.reason) for d in dropped] == [
        (zero, DropReason.SLOW_CONSUMER),
        (zero_again, DropReason.SLOW_CONSUMER),
    ]
    assert list(state.queue or ()) == [one]


def test_the_overload_check_blocks_publishers_on_the_alarm_and_resumes_them() -> None:
    stats = BrokerStats()
    flow = FlowControl(OverloadConfig(memory_high_watermark=1e6), stats)  # 1 MB
    publisher = Intake(max_packets=100, max_bytes=10_000)
    resumed: list[bool] = []
    flow.check(used_memory=999_999, now=0.0)
    assert not flow.alarm.raised
    flow.check(used_memory=2_000_000, now=1.0)
    assert flow.alarm.raised and stats.memory_alarms == 1
    flow.alarm.hold(publisher)  # what the dispatcher does for a publish meanwhile
    publisher.on_room = lambda: resumed.append(True)
    assert publisher.state is FlowState.BLOCKED and publisher.full()
    flow.check(used_memory=1_500_000, now=2.0)
    assert not resumed  # still over
    flow.check(used_memory=500_000, now=3.0)
    assert resumed == [True] and publisher.state is FlowState.RUNNING
