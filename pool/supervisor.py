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
- A `Companion` (the pool's store process) is started before the workers, which are started
  once it is ready ("the store process (pid N) is ready"); the pool does not start (status
  1) if it cannot be. It is restarted as a worker is, with the same back-off, while the pool
  runs and while the workers stop (their last commits need it). It is not signalled: the
  caller ends it once the workers are gone (`companion_process`).
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
from typing import Protocol

logger = logging.getLogger(__name__)

FAST_DEATH = 2.0  # seconds: a worker dying sooner after its start is restarted after a delay
FIRST_BACKOFF, MAX_BACKOFF = 0.2, 5.0
STOP_TIMEOUT = 5.0  # seconds the workers have to end after SIGTERM before they are killed
COMPANION_START_TIMEOUT = 60.0  # seconds for the companion's first start (a store's replay)
POLL_INTERVAL = 0.05
_PR_SET_PDEATHSIG = 1


@dataclass(slots=True)
class _Worker:
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: float = FIRST_BACKOFF
    restart_at: float = 0.0  # monotonic time of the next start while it is down
    ready: bool = False  # a companion: said it serves

    def died(self, name: str, pid: int, status: int, now: float) -> None:
        """It exited with `status`: schedule its restart, at once or, if it died soon after
        its start, after a back-off that doubles with each such death; one ERROR line."""
        fast = now - self.started_at < FAST_DEATH
        delay = self.backoff if fast else 0.0
        self.backoff = min(self.backoff * 2, MAX_BACKOFF) if fast else FIRST_BACKOFF
        self.restart_at = now + delay
        logger.error(
            "supervisor: %s (pid %d) %s; restarting it%s",
            name,
            pid,
            _describe(status),
            f" in {delay:.1f} s (it died {now - self.started_at:.1f} s after its start: "
            "see its log lines above)"
            if delay
            else "",
        )


class Companion(Protocol):
    """A process the workers use, one for the pool (its store process)."""

    name: str  # for the log: "the store process"

    def start(self) -> subprocess.Popen[bytes]:
        """Start a new one (it may take a while to be ready)."""
        ...

    def ready(self, process: subprocess.Popen[bytes]) -> bool:
        """Whether `process` (the latest started) serves."""
        ...


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
        companion: Companion | None = None,
        companion_start_timeout: float = COMPANION_START_TIMEOUT,
    ) -> None:
        self._command = command
        self._workers = [_Worker() for _ in range(workers)]
        self._pass_fds = tuple(pass_fds)
        self._stop_timeout = stop_timeout
        self._stopping = False
        self._reload = False
        self._fatal_status = fatal_status
        self._failed_with: int | None = None
        self._companion = companion
        self._companion_start_timeout = companion_start_timeout
        self._with = _Worker()  # the companion's process and back-off

    def run(self) -> int:
        """Start the workers and supervise them until SIGTERM/SIGINT; the exit status."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)
        if self._companion is not None:
            failed = self._start_companion_first(self._companion)
            if failed is not None:
                return failed
        for worker_id in range(len(self._workers)):
            self._start(worker_id)
        logger.info("supervisor: %d workers started", len(self._workers))
        while not self._stopping:
            if self._reload:
                self._reload = False
                self._signal_all(signal.SIGHUP)
            self._reap_and_restart()
            self._tend_companion()
            time.sleep(POLL_INTERVAL)
        status = self._stop_all()
        return self._failed_with if self._failed_with is not None else status

    @property
    def companion_process(self) -> subprocess.Popen[bytes] | None:
        """The companion's latest process (None if there is none or it is down)."""
        return self._with.process

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
                worker.died(f"worker {worker_id}", process.pid, status, now)
            if now >= worker.restart_at:
                self._start(worker_id)

    # ----- the companion (the store process) ---------------------------------------------

    def _start_companion_first(self, companion: Companion) -> int | None:
        """Start the companion and wait until it is ready: None, or the status to exit with
        (1: it did not start, logged; 0: told to stop meanwhile)."""
        self._start_companion(companion)
        process = self._with.process
        assert process is not None
        deadline = time.monotonic() + self._companion_start_timeout
        while not companion.ready(process):
            if process.poll() is not None or time.monotonic() > deadline or self._stopping:
                if not self._stopping:
                    logger.error(
                        "supervisor: %s did not start; its log lines above say why",
                        companion.name,
                    )
                if process.poll() is None:
                    process.kill()
                process.wait()
                self._with.process = None
                return 0 if self._stopping else 1
            time.sleep(POLL_INTERVAL / 2)
        self._tend_companion()
        return None

    def _start_companion(self, companion: Companion) -> None:
        self._with.process = companion.start()
        self._with.started_at = time.monotonic()
        self._with.ready = False

    def _tend_companion(self) -> None:
        """Say when the companion is ready; restart it (with back-off) when it died."""
        companion = self._companion
        if companion is None:
            return
        state = self._with
        now = time.monotonic()
        process = state.process
        if process is not None:
            status = process.poll()
            if status is None:
                if not state.ready and companion.ready(process):
                    state.ready = True
                    logger.info(
                        "supervisor: %s (pid %d) is ready after %.1f s",
                        companion.name,
                        process.pid,
                        now - state.started_at,
                    )
                return
            state.process = None
            state.died(companion.name, process.pid, status, now)
        if now >= state.restart_at:
            self._start_companion(companion)

    # ----- stopping -----------------------------------------------------------------------

    def _signal_all(self, signum: int) -> None:
        for worker in self._workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.send_signal(signum)

    def _stop_all(self) -> int:
        """SIGTERM every worker and wait for them (killing the ones still running after
        `stop_timeout`), tending the companion meanwhile; 0 if every one exited 0."""
        logger.info("supervisor: stopping %d workers", len(self._workers))
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self._stop_timeout
        status = 0
        running = {i for i, worker in enumerate(self._workers) if worker.process is not None}
        while running:
            for worker_id in sorted(running):
                process = self._workers[worker_id].process
                assert process is not None
                code = process.poll()
                if code is None and time.monotonic() >= deadline:
                    logger.error(
                        "supervisor: worker %d (pid %d) still running %.0f s after SIGTERM: killed",
                        worker_id,
                        process.pid,
                        self._stop_timeout,
                    )
                    process.kill()
                    code = process.wait()
                if code is None:
                    continue
                running.discard(worker_id)
                if code != 0:
                    logger.warning("supervisor: worker %d %s", worker_id, _describe(code))
                    status = 1
            if running:
                self._tend_companion()  # the workers' last commits need the store
                time.sleep(POLL_INTERVAL)
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
