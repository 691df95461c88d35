"""The garbage-collection schedule (core/gc_schedule.py), pure, and its event-loop check
(actors/idle_gc.py) against the real collector and a real gevent hub."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator

import gevent
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.idle_gc import IdleGc
from core.gc_schedule import GcSchedule

SCHEDULE = GcSchedule(idle_young=1_000, busy_share=0.5, backstop=(100_000, 50, 100))


@pytest.mark.parametrize(
    ("counts", "cpu_share", "due"),
    [
        ((999, 0, 0), 0.0, None),  # too few young objects to be worth a scan
        ((1_000, 0, 0), 0.0, 0),
        ((50_000, 0, 0), 0.49, 0),
        ((50_000, 0, 0), 0.5, None),  # busy: wait for a quiet moment
        ((50_000, 0, 0), 1.7, None),  # busy on several threads
        ((1_000, 50, 0), 0.1, 0),  # CPython collects the middle one only past its threshold
        ((1_000, 51, 0), 0.1, 1),
        ((1_000, 51, 100), 0.1, 1),
        ((1_000, 3, 101), 0.1, 2),  # the oldest generation due wins
        ((1_000, 51, 101), 0.1, 2),
        ((999, 51, 101), 0.0, None),  # the older counts only move when young ones are collected
    ],
)
def test_generation_due(counts: tuple[int, int, int], cpu_share: float, due: int | None) -> None:
    assert SCHEDULE.generation_due(counts, cpu_share) == due


@given(
    young=st.integers(0, 10**6),
    middle=st.integers(0, 200),
    old=st.integers(0, 200),
    share=st.floats(0, 4, allow_nan=False),
)
def test_a_collection_only_when_quiet_and_worth_it(
    young: int, middle: int, old: int, share: float
) -> None:
    due = SCHEDULE.generation_due((young, middle, old), share)
    if share >= SCHEDULE.busy_share or young < SCHEDULE.idle_young:
        assert due is None
    else:
        assert due == (2 if old > 100 else 1 if middle > 50 else 0)


@pytest.mark.parametrize(
    "arguments",
    [
        {"idle_young": 0},
        {"idle_young": 500_000},  # above the backstop: the backstop would always come first
        {"backstop": (400_000, 0, 100)},
        {"busy_share": 0.0},
    ],
)
def test_a_schedule_that_cannot_work_is_refused(arguments: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        GcSchedule(**arguments)  # type: ignore[arg-type]


class Node:
    """An object in a reference cycle: freed only by the cyclic collector."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """CPython's own trigger off, so only the check under test collects."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def garbage_cycles(count: int) -> weakref.ref[Node]:
    """`count` unreachable cycles; a weak reference to one of them."""
    nodes = [Node() for _ in range(count)]
    probe = weakref.ref(nodes[0])
    del nodes
    return probe


def test_the_check_collects_cycles_when_the_process_is_quiet(collector_paused: None) -> None:
    check = IdleGc(GcSchedule(idle_young=1_000), period=0.02)
    probe = garbage_cycles(5_000)
    assert probe() is not None  # reference counting alone cannot free a cycle
    check.start()
    try:
        gevent.sleep(0.2)
    finally:
        check.stop()
    assert probe() is None
    assert check.collections[0] >= 1


def test_the_check_waits_while_the_process_is_busy(collector_paused: None) -> None:
    # busy from a fifth of a core: the spinning below stays busy on a loaded test machine
    check = IdleGc(GcSchedule(idle_young=1_000, busy_share=0.2), period=0.02)
    probe = garbage_cycles(5_000)
    check.start()
    try:
        busy_until = time.monotonic() + 0.3
        while time.monotonic() < busy_until:  # a whole core, yielding to the loop's timers
            spin_until = time.monotonic() + 0.002
            while time.monotonic() < spin_until:
                pass
            gevent.sleep(0)
        assert probe() is not None
        assert check.collections == [0, 0, 0]
        gevent.sleep(0.2)  # quiet again: the next check collects
    finally:
        check.stop()
    assert probe() is None
