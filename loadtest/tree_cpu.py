"""`python -m loadtest.tree_cpu --out FILE --label NAME -- COMMAND...`: the CPU of every process
a broker runs, for benchmarks of the pool.

The shared harness measures the CPU of the one process that owns the listening socket. A
pool's listening sockets belong to its supervisor, which does almost nothing, while the work
happens in its workers and its store process. Put this in front of the broker's command in
the harness's `--broker` argument: it runs the command, samples the CPU time of every
process in its tree twice a second (from /proc), forwards SIGTERM and SIGINT, and when the
command ends appends one JSON line to FILE: the label, the wall time from start to end, and
per process its role (supervisor, worker N, store, broker) and CPU seconds (user + system, as
last seen). The harness starts a fresh broker per run, so each line is one run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of `pid`, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def descendants(pid: int) -> list[int]:
    """`pid`'s children, grandchildren and so on."""
    found: list[int] = []
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as children:
            kids = [int(kid) for kid in children.read().split()]
    except OSError:
        return found
    for kid in kids:
        found += [kid, *descendants(kid)]
    return found


def role(pid: int) -> str:
    """What a process of a broker is, from its command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().decode(errors="replace").split("\0")
    except OSError:
        return "gone"
    if argv == [""]:  # exited and not yet reaped (a zombie), or mid-exec: read empty
        return "gone"
    if "store.store_process" in argv:
        return "store"
    if "--worker-id" in argv:
        return f"worker {argv[argv.index('--worker-id') + 1]}"
    if "--workers" in argv and argv[argv.index("--workers") + 1] not in ("1", ""):
        return "supervisor"
    return "broker"


class TreeSampler:
    """The latest CPU seconds and role of every process seen in a tree."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.cpu: dict[int, float] = {}
        self.roles: dict[int, str] = {}

    def sample(self) -> None:
        for pid in [self.root, *descendants(self.root)]:
            seconds = cpu_seconds(pid)
            if seconds is None:
                continue
            self.cpu[pid] = seconds
            # Read again each time: a process seen between its fork and its exec still has
            # its parent's command line (a pool's worker 0 was once reported as "broker").
            seen = role(pid)
            if seen != "gone":
                self.roles[pid] = seen

    def report(self) -> list[dict[str, object]]:
        return [
            {"pid": pid, "role": self.roles.get(pid, "gone"), "cpu_s": round(self.cpu[pid], 2)}
            for pid in sorted(self.cpu)
        ]


def sample_in_background(sample: Callable[[], None], every: float = 0.5) -> Callable[[], None]:
    """Call `sample` every `every` seconds in a thread; the function returned stops it and
    waits for the thread (the CPU tools here sample a job while it runs)."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(every):
            sample()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        thread.join()

    return stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON lines appended here")
    parser.add_argument("--label", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    started = time.monotonic()
    child = subprocess.Popen(command)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    sampler = TreeSampler(child.pid)
    stop_sampling = sample_in_background(sampler.sample)
    code = child.wait()
    stop_sampling()
    record = {"label": args.label, "wall_s": round(time.monotonic() - started, 2)}
    record["processes"] = sampler.report()
    with args.out.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
