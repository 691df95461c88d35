"""net.rate_limited_log: the first event of a kind is logged at once, the rest as counts."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from net.rate_limited_log import RateLimitedLog


class FakeTimers:
    """A clock and a `spawn_later` stand-in that the test advances by hand."""

    def __init__(self) -> None:
        self.now = 100.0
        self.due: list[tuple[float, Any, tuple[Any, ...]]] = []

    def clock(self) -> float:
        return self.now

    def schedule(self, seconds: float, function: Any, *args: Any) -> None:
        self.due.append((self.now + seconds, function, args))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        ready = [entry for entry in self.due if entry[0] <= self.now]
        self.due = [entry for entry in self.due if entry[0] > self.now]
        for _at, function, args in ready:
            function(*args)


@pytest.fixture
def timers() -> FakeTimers:
    return FakeTimers()


def make_log(timers: FakeTimers) -> RateLimitedLog:
    return RateLimitedLog(
        logging.getLogger("test.ratelog"), 1.0, clock=timers.clock, schedule=timers.schedule
    )


def test_first_event_logged_at_once_then_one_summary_per_interval(
    timers: FakeTimers, caplog: pytest.LogCaptureFixture
) -> None:
    log = make_log(timers)
    with caplog.at_level(logging.INFO, logger="test.ratelog"):
        log.note("queue_full", 3, "dropped 3 for a")
        for i in range(500):
            log.note("queue_full", 2, f"dropped 2 for c{i}")
        assert [r.getMessage() for r in caplog.records] == ["dropped 3 for a"]
        timers.advance(1.0)
        assert caplog.records[-1].getMessage() == (
            "queue_full: 1000 more in the last 1.0 s; latest: dropped 2 for c499"
        )
        assert caplog.records[-1].levelno == logging.WARNING
        timers.advance(1.0)  # a quiet interval: no line, and the key is forgotten
        assert len(caplog.records) == 2
        log.note("queue_full", 1, "dropped 1 for z")
        assert caplog.records[-1].getMessage() == "dropped 1 for z"
        assert len(caplog.records) == 3


def test_keys_are_limited_separately(timers: FakeTimers, caplog: pytest.LogCaptureFixture) -> None:
    log = make_log(timers)
    with caplog.at_level(logging.INFO, logger="test.ratelog"):
        log.note("a", 1, "first a", logging.INFO)
        log.note("b", 1, "first b", logging.INFO)
        log.note("a", 1, "second a", logging.INFO)
        assert [r.getMessage() for r in caplog.records] == ["first a", "first b"]
        timers.advance(1.0)
        assert [r.getMessage() for r in caplog.records][2:] == [
            "a: 1 more in the last 1.0 s; latest: second a"
        ]
        assert caplog.records[-1].levelno == logging.INFO


def test_summary_takes_the_highest_level_seen(
    timers: FakeTimers, caplog: pytest.LogCaptureFixture
) -> None:
    log = make_log(timers)
    with caplog.at_level(logging.INFO, logger="test.ratelog"):
        log.note("k", 1, "info", logging.INFO)
        log.note("k", 1, "warning", logging.WARNING)
        log.note("k", 1, "info again", logging.INFO)
        timers.advance(1.0)
        assert caplog.records[-1].levelno == logging.WARNING
        assert caplog.records[-1].getMessage().startswith("k: 2 more")
