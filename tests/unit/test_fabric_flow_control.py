"""Flow control across workers, in-process (pool/flow_control.py, docs/overload.md): the
publishing worker's ids and holds, and the receiving worker's gates, wired through the real
frame codec as two workers' links would carry them."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from channel.intake import Intake
from core.flow import FlowState, SessionLoad, Watermarks
from pool.flow_control import Publishers, RemoteGates
from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.frames.flow import FlowHold, FlowRelease

FLOW, BLOCKED = FlowState.FLOW, FlowState.BLOCKED


class TwoWorkers:
    """Worker 0 publishes, workers 1 and 2 hold: frames go through the codec, in order."""

    def __init__(self) -> None:
        self.publishers = Publishers()
        self.up = {1: True, 2: True}
        self.gates = {
            worker: RemoteGates(lambda to, frame, w=worker: self.send(w, to, frame))
            for worker in (1, 2)
        }

    def send(self, sender: int, to: int, frame: Frame) -> bool:
        assert to == 0
        if not self.up[sender]:
            return False
        (decoded,) = FrameDecoder().feed(encode_frame(frame))
        if isinstance(decoded, FlowHold):
            self.publishers.hold(sender, decoded)
        elif isinstance(decoded, FlowRelease):
            self.publishers.release(sender, decoded)
        return True

    def down(self, worker: int) -> None:
        self.up[worker] = False
        self.publishers.peer_down(worker)
        self.gates[worker].peer_down(0)


def test_a_session_on_another_worker_holds_and_releases_the_publisher() -> None:
    pool = TwoWorkers()
    intake = Intake(100, 1 << 20)
    publisher = pool.publishers.id_of(intake)
    assert publisher == pool.publishers.id_of(intake) != 0  # stable, and 0 means none
    load = SessionLoad(Watermarks(high_messages=10, low_messages=5), enabled=True)
    load.update(10, 0, now=0.0)
    assert load.over
    gate = pool.gates[1].gate(0, publisher)
    load.hold(gate)
    assert intake.full() and intake.state is FLOW
    # Later batches from the same publisher find the same gate: held once per session.
    assert pool.gates[1].gate(0, publisher) is gate
    load.hold(pool.gates[1].gate(0, publisher))
    assert intake.held == 1
    load.update(5, 0, now=1.0)  # drained
    assert intake.held == 0 and not intake.full()
    assert len(pool.gates[1]) == 0  # a gate holding nothing is not kept


def test_holds_from_two_workers_and_the_memory_alarm_are_counted_apart() -> None:
    pool = TwoWorkers()
    intake = Intake(100, 1 << 20)
    publisher = pool.publishers.id_of(intake)
    pool.gates[1].gate(0, publisher).hold(FLOW)
    pool.gates[2].gate(0, publisher).hold(BLOCKED)
    assert intake.held == 2 and intake.state is BLOCKED
    pool.gates[2].gate(0, publisher).release(BLOCKED)
    assert intake.held == 1 and intake.state is FLOW
    pool.gates[1].gate(0, publisher).release(FLOW)
    assert intake.held == 0


def test_a_worker_going_down_releases_what_it_held_and_its_gates_fall_silent() -> None:
    pool = TwoWorkers()
    intake = Intake(100, 1 << 20)
    publisher = pool.publishers.id_of(intake)
    gate = pool.gates[1].gate(0, publisher)
    gate.hold(FLOW)
    gate.hold(FLOW)
    assert pool.publishers.held_by(1) == 2
    pool.down(1)
    assert intake.held == 0 and pool.publishers.held_by(1) == 0
    # A session there that drains later sends nothing that could release another hold.
    pool.up[1] = True  # the worker is back, its ids mean other publishers now
    other = pool.gates[2].gate(0, publisher)
    other.hold(FLOW)
    gate.release(FLOW)
    assert intake.held == 1


def test_a_release_without_its_hold_and_a_gone_publisher_are_ignored() -> None:
    pool = TwoWorkers()
    intake = Intake(100, 1 << 20)
    publisher = pool.publishers.id_of(intake)
    pool.publishers.release(1, FlowRelease(publisher, "flow"))
    assert intake.held == 0
    pool.publishers.hold(1, FlowHold(publisher, "flow"))
    del intake
    gc.collect()
    pool.publishers.hold(1, FlowHold(publisher, "flow"))  # the connection closed meanwhile
    pool.publishers.release(1, FlowRelease(publisher, "flow"))
    pool.publishers.release(1, FlowRelease(publisher, "flow"))
    assert pool.publishers.held_by(1) == 0


steps = st.lists(
    st.tuples(
        st.sampled_from(["hold", "release", "down"]),
        st.sampled_from([1, 2]),
        st.sampled_from([FLOW, BLOCKED]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_the_publisher_is_held_exactly_while_a_live_worker_holds_it(
    script: list[tuple[str, int, FlowState]],
) -> None:
    """However holds, releases and worker deaths interleave, the intake's hold count is the
    number of holds live workers placed and have not released; never negative."""
    pool = TwoWorkers()
    intake = Intake(100, 1 << 20)
    publisher = pool.publishers.id_of(intake)
    outstanding: dict[tuple[int, FlowState], int] = {}
    for action, worker, why in script:
        gate = pool.gates[worker].gate(0, publisher)
        key = (worker, why)
        if action == "hold":
            gate.hold(why)
            if pool.up[worker]:
                outstanding[key] = outstanding.get(key, 0) + 1
        elif action == "release" and outstanding.get(key):
            gate.release(why)
            outstanding[key] -= 1
        elif action == "down":
            pool.down(worker)
            for held in [k for k in outstanding if k[0] == worker]:
                del outstanding[held]
            pool.up[worker] = True  # restarted at once: a new life, nothing held
            pool.gates[worker] = RemoteGates(lambda to, frame, w=worker: pool.send(w, to, frame))
        assert intake.held == sum(outstanding.values())
        assert intake.blocked == sum(n for (_w, r), n in outstanding.items() if r is BLOCKED)
