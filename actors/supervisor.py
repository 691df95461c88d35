"""The pool's supervisor process: starts N workers, restarts the ones that die, ends them all.

It knows nothing of MQTT: a worker is a command line (`command(worker_id)`) and the
descriptors it inherits (the listening sockets, bound here once so that every worker
accepts on them and the kernel spreads the connections). docs/pool.md has the whole pool.

- A worker that exits while the pool runs is restarted at once; one that dies again within
  `FAST_DEATH` seconds of its start waits first, doubling from `FIRST_BACKOFF` up to
  `MAX_BACKOFF`, so a worker that cannot start does not spin. Each death is logged with its
  exit status or signal.
- SIGTERM or SIGINT: forwarded to every worker, which shuts down cleanly (wills published,
  store committed); a worker still running after `stop_timeout` seconds is killed. The exit
  status is 0 if every worker exited 0.
- SIGHUP: forwarded to every worker (plugins reload their files there).
- A worker that exits with `fatal_status` (if given) stops the pool with that status: a
  configuration error does not go away by restarting.
- Workers end with the supervisor: each is started with PR_SET_PDEATHSIG = SIGTERM (Linux),
  so a supervisor killed with SIGKILL leaves no orphans.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

FAST_DEATH = 2.0  # seconds: a worker dying sooner after its start is restarted after a delay
FIRST_BACKOFF, MAX_BACKOFF = 0.2, 5.0
STOP_TIMEOUT = 5.0  # seconds the workers have to end after SIGTERM before they are killed
POLL_INTERVAL = 0.05
_PR_SET_PDEATHSIG = 1


@dataclass(slots=True)
class _Worker:
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: float = FIRST_BACKOFF
    restart_at: float = 0.0  # monotonic time of the next start while it is down


class Supervisor:
    """Runs `workers` processes made by `command(worker_id)` until told to stop."""

    def __init__(
        self,
        command: Callable[[int], list[str]],
        workers: int,
        *,
        pass_fds: Sequence[int] = (),
        stop_timeout: float = STOP_TIMEOUT,
        fatal_status: int | None = None,
    ) -> None:
        self._command = command
        self._workers = [_Worker() for _ in range(workers)]
        self._pass_fds = tuple(pass_fds)
        self._stop_timeout = stop_timeout
        self._stopping = False
        self._reload = False
        self._fatal_status = fatal_status
        self._failed_with: int | None = None

    def run(self) -> int:
        """Start the workers and supervise them until SIGTERM/SIGINT; the exit status."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)
        for worker_id in range(len(self._workers)):
            self._start(worker_id)
        logger.info("supervisor: %d workers started", len(self._workers))
        while not self._stopping:
            if self._reload:
                self._reload = False
                self._signal_all(signal.SIGHUP)
            self._reap_and_restart()
            time.sleep(POLL_INTERVAL)
        status = self._stop_all()
        return self._failed_with if self._failed_with is not None else status

    def pids(self) -> list[int | None]:
        """The workers' process ids (None while one is down)."""
        return [w.process.pid if w.process is not None else None for w in self._workers]

    # ----- signals ----------------------------------------------------------------------

    def _on_stop(self, signum: int, _frame: object) -> None:
        self._stopping = True

    def _on_reload(self, signum: int, _frame: object) -> None:
        self._reload = True

    # ----- workers ----------------------------------------------------------------------

    def _start(self, worker_id: int) -> None:
        worker = self._workers[worker_id]
        worker.process = subprocess.Popen(
            self._command(worker_id),
            pass_fds=self._pass_fds,
            preexec_fn=_die_with(os.getpid()),  # noqa: PLW1509 - no threads here
        )
        worker.started_at = time.monotonic()

    def _reap_and_restart(self) -> None:
        now = time.monotonic()
        for worker_id, worker in enumerate(self._workers):
            process = worker.process
            if process is not None:
                status = process.poll()
                if status is None:
                    continue
                worker.process = None
                if status == self._fatal_status:
                    logger.error(
                        "supervisor: worker %d exited with status %d (its log lines above say "
                        "why); stopping the pool",
                        worker_id,
                        status,
                    )
                    self._failed_with = status
                    self._stopping = True
                    return
                fast = now - worker.started_at < FAST_DEATH
                delay = worker.backoff if fast else 0.0
                worker.backoff = min(worker.backoff * 2, MAX_BACKOFF) if fast else FIRST_BACKOFF
                worker.restart_at = now + delay
                logger.error(
                    "supervisor: worker %d (pid %d) %s; restarting it%s",
                    worker_id,
                    process.pid,
                    _describe(status),
                    f" in {delay:.1f} s (it died {now - worker.started_at:.1f} s after its "
                    "start: see its log lines above)"
                    if delay
                    else "",
                )
            if now >= worker.restart_at:
                self._start(worker_id)

    def _signal_all(self, signum: int) -> None:
        for worker in self._workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.send_signal(signum)

    def _stop_all(self) -> int:
        logger.info("supervisor: stopping %d workers", len(self._workers))
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self._stop_timeout
        status = 0
        for worker_id, worker in enumerate(self._workers):
            process = worker.process
            if process is None:
                continue
            try:
                code = process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.error(
                    "supervisor: worker %d (pid %d) still running %.0f s after SIGTERM: killed",
                    worker_id,
                    process.pid,
                    self._stop_timeout,
                )
                process.kill()
                code = process.wait()
            if code != 0:
                logger.warning("supervisor: worker %d %s", worker_id, _describe(code))
                status = 1
        return status


def _describe(status: int) -> str:
    if status < 0:
        return f"was killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


def _die_with(parent: int) -> Callable[[], None]:
    """A pre-exec hook: the child gets SIGTERM when `parent` dies (and exits at once if it
    already has, the race prctl leaves open)."""

    def hook() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return hook
