"""The admin API of a pool when a worker does not answer: the answer comes after the
gathering's timeout (2 s), leaves that worker out and says so (docs/pool.md, "The
operations surface"). A worker stopped with SIGSTOP is linked but silent.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.admin import Admin, http_config
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import unique
from tests.support.ports import free_port
from tests.support.workers import connect_on_worker, worker_pid


@pytest.fixture(scope="module")
def workers() -> int:
    """These tests start their own pool of two workers: one run."""
    return 2


@pytest.fixture
def pool_admin(tmp_path: Path) -> Iterator[Admin]:
    port = free_port()
    broker = start_broker(tmp_path, http_config(port), ("--workers", "2"))
    yield Admin(broker, port)
    assert broker.stop(timeout=10) == 0, broker.log()


def timed_get(admin: Admin, path: str) -> tuple[dict, float]:
    started = time.monotonic()
    answer = admin.get(path)
    return answer, time.monotonic() - started


def test_a_silent_worker_is_left_out_and_named_then_counted_again(pool_admin: Admin) -> None:
    broker: BrokerProcess = pool_admin.broker
    prefix = unique("silent")
    on_0, _ = connect_on_worker(broker, f"{prefix}-0", 0, 2)
    on_1, _ = connect_on_worker(broker, f"{prefix}-1", 1, 2)
    assert [
        c["clientid"] for c in pool_admin.get(f"/api/v1/clients?clientid={prefix}")["data"]
    ] == [f"{prefix}-0", f"{prefix}-1"]
    pid = worker_pid(broker, 1)
    os.kill(pid, signal.SIGSTOP)
    try:
        page, took = timed_get(pool_admin, f"/api/v1/clients?clientid={prefix}")
        assert 1.5 < took < 4, took  # the gathering's timeout, then worker 0's part
        assert [c["clientid"] for c in page["data"]] == [f"{prefix}-0"]
        assert page["missing_workers"] == [1]
        assert pool_admin.get("/api/v1/stats")["missing_workers"] == [1]
        # Not found where it was asked, and unknown where it was not: 503, not 404.
        kick = pool_admin.request("DELETE", f"/api/v1/clients/{prefix}-1")
        assert kick.status == 503
        assert "workers [1] did not answer in time" in kick.json()["error"]
        wait_for_log(broker, "pool: workers [1] gave no answer to 'clients' within 2 s")
        on_1.expect_nothing(0.2)  # a stopped worker closes nothing
    finally:
        os.kill(pid, signal.SIGCONT)
    # The kick was sent anyway: the worker does it once it reads it.
    assert on_1.is_closed_by_broker()
    deadline = time.monotonic() + 5
    while True:  # its row goes once its session is detached
        page, took = timed_get(pool_admin, f"/api/v1/clients?clientid={prefix}")
        assert "missing_workers" not in page and took < 1.5
        if [c["clientid"] for c in page["data"]] == [f"{prefix}-0"]:
            break
        assert time.monotonic() < deadline, page
        time.sleep(0.05)
    on_0.close()
    on_1.close()
