"""`python -m loadtest.spark_cpu --out FILE --label NAME -- COMMAND...`: the CPU a Spark job uses.

On a shared machine wall time says little; the CPU time of the job's own processes says much
more. This runs the command (a `python -m spark.stream ... --once`), passes its output through,
and samples every thread of every process in its tree twice a second (from /proc; a thread's
last reading is kept after it ends). When the job logs "spark session ready" the CPU so far is
its start-up; the rest is processing. At the end it appends one JSON line to FILE: the label,
wall seconds, the job's own processing line ("processed N lines ... in S s"), and CPU seconds
in all, at start-up and per kind of thread (the JVM's task threads, C2 and C1 compilers, GC,
the JVM's other threads, Python), and the CPU the machine's other processes used meanwhile,
as docs/events.md's "Speed" section reports them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from loadtest.tree_cpu import CLOCK_TICKS, descendants, sample_in_background

READY_MARK = "spark session ready"
DONE_MARK = "processed "
# Thread name prefixes (/proc/.../comm, at most 15 characters) -> kind.
THREAD_KINDS = (
    ("Executor task", "tasks"),
    ("C2 CompilerThre", "c2_jit"),
    ("C1 CompilerThre", "c1_jit"),
    ("GC Thread", "gc"),
    ("ParGC Thread", "gc"),
    ("G1 ", "gc"),
    ("VM Thread", "gc"),
)


def thread_kind(process: str, name: str) -> str:
    if process != "java":
        return "python"
    for prefix, kind in THREAD_KINDS:
        if name.startswith(prefix):
            return kind
    return "jvm_other"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


class ThreadSampler:
    """The latest CPU seconds of every thread seen in a process tree, by kind."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.cpu: dict[tuple[int, int], tuple[str, float]] = {}
        self.lock = threading.Lock()

    def sample(self) -> None:
        for pid in [self.root, *descendants(self.root)]:
            process = (_read(f"/proc/{pid}/comm") or "").strip()
            try:
                tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                stat = _read(f"/proc/{pid}/task/{tid}/stat")
                name = (_read(f"/proc/{pid}/task/{tid}/comm") or "").strip()
                if stat is None:
                    continue
                fields = stat.rsplit(")", 1)[1].split()
                seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
                with self.lock:
                    self.cpu[(pid, tid)] = (thread_kind(process, name), seconds)

    def total(self) -> float:
        with self.lock:
            return sum(seconds for _, seconds in self.cpu.values())

    def by_kind(self) -> dict[str, float]:
        kinds: dict[str, float] = {}
        with self.lock:
            for kind, seconds in self.cpu.values():
                kinds[kind] = kinds.get(kind, 0.0) + seconds
        return {kind: round(seconds, 1) for kind, seconds in sorted(kinds.items())}


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine used since boot (/proc/stat, not idle/iowait)."""
    fields = [int(value) for value in (_read("/proc/stat") or "cpu 0").split("\n")[0].split()[1:]]
    idle = sum(fields[3:5])
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON lines appended here")
    parser.add_argument("--label", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    started, busy_before = time.monotonic(), machine_busy_seconds()
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    sampler = ThreadSampler(child.pid)
    stop_sampling = sample_in_background(sampler.sample)
    startup_cpu, processed = None, None
    assert child.stderr is not None
    for line in child.stderr:
        sys.stderr.write(line)
        if READY_MARK in line and startup_cpu is None:
            sampler.sample()
            startup_cpu = sampler.total()
        elif DONE_MARK in line:
            processed = line.split(": ", 1)[-1].strip()
    code = child.wait()
    stop_sampling()
    total = sampler.total()
    others = machine_busy_seconds() - busy_before - total
    record = {
        "label": args.label,
        "wall_s": round(time.monotonic() - started, 1),
        "processed": processed,
        "cpu_s": round(total, 1),
        "startup_cpu_s": None if startup_cpu is None else round(startup_cpu, 1),
        "processing_cpu_s": None if startup_cpu is None else round(total - startup_cpu, 1),
        "threads": sampler.by_kind(),
        "other_processes_cpu_s": round(others, 1),
        "loadavg": (_read("/proc/loadavg") or "").split()[:3],
        "exit": code,
    }
    with args.out.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
