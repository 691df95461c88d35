"""Shared fixtures: a broker subprocess on a free port (per module, and one-off per test).

Under CI (`CI` set, as `.ci/run` is run) hypothesis draws its examples from a fixed seed, so a
green main stays green; developers' runs keep exploring new examples every time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.broker_process import BrokerProcess, start_broker

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by the tests of a module; it must shut down cleanly (exit 0)."""
    process = start_broker(tmp_path_factory.mktemp("broker"))
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
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
