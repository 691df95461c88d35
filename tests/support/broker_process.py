"""Start `python -m actors.main` as a subprocess on a free port, for tests over real sockets.

`--workers` is `pool_mode.workers` unless the caller passes its own: the integration suite
runs once with 1 (one process) and once with 2 (a pool), see tests/integration/conftest.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

READY = re.compile(r"ready: accepting MQTT connections on ([\d.]+):(\d+)")
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class PoolMode:
    """How many worker processes the brokers the tests start run (set per module)."""

    workers: int = 1


pool_mode = PoolMode()


@dataclass
class BrokerProcess:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 6.0) -> int:
        """Send `sig` and wait for the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)


def start_broker(
    tmp_dir: Path,
    config_text: str | None = None,
    extra_args: tuple[str, ...] = (),
    preexec_fn: Callable[[], None] | None = None,
    *,
    pass_workers: bool = True,
) -> BrokerProcess:
    """Start the broker; wait for its "ready" line. `preexec_fn` runs in the child before exec.

    Only for a function that makes a system call or two (`resource.setrlimit`): it runs in
    the forked child of a possibly threaded process, where taking a lock can deadlock.
    `pass_workers=False` leaves `--workers` to the configuration file.
    """
    args = [sys.executable, "-m", "actors.main", "--port", "0", "--log-level", "info"]
    if config_text is not None:
        config_path = tmp_dir / "broker.toml"
        config_path.write_text(config_text, encoding="utf-8")
        args += ["--config", str(config_path)]
    args += list(extra_args)
    if pass_workers and "--workers" not in extra_args:
        args += ["--workers", str(pool_mode.workers)]
    if "--http-port" not in extra_args and "[http]" not in (config_text or ""):
        # Brokers of parallel tests would all bind the default 18083: no admin listener
        # unless the test configures one (tests.support.admin).
        args += ["--http-port", "0"]
    if "--sys-interval" not in extra_args and "[sys]" not in (config_text or ""):
        # Tests that watch $SYS/# for forged messages expect the broker's own to be off too
        # (tests/integration/test_metrics_and_sys.py turns them on).
        args += ["--sys-interval", "0"]
    if "--data-dir" not in extra_args:
        args += ["--data-dir", str(tmp_dir / "data")]
    log_path = tmp_dir / f"broker-{time.monotonic_ns()}.log"
    log_file = log_path.open("wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=log_file,
        stderr=log_file,
        env=env,
        preexec_fn=preexec_fn,  # noqa: PLW1509 (callers pass lock-free calls; see the docstring)
    )
    log_file.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = READY.search(log_path.read_text(encoding="utf-8", errors="replace"))
        if match:
            return BrokerProcess(process, match.group(1), int(match.group(2)), log_path)
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}:\n{log_path.read_text()}")
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"broker did not become ready in 30 s:\n{log_path.read_text()}")
