"""Which CPUs the broker may use, and the one CPU each pool worker is pinned to.

`[broker] cpu_affinity = "auto"` (the default) pins worker I to the I-th CPU this process
may run on, when the pool has at most one worker per such CPU, as nginx's
`worker_cpu_affinity auto` and the Erlang VM's scheduler binding (`+sbt`) do. A worker
pinned to its own core keeps that core's caches. Left to the scheduler, the steps of a
message forwarded between two workers ran up to twice as slow, as they do when both workers
are pinned to one core (docs/pool.md, "Workers pinned to cores", has the measurements).
`"none"` leaves placement to the kernel: the choice for a host where other busy processes
share the cores, since a pinned worker cannot move off a core they crowd.

The CPUs a process may use come from its affinity mask (a container's cpuset), not from the
machine's count, so `workers = "auto"` starts one worker per usable CPU.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, in order (all of them where Linux's affinity
    calls are missing)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def worker_cpu(setting: str, worker: int, workers: int, cpus: list[int]) -> int | None:
    """The CPU worker `worker` of `workers` runs on, or None: not pinned (the setting is
    "none", the broker is one process, or there are more workers than CPUs to share)."""
    if setting != "auto" or workers < 2 or workers > len(cpus):
        return None
    return cpus[worker]


def pin_worker(setting: str, worker: int, workers: int) -> int | None:
    """Pin this process, pool worker `worker`, to its CPU; the CPU, or None if unpinned."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = worker_cpu(setting, worker, workers, usable_cpus())
    if cpu is None:
        return None
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as error:
        logger.warning(
            "worker %d: could not pin itself to CPU %d (%s); it runs wherever the kernel "
            'puts it (set [broker] cpu_affinity = "none" to stop trying)',
            worker,
            cpu,
            error,
        )
        return None
    logger.info("worker %d: pinned to CPU %d ([broker] cpu_affinity = %s)", worker, cpu, setting)
    return cpu
