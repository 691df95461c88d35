"""Refused-CONNECT delays across a pool in-process (pool/auth_failures.py): each
address's refusals are counted at its home worker, so a client sees the delays one process
gives it, wherever the kernel put its connections.

The workers' `PoolAuthFailures` are joined by a loopback that carries every frame through
the real codec and delivers what is in transit after each event (links are fast next to a
CONNACK); hypothesis compares the delays with one process's `AuthFailureDelays`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.auth_failures import AuthFailureDelays
from pool.auth_failures import ANSWER_TIMEOUT, PoolAuthFailures
from pool.frames.admission import AuthFailed, AuthFailing, AuthFailures, AuthSucceeded
from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.ownership import home_of

SETTINGS = settings(max_examples=150, deadline=None)
ADDRESSES = ("10.0.0.1", "10.0.0.2", "192.168.1.7", "127.0.0.1")
BASE, MAXIMUM, FORGET = 0.1, 2.0, 30.0


def delays() -> AuthFailureDelays:
    return AuthFailureDelays(BASE, MAXIMUM, forget_after=FORGET)


class Pool:
    def __init__(self, workers: int) -> None:
        self.now = 0.0
        self.linked = set(range(workers))
        self.sent: list[tuple[int, int, Frame]] = []  # (from, to, frame), every frame sent
        self._in_transit: list[tuple[int, int, Frame]] = []
        self.timers: list[tuple[float, Callable[[], object]]] = []
        self.workers = [
            PoolAuthFailures(delays(), w, workers, lambda s, f: self.timers.append((s, f)))
            for w in range(workers)
        ]
        for worker, part in enumerate(self.workers):
            part.send = self._sender(worker)
            part.broadcast = self._broadcaster(worker)

    def _sender(self, origin: int) -> Callable[[int, Frame], bool]:
        def send(worker: int, frame: Frame) -> bool:
            if worker not in self.linked or origin not in self.linked:
                return False
            (decoded,) = FrameDecoder().feed(encode_frame(frame))  # as a link carries it
            self.sent.append((origin, worker, decoded))
            self._in_transit.append((origin, worker, decoded))
            return True

        return send

    def _broadcaster(self, origin: int) -> Callable[[Frame], object]:
        def broadcast(frame: Frame) -> None:
            for worker in self.linked - {origin}:
                self._sender(origin)(worker, frame)

        return broadcast

    def deliver(self) -> None:
        while self._in_transit:
            origin, worker, frame = self._in_transit.pop(0)
            assert isinstance(frame, AuthFailed | AuthFailures | AuthFailing | AuthSucceeded)
            self.workers[worker].frame_received(origin, frame, self.now)

    def refused(self, worker: int, address: str) -> list[float]:
        """The delays answered for a refused CONNECT on `worker` (once delivered)."""
        answers: list[float] = []
        self.workers[worker].refused(address, self.now, answers.append)
        self.deliver()
        return answers


events = st.lists(
    st.tuples(
        st.integers(0, 2),  # the worker the kernel picked (modulo the pool's size)
        st.sampled_from(ADDRESSES),
        st.booleans(),  # refused (True) or accepted
        st.sampled_from([0.0, 0.5, 5.0, 40.0]),  # seconds since the previous CONNECT
    ),
    max_size=50,
)


@SETTINGS
@given(st.integers(2, 3), events)
def test_a_pool_delays_refusals_as_one_process_does(
    workers: int, steps: list[tuple[int, str, bool, float]]
) -> None:
    pool = Pool(workers)
    one = delays()
    for worker, address, refused, pause in steps:
        pool.now += pause
        if refused:
            assert pool.refused(worker % workers, address) == [one.failed(address, pool.now)]
        else:
            one.succeeded(address)
            pool.workers[worker % workers].succeeded(address)
            pool.deliver()


def test_refusals_homed_elsewhere_are_counted_at_home_and_answered_with_the_count() -> None:
    pool = Pool(2)
    address = "10.0.0.1"
    home = home_of(address, 2)
    other = 1 - home
    assert pool.refused(other, address) == [0.0]
    assert pool.refused(home, address) == [0.1]
    assert pool.refused(other, address) == [0.2]
    assert pool.workers[other].delays.failed("x", 0.0) == 0.0  # nothing counted there
    assert (other, home, AuthFailed(1, address)) in pool.sent
    assert (home, other, AuthFailures(1, 1)) in pool.sent
    # The first refusal told every worker; a later one did not.
    assert [frame for _, _, frame in pool.sent if isinstance(frame, AuthFailing)] == [
        AuthFailing(address)
    ]


def test_an_accepted_connect_costs_no_frame_unless_its_address_was_refused() -> None:
    pool = Pool(2)
    address = "10.0.0.1"
    home = home_of(address, 2)
    pool.workers[1 - home].succeeded(address)
    pool.workers[home].succeeded(address)
    assert pool.sent == []
    pool.refused(home, address)
    pool.refused(home, address)
    pool.workers[1 - home].succeeded(address)  # told by the home's AuthFailing
    pool.deliver()
    assert pool.sent[-1] == (1 - home, home, AuthSucceeded(address))
    assert pool.refused(home, address) == [0.0]  # started over


def test_an_unlinked_home_leaves_the_counting_here_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = Pool(2)
    address = "10.0.0.1"
    home = home_of(address, 2)
    pool.linked.discard(home)
    with caplog.at_level(logging.WARNING, "pool.auth_failures"):
        answers = [pool.refused(1 - home, address)[0] for _ in range(3)]
    assert answers == [0.0, 0.1, 0.2]
    assert len(caplog.records) == 1 and f"worker {home} is not linked" in caplog.text
    assert pool.sent == []


def test_a_home_that_goes_down_or_keeps_silent_leaves_the_refusal_counted_here() -> None:
    pool = Pool(2)
    address = "10.0.0.1"
    home = home_of(address, 2)
    other = pool.workers[1 - home]
    silent: list[float] = []
    other.refused(address, 0.0, silent.append)  # sent, never delivered
    other.refused(address, 0.0, silent.append)
    assert silent == []
    other.peer_down(home, 0.0)
    assert silent == [0.0, 0.1]  # counted here, in order
    timed_out: list[float] = []
    other.peer_up(home)
    other.refused(address, 0.0, timed_out.append)
    seconds, fire = pool.timers[-1]
    assert seconds == ANSWER_TIMEOUT
    fire()
    assert timed_out == [0.2]
    pool.deliver()  # the late answer finds nobody waiting
    assert timed_out == [0.2]
