"""FiguresCache: one reading of the pool's figures per second, shared by concurrent requests."""

from __future__ import annotations

from typing import Any

import gevent
import pytest

from admin import figures_cache
from admin.figures_cache import FiguresCache


class Readings:
    """Stands for `read_pool_figures`: counts its calls, each taking `seconds`."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.calls = 0
        self.seconds = seconds

    def __call__(self, _broker: Any) -> Any:
        self.calls += 1
        gevent.sleep(self.seconds)  # a pool's gathering waits for the other workers
        return (f"figures {self.calls}", [])


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> Readings:
    reader = Readings()
    monkeypatch.setattr(figures_cache, "read_pool_figures", reader)
    return reader


def test_back_to_back_reads_share_one_reading_until_it_is_old(readings: Readings) -> None:
    cache = FiguresCache(broker=None, max_age=0.2)  # type: ignore[arg-type]
    first = cache.read()
    assert all(cache.read() is first for _ in range(1000))
    assert readings.calls == 1
    gevent.sleep(0.25)
    assert cache.read() == ("figures 2", [])
    assert readings.calls == 2


def test_requests_during_a_reading_wait_for_it(readings: Readings) -> None:
    readings.seconds = 0.05
    cache = FiguresCache(broker=None, max_age=0.0)  # type: ignore[arg-type]
    greenlets = [gevent.spawn(cache.read) for _ in range(20)]
    gevent.joinall(greenlets, timeout=5)
    assert [g.value for g in greenlets] == [("figures 1", [])] * 20
    assert readings.calls == 1


def test_a_failed_reading_fails_its_waiters_and_the_next_read_tries_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []

    def failing(_broker: Any) -> Any:
        calls.append(1)
        gevent.sleep(0.02)
        if len(calls) == 1:
            raise RuntimeError("worker gone")
        return ("figures", [])

    monkeypatch.setattr(figures_cache, "read_pool_figures", failing)
    cache = FiguresCache(broker=None)  # type: ignore[arg-type]
    greenlets = [gevent.spawn(cache.read) for _ in range(3)]
    gevent.joinall(greenlets, timeout=5)
    assert all(isinstance(g.exception, RuntimeError) for g in greenlets)
    assert cache.read() == ("figures", [])
    assert len(calls) == 2
