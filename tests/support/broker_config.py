"""Module-scoped brokers with their own TOML config, and waiting for a broker log line.

`conftest.broker_factory` starts one broker per test; a module whose tests share one special
config (small limits, a small in-flight window) uses `running_broker` in a module fixture
instead, so the broker starts once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.broker_process import BrokerProcess, start_broker


@contextmanager
def running_broker(tmp_dir: Path, config_text: str) -> Iterator[BrokerProcess]:
    """A broker started with `config_text`; on exit it must stop cleanly (exit code 0)."""
    process = start_broker(tmp_dir, config_text)
    try:
        yield process
    finally:
        exit_code = process.stop()
    assert exit_code == 0, process.log()


def wait_for_log(broker: BrokerProcess, text: str, timeout: float = 3.0) -> str:
    """The first broker log line containing `text`; AssertionError if none appears in time."""
    deadline = time.monotonic() + timeout
    while True:
        for line in broker.log().splitlines():
            if text in line:
                return line
        if time.monotonic() >= deadline:
            raise AssertionError(f"no broker log line contains {text!r}:\n{broker.log()}")
        time.sleep(0.02)


def wait_for_log_lines(
    broker: BrokerProcess, text: str, count: int, timeout: float = 3.0
) -> list[str]:
    """The first `count` log lines containing `text` (one per worker of a pool, say)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in broker.log().splitlines() if text in line]
        if len(lines) >= count:
            return lines[:count]
        if time.monotonic() >= deadline:
            raise AssertionError(f"fewer than {count} log lines contain {text!r}:\n{broker.log()}")
        time.sleep(0.02)
