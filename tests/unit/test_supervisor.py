"""The pool's supervisor (pool/supervisor.py) with real processes and real signals.

The workers here are a small script, not brokers: the supervisor knows nothing of MQTT.
Each worker writes `<id>.<pid>.started`, appends to `<id>.<pid>.events` the signals it
gets, and exits 0 on SIGTERM (unless told to ignore it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    worker_id, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    ignore_term = mode == "1"
    base = os.path.join(out, f"{worker_id}.{os.getpid()}")
    if mode == "2":  # cannot start
        open(base + ".started", "w").close()
        sys.exit(3)
    def record(name):
        with open(base + ".events", "a") as f:
            f.write(name + "\\n")
    def on_term(signum, frame):
        record("TERM")
        if not ignore_term:
            sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, lambda s, f: record("HUP"))
    open(base + ".started", "w").close()
    while True:
        time.sleep(0.05)
    """
)

DRIVER = textwrap.dedent(
    """
    import logging, sys
    from pool.supervisor import Supervisor
    logging.basicConfig(level=logging.INFO)
    worker, out, ignore_term, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    command = lambda i: [sys.executable, worker, str(i), out, ignore_term]
    sys.exit(Supervisor(command, workers, stop_timeout=1.5).run())
    """
)


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def started(out: Path, worker_id: int) -> list[int]:
    return sorted(int(p.name.split(".")[1]) for p in out.glob(f"{worker_id}.*.started"))


def events(out: Path, pid: int) -> list[str]:
    files = list(out.glob(f"*.{pid}.events"))
    return files[0].read_text().split() if files else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of a dead supervisor is reaped by init; treat a zombie as gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "out").mkdir()
    started_pools: list[subprocess.Popen[bytes]] = []

    def start(workers: int = 2, mode: str = "0") -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                DRIVER,
                str(tmp_path / "worker.py"),
                str(tmp_path / "out"),
                mode,
                str(workers),
            ],
            cwd=Path(__file__).resolve().parents[2],
            stderr=subprocess.PIPE,
        )
        started_pools.append(process)
        out = tmp_path / "out"
        wait_for(lambda: all(started(out, n) for n in range(workers)))
        return process

    yield start
    for process in started_pools:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


def test_a_killed_worker_is_restarted_and_the_others_keep_running(
    pool: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    pool(workers=2)
    [first] = started(out, 0)
    [other] = started(out, 1)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: len(started(out, 0)) == 2, timeout=5)
    assert started(out, 1) == [other] and alive(other)


def test_sighup_reaches_every_worker(
    pool: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    supervisor = pool(workers=2)
    supervisor.send_signal(signal.SIGHUP)
    pids = started(out, 0) + started(out, 1)
    wait_for(lambda: all(events(out, pid) == ["HUP"] for pid in pids))


def test_sigterm_stops_every_worker_cleanly_within_5_s(
    pool: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    supervisor = pool(workers=3)
    pids = [pid for n in range(3) for pid in started(out, n)]
    began = time.monotonic()
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=5) == 0
    assert time.monotonic() - began < 5
    assert all(events(out, pid) == ["TERM"] for pid in pids)
    assert not any(alive(pid) for pid in pids)


def test_a_worker_that_ignores_sigterm_is_killed_and_the_status_says_so(
    pool: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    supervisor = pool(workers=1, mode="1")
    [pid] = started(out, 0)
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=5) == 1
    assert not alive(pid)
    assert supervisor.stderr is not None
    log = supervisor.stderr.read().decode()
    assert "still running 2 s after SIGTERM: killed" in log
    assert "was killed by SIGKILL" in log


def test_workers_end_when_the_supervisor_is_killed(
    pool: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    supervisor = pool(workers=2)
    pids = started(out, 0) + started(out, 1)
    supervisor.kill()
    supervisor.wait()
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=5)
    assert all(events(out, pid) == ["TERM"] for pid in pids)


def test_a_worker_that_cannot_start_is_restarted_ever_more_slowly(
    pool: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    supervisor = pool(workers=1, mode="2")
    wait_for(lambda: len(started(out, 0)) >= 3, timeout=5)
    supervisor.send_signal(signal.SIGTERM)
    supervisor.wait(timeout=5)
    assert supervisor.stderr is not None
    log = supervisor.stderr.read().decode()
    assert "exited with status 3; restarting it in 0.2 s" in log
    assert "exited with status 3; restarting it in 0.4 s" in log


# ----- a companion (the pool's store process) ----------------------------------------------

COMPANION = textwrap.dedent(
    """
    import os, sys, time
    out, mode = sys.argv[1], sys.argv[2]
    base = os.path.join(out, f"companion.{os.getpid()}")
    open(base + ".started", "w").close()
    if mode == "fail":
        sys.exit(3)
    time.sleep(0.1)
    open(base + ".ready", "w").close()
    while True:
        time.sleep(0.05)
    """
)

COMPANION_DRIVER = textwrap.dedent(
    """
    import logging, os, subprocess, sys
    from pool.supervisor import Supervisor
    logging.basicConfig(level=logging.INFO)
    worker, companion, out, mode, ignore_term = sys.argv[1:6]

    class Companion:
        name = "the companion"
        def start(self):
            return subprocess.Popen([sys.executable, companion, out, mode])
        def ready(self, process):
            return os.path.exists(os.path.join(out, f"companion.{process.pid}.ready"))

    command = lambda i: [sys.executable, worker, str(i), out, ignore_term]
    supervisor = Supervisor(command, 1, stop_timeout=1.5, companion=Companion())
    status = supervisor.run()
    if supervisor.companion_process is not None:
        supervisor.companion_process.kill()
    sys.exit(status)
    """
)


def companions(out: Path) -> list[int]:
    return sorted(int(p.name.split(".")[1]) for p in out.glob("companion.*.started"))


def start_with_companion(
    tmp_path: Path, mode: str = "serve", ignore_term: str = "0"
) -> subprocess.Popen[bytes]:
    """The driver's supervisor, its log in `tmp_path / "supervisor.log"` (read while it
    runs by `logged`)."""
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "companion.py").write_text(COMPANION)
    (tmp_path / "out").mkdir()
    with (tmp_path / "supervisor.log").open("wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                COMPANION_DRIVER,
                str(tmp_path / "worker.py"),
                str(tmp_path / "companion.py"),
                str(tmp_path / "out"),
                mode,
                ignore_term,
            ],
            cwd=Path(__file__).resolve().parents[2],
            stderr=log,
        )


