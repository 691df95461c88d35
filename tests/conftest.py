"""Shared fixtures: a broker subprocess on a free port (per module, and one-off per test), and
a NATS server per module for the cluster's tests (`nats`).

Every test starts with the test process's event-loop clock read afresh (`current_loop_time`):
between in-process tests the thread blocks outside gevent, and a timer would otherwise count
from the loop's last reading.

`workers` is the pool mode of a module's brokers: every integration test runs with 1 (one
process) and with 2 worker processes (tests/integration/conftest.py).

Under CI (`CI` set, as `.ci/run` is run) hypothesis draws its examples from a fixed seed, so a
green main stays green; developers' runs keep exploring new examples every time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import gevent
import pytest
from hypothesis import settings

from tests.support.broker_process import BrokerProcess, pool_mode, start_broker
from tests.support.nats_server import NatsServer

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def current_loop_time() -> None:
    """Every test starts with the event loop's clock read afresh.

    libev counts a timer from the time it read at its last turn, and the test process's
    loop turns only while an in-process test waits on it: between such tests the thread
    blocks outside gevent (subprocess brokers, blocking clients) for minutes. A deadline an
    in-process test then starts (a connection's 10 s connect timeout) would count from that
    old reading and expire at the loop's next turn, before the test's first read.
    """
    gevent.get_hub().loop.update_now()


@pytest.fixture(scope="module", params=[1, 2], ids=["1-worker", "2-workers"])
def workers(request: pytest.FixtureRequest) -> Iterator[int]:
    """The number of worker processes of the brokers this module's tests start."""
    pool_mode.workers = request.param
    yield request.param
    pool_mode.workers = 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[BrokerProcess]:
    """One broker shared by the tests of a module; it must shut down cleanly (exit 0)."""
    process = start_broker(tmp_path_factory.mktemp("broker"))
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture
def broker_factory(tmp_path: Path, workers: int) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers with their own config for one test; all are stopped afterwards."""
    started: list[BrokerProcess] = []

    def factory(config_text: str | None = None, *extra_args: str) -> BrokerProcess:
        process = start_broker(tmp_path, config_text, extra_args)
        started.append(process)
        return process

    yield factory
    for process in started:
        if process.process.poll() is None:
            process.stop()


@pytest.fixture(scope="module")
def nats() -> Iterator[NatsServer]:
    """A NATS server with JetStream on a free loopback port, for one test module."""
    server = NatsServer()
    server.start()
    yield server
    server.remove()
