"""Flapping detection across a pool in-process (pool/admission.py): each client id's
CONNECTs are counted at its home worker, so a client sees what one process shows it.

The workers' `PoolAdmission`s are joined by a loopback that carries every frame through the
real codec; bans are replicated as `PoolOps` replicates them. A CONNECT on worker `w` is
what the pool does with it: `check` on `w` (the bans there; the count at home), then, if it
passed, the claim its home answers (`client_id_refusal`: `ClaimRefused`), which follows the
`Connecting` on the same link. Hypothesis compares that with one process's `Admission`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import actors.admission
import pool.admission
from actors.admission import Admission
from actors.config import FlappingConfig
from core.bans import Ban, BanKind
from pool.admission import PoolAdmission
from pool.frames.admission import Connecting
from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.ownership import home_of
from tests.unit.test_ops_units import client

SETTINGS = settings(max_examples=150, deadline=None)
CLIENT_IDS = ("a", "b", "c", "flappy")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


@contextmanager
def clocked(clock: Clock) -> Iterator[None]:
    """The admissions read `clock` for the time."""
    with (
        mock.patch.object(actors.admission, "time", clock),
        mock.patch.object(pool.admission, "time", clock),
    ):
        yield


class Replica:
    """Bans made on one worker reach the others (as `PoolOps` broadcasts them)."""

    def __init__(self, pool: Pool, worker: int) -> None:
        self._pool = pool
        self._worker = worker

    def ban_added(self, ban: Ban) -> None:
        for worker, admission in enumerate(self._pool.admissions):
            if worker != self._worker:
                admission.add(ban, replicate=False)

    def ban_removed(self, kind: BanKind, value: str) -> None:
        for worker, admission in enumerate(self._pool.admissions):
            if worker != self._worker:
                admission.remove(kind, value, replicate=False)

    def settle(self) -> None:
        """Applied at once above: nothing to wait for."""


class Pool:
    def __init__(self, workers: int, flapping: FlappingConfig, clock: Clock) -> None:
        self.clock = clock
        self.frames: list[tuple[int, Frame]] = []  # every frame sent
        self._in_transit: list[tuple[int, Connecting]] = []
        self.linked = set(range(workers))
        self.admissions = [PoolAdmission(flapping, None, w, workers) for w in range(workers)]
        for worker, admission in enumerate(self.admissions):
            admission.send = self._send
            admission.replica = Replica(self, worker)

    def _send(self, worker: int, frame: Frame) -> bool:
        if worker not in self.linked:
            return False
        (decoded,) = FrameDecoder().feed(encode_frame(frame))  # as a link carries it
        assert isinstance(decoded, Connecting)
        self.frames.append((worker, decoded))
        self._in_transit.append((worker, decoded))
        return True

    def deliver(self) -> None:
        """The frames in transit arrive: each home's node counts its `Connecting`s."""
        for worker, frame in self._in_transit:
            self.admissions[worker].count(frame.client_id, self.clock.now)
        self._in_transit.clear()

    def connect(self, worker: int, client_id: str) -> str | None:
        """Why the pool refuses a CONNECT of `client_id` that worker `worker` accepted."""
        refused = self.admissions[worker].check(client(client_id))
        self.deliver()  # the claim would follow `Connecting` on the link to the home
        if refused is not None:
            return refused
        home = home_of(client_id, len(self.admissions))
        return self.admissions[home].client_id_refusal(client_id, self.clock.now)


connects = st.lists(
    st.tuples(
        st.integers(0, 2),  # the worker the kernel picked (modulo the pool's size)
        st.sampled_from(CLIENT_IDS),
        st.sampled_from([0.0, 0.1, 0.5, 1.0, 3.0]),  # seconds since the previous CONNECT
    ),
    max_size=40,
)


@SETTINGS
@given(
    st.integers(2, 3),
    st.integers(1, 4),
    st.sampled_from([1.0, 2.0, 5.0]),
    st.sampled_from([0.5, 2.0]),
    connects,
)
def test_a_pool_refuses_the_connects_one_process_refuses(
    workers: int,
    max_connects: int,
    window: float,
    ban_time: float,
    steps: list[tuple[int, str, float]],
) -> None:
    flapping = FlappingConfig(max_connects, window, ban_time)
    clock = Clock()
    pool = Pool(workers, flapping, clock)
    one = Admission(flapping, None)
    with clocked(clock):
        for worker, client_id, delay in steps:
            clock.now += delay
            expected = one.check(client(client_id))
            assert pool.connect(worker % workers, client_id) == expected, (worker, client_id)


def test_connects_homed_elsewhere_are_counted_at_home_only() -> None:
    clock = Clock()
    pool = Pool(2, FlappingConfig(max_connects=3, window=10, ban_time=60), clock)
    home = home_of("flappy", 2)
    with clocked(clock):
        assert pool.connect(1 - home, "flappy") is None
        assert pool.connect(home, "flappy") is None
        assert pool.frames == [(home, Connecting("flappy"))]  # the home counts its own
        assert pool.admissions[1 - home].table.get(BanKind.CLIENT_ID, "flappy") is None
        # The 3rd, on the other worker: that worker has no ban yet when it admits it; the
        # home, told first, bans the id and refuses the claim that follows.
        assert pool.admissions[1 - home].check(client("flappy")) is None
        pool.deliver()
        reason = pool.admissions[home].client_id_refusal("flappy", clock.now)
        assert reason == "banned (clientid flappy: flapping)"
        assert pool.admissions[1 - home].table.get(BanKind.CLIENT_ID, "flappy") is not None


def test_connects_are_counted_where_they_land_while_the_home_is_unlinked() -> None:
    clock = Clock()
    pool = Pool(2, FlappingConfig(max_connects=2, window=10, ban_time=60), clock)
    home = home_of("flappy", 2)
    pool.linked.discard(home)
    with clocked(clock):
        assert pool.connect(1 - home, "flappy") is None
        assert pool.admissions[1 - home].check(client("flappy")) is not None
    assert pool.frames == []


def test_without_flapping_detection_nothing_is_sent() -> None:
    clock = Clock()
    pool = Pool(2, FlappingConfig(), clock)
    with clocked(clock):
        for client_id in CLIENT_IDS:
            for worker in (0, 1):
                assert pool.connect(worker, client_id) is None
    assert pool.frames == []
