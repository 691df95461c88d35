"""The SQLite store's own process (`store.process_store`): real child processes, real kills.

The broker-level guarantees (restart, SIGKILL, unusable files) are in test_persistence.py;
these check what is special about running the store in a process of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.message import Message
from store import (
    SQLITE_FILE_NAME,
    DeleteRetained,
    ProcessStore,
    PutRetained,
    StoreError,
    StoreUnavailableError,
)
from tests.support.broker_process import start_broker


def _retained(topic: str) -> Message:
    return Message(topic=topic, payload=topic.encode(), qos=1, retain=True, message_id=1)


def _exited(pid: int) -> bool:
    """Gone, or a zombie (exited; whether it is reaped depends on the container's init)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def _exits_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _exited(pid):
            return True
        time.sleep(0.02)
    return False


def test_a_killed_store_process_fails_the_batch_and_the_next_call_restarts_it(
    tmp_path: Path,
) -> None:
    store = ProcessStore(tmp_path / SQLITE_FILE_NAME)
    store.apply([PutRetained(_retained("a"))])
    first = store.process_id
    assert first is not None
    os.kill(first, signal.SIGKILL)
    with pytest.raises(StoreError, match="store process ended unexpectedly"):
        store.apply([PutRetained(_retained("b"))])
    # The writer retries the same batch; a new process reopens the file and applies it.
    store.apply([PutRetained(_retained("b"))])
    assert store.process_id not in (None, first)
    assert sorted(m.topic for m in store.load().retained) == ["a", "b"]
    store.close()
    reopened = ProcessStore(tmp_path / SQLITE_FILE_NAME)
    assert sorted(m.topic for m in reopened.load().retained) == ["a", "b"]
    reopened.close()


def test_the_store_process_ignores_terminal_and_service_signals(tmp_path: Path) -> None:
    # Ctrl-C or a service manager signals the whole process group; the broker must still be
    # able to commit while it shuts down.
    store = ProcessStore(tmp_path / SQLITE_FILE_NAME)
    pid = store.process_id
    assert pid is not None
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        os.kill(pid, signum)
    time.sleep(0.2)
    store.apply([PutRetained(_retained("a")), DeleteRetained("a"), PutRetained(_retained("c"))])
    assert [m.topic for m in store.load().retained] == ["c"]
    assert store.process_id == pid
    store.close()
    assert _exits_within(pid, 5.0)


def test_an_unusable_file_is_reported_with_the_store_process_reason(tmp_path: Path) -> None:
    path = tmp_path / SQLITE_FILE_NAME
    path.write_bytes(b"not a database at all\n" * 100)
    with pytest.raises(StoreError, match="not an SQLite database"):
        ProcessStore(path)
    assert path.read_bytes() == b"not a database at all\n" * 100


def test_the_store_process_ends_with_its_broker_even_after_sigkill(tmp_path: Path) -> None:
    broker = start_broker(tmp_path)
    try:
        match = re.search(r"the store process \(pid (\d+)\) is ready", broker.log())
        assert match is not None, broker.log()
        store_pid = int(match.group(1))
        assert not _exits_within(store_pid, 0.2)
    finally:
        broker.stop(signal.SIGKILL)
    # Its socket to the broker closed: it closes the store and exits, freeing the file for
    # the next broker (the store locks it exclusively).
    assert _exits_within(store_pid, 5.0)
    restarted = start_broker(tmp_path)
    assert restarted.stop() == 0


def _pool_store_process(path: Path, listen: Path, parent_r: int) -> subprocess.Popen[bytes]:
    """A pool's store process (as the supervisor starts it), listening once this returns."""
    with contextlib.suppress(FileNotFoundError):
        listen.unlink()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "store.store_process",
            "--listen",
            str(listen),
            "--parent-fd",
            str(parent_r),
            str(path),
        ],
        pass_fds=(parent_r,),
        cwd=Path(__file__).resolve().parents[2],
    )
    deadline = time.monotonic() + 15
    while not listen.exists():
        assert process.poll() is None and time.monotonic() < deadline, "it did not listen"
        time.sleep(0.02)
    return process


def test_a_pool_worker_waits_a_bounded_time_for_its_store_process_and_reconnects(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, listen = tmp_path / SQLITE_FILE_NAME, tmp_path / "store.sock"
    parent_r, parent_w = os.pipe()
    first = _pool_store_process(path, listen, parent_r)
    store = ProcessStore(path, connect=listen)
    store.apply([PutRetained(_retained("a"))])
    first.kill()
    first.wait()
    with caplog.at_level(logging.INFO, logger="store.process_store"):
        with pytest.raises(StoreUnavailableError, match="closed the connection"):
            store.apply([PutRetained(_retained("b"))])
        began = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            store.load_session("nobody", wait=0.5)  # nobody listens: at most the wait
        assert 0.4 < time.monotonic() - began < 1.5
        # Back during a load's wait: the load is answered.
        second: list[subprocess.Popen[bytes]] = []
        restart = threading.Timer(
            0.3, lambda: second.append(_pool_store_process(path, listen, parent_r))
        )
        restart.start()
        assert store.load_session("nobody", wait=10).sessions == {}
        restart.join()
        store.apply([PutRetained(_retained("b"))])  # the writer's retry of the same batch
    lines = [r.getMessage() for r in caplog.records]
    assert len([line for line in lines if "closed the connection" in line]) == 1, lines
    assert len([line for line in lines if "is back after" in line]) == 1, lines
    assert sorted(m.topic for m in store.load().retained) == ["a", "b"]
    store.close()
    os.close(parent_w)  # the second store process ends: no worker, no parent
    os.close(parent_r)
    assert second[0].wait(timeout=10) == 0