def logged(tmp_path: Path) -> str:
    """What the supervisor of `start_with_companion(tmp_path)` has logged so far."""
    return (tmp_path / "supervisor.log").read_text()


def stopped(
    supervisor: subprocess.Popen[bytes], tmp_path: Path, *, term: bool = True
) -> tuple[int, str]:
    """SIGTERM `supervisor` (unless `term` is False: it ends by itself); its exit status
    and its log."""
    if term and supervisor.poll() is None:
        supervisor.send_signal(signal.SIGTERM)
    try:
        status = supervisor.wait(timeout=10)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    return status, logged(tmp_path)


def test_the_companion_is_ready_before_the_workers_start_and_restarted_when_killed(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    supervisor = start_with_companion(tmp_path)
    try:
        wait_for(lambda: started(out, 0))
        [first] = companions(out)
        assert (out / f"companion.{first}.ready").exists()  # before any worker started
        [worker] = started(out, 0)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: len(companions(out)) == 2, timeout=5)
        second = next(pid for pid in companions(out) if pid != first)
        # Ready once the supervisor saw it so (it polls), not when the file appears.
        wait_for(lambda: f"the companion (pid {second}) is ready" in logged(tmp_path), timeout=5)
        assert started(out, 0) == [worker] and alive(worker)
    finally:
        status, log = stopped(supervisor, tmp_path)
    assert status == 0, log
    assert f"the companion (pid {first}) is ready" in log
    assert f"the companion (pid {first}) was killed by SIGKILL; restarting it" in log
    assert f"the companion (pid {second}) is ready" in log


def test_the_companion_is_restarted_while_the_workers_stop(tmp_path: Path) -> None:
    # The workers ignore SIGTERM, so they run 1.5 s into the stop: the companion (the
    # store their last commits need) killed meanwhile is started again.
    out = tmp_path / "out"
    supervisor = start_with_companion(tmp_path, ignore_term="1")
    wait_for(lambda: started(out, 0))
    [first] = companions(out)
    supervisor.send_signal(signal.SIGTERM)
    wait_for(lambda: events(out, started(out, 0)[0]) == ["TERM"])
    os.kill(first, signal.SIGKILL)
    status, log = stopped(supervisor, tmp_path)
    assert status == 1  # the worker was killed
    assert len(companions(out)) == 2, log
    assert "restarting it" in log


def test_a_companion_that_cannot_start_stops_the_pool_before_any_worker(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    status, log = stopped(start_with_companion(tmp_path, mode="fail"), tmp_path, term=False)
    assert status == 1, log
    assert "the companion did not start; its log lines above say why" in log
    assert not started(out, 0)
