"""`python -m loadtest.bridge_bench`: QoS 1 messages per second through a bridge.

A remote Mosquitto and a local broker bridged to it (`topic up/# out 1 site7/ plant/`):
`--publishers` clients each publish `--messages` QoS 1 messages of 64 bytes to the local
broker's `site7/up/...`, `mosquitto_sub` counts them on the remote's `plant/up/#` at QoS 1,
and the rate is the messages over the time from starting the publishers to the last
arrival. The publishers are the connections of one `mqttbench fanin` (../shared/bench's
generator, built into `--build-dir` on first use), each keeping up to `--window` messages
un-PUBACKed (1, the default: each waits for its PUBACK before the next publish). The
generator is in C and sleeps in epoll while it waits, so the publishers are not the limit
and leave the cores to the brokers. The local broker is ours (`--workers 1` and the default
pool; and `--workers 1 --store memory`, which takes the store's write-ahead out of the path,
as Mosquitto's `persistence false` does) or, as the anchor, a second Mosquitto with its own
`connection` bridge of the same topic line. Runs are interleaved, the order rotated each
repetition; each runs on fresh brokers. Each run also takes the CPU (user + system, from
/proc) that the local broker's processes (its store process and pool workers included)
and the remote Mosquitto spent from the publishers' start to the last arrival, per message.
Prints one Markdown table (medians over the repetitions, and each broker's median ratio to
Mosquitto's bridge in the same repetition) and appends one JSON line per run to `--out`.
Our broker runs on the interpreter that runs the bench; each line names it (`python`: its
version and `sys.base_prefix`), so one series can compare interpreters by alternating
`<venv>/bin/python -m loadtest.bridge_bench` of two virtual environments.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import orjson

from loadtest.bench import PYTHON, ROOT, free_port
from loadtest.tree_cpu import cpu_seconds, descendants, role

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
READY_TIMEOUT = 30.0


def wait_for_port(port: int, process: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on {port} within {READY_TIMEOUT:.0f} s")


def mosquitto(workdir: Path, port: int, extra: str = "") -> subprocess.Popen[bytes]:
    config = workdir / f"mosquitto-{port}.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\nuser {getpass.getuser()}\n"
        f"persistence false\nmax_queued_messages 1000000\n{extra}\n"
    )
    log = (workdir / f"mosquitto-{port}.log").open("wb")
    process = subprocess.Popen([MOSQUITTO, "-c", str(config)], stdout=log, stderr=log)
    wait_for_port(port, process, "mosquitto")
    return process


def mosquitto_bridge(workdir: Path, port: int, remote: int) -> subprocess.Popen[bytes]:
    """The anchor: Mosquitto bridging `site7/up/#` to the remote's `plant/up/#` at QoS 1."""
    return mosquitto(
        workdir,
        port,
        f"connection bench\naddress 127.0.0.1:{remote}\ncleansession false\n"
        "topic up/# out 1 site7/ plant/\n",
    )


def ours(
    workers: str, store: str = "sqlite"
) -> Callable[[Path, int, int], subprocess.Popen[bytes]]:
    def start(workdir: Path, port: int, remote: int) -> subprocess.Popen[bytes]:
        config = workdir / f"broker-{port}.toml"
        config.write_text(
            "[[bridges]]\n"
            'name = "bench"\n'
            f'addresses = ["127.0.0.1:{remote}"]\n'
            "[[bridges.topics]]\n"
            'pattern = "up/#"\ndirection = "out"\nqos = 1\n'
            'local_prefix = "site7/"\nremote_prefix = "plant/"\n'
        )
        log = (workdir / f"broker-{port}.log").open("wb")
        argv = [sys.executable, "-m", "actors.main", "--config", str(config)]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "info"]
        argv += ["--data-dir", str(workdir / f"data-{port}"), "--http-port", "0"]
        argv += ["--workers", workers, "--store", store]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(argv, stdout=log, stderr=log, env=env, cwd=workdir)
        wait_for_port(port, process, "the broker")
        deadline = time.monotonic() + READY_TIMEOUT
        while b"bridge 'bench': connected" not in (workdir / f"broker-{port}.log").read_bytes():
            if time.monotonic() > deadline:
                raise RuntimeError("the broker's bridge did not connect")
            time.sleep(0.05)
        return process

    return start


BROKERS: dict[str, Callable[[Path, int, int], subprocess.Popen[bytes]]] = {
    "mosquitto-bridge": mosquitto_bridge,
    "ours-w1": ours("1"),
    "ours-pool": ours("auto"),  # the default: a worker per core
    # No write-ahead: nothing acknowledged survives a crash, as with the anchor's
    # `persistence false`. Not for the pool, whose memory store is its store process on a
    # temporary file (docs/pool.md): the same path as with SQLite.
    "ours-w1-memory": ours("1", "memory"),
}


GENERATOR = ROOT.parent / "shared" / "bench" / "mqttbench.c"


def build_generator(build_dir: Path) -> Path:
    """../shared/bench's load generator, compiled into `build_dir` unless it is there."""
    binary = build_dir / "mqttbench"
    if not binary.exists() or binary.stat().st_mtime < GENERATOR.stat().st_mtime:
        build_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(GENERATOR)], check=True)
    return binary


def start_publishers(
    port: int, publishers: int, messages: int, window: int, generator: Path
) -> subprocess.Popen[bytes]:
    """`publishers` clients sending `messages` QoS 1 messages each to `site7/up/...`."""
    argv = [str(generator), "fanin", "--port", str(port), "--prefix", "site7/up"]
    argv += ["--pubs", str(publishers), "--subs", "0", "--qos", "1", "--size", "64"]
    argv += ["--window", str(window), "--msgs", str(messages * publishers), "--settle", "0"]
    argv += ["--max-pub-time", "600"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL)


def one_run(
    name: str,
    publishers: int,
    messages: int,
    timeout: float,
    *,
    window: int,
    generator: Path,
) -> dict[str, object]:
    """Messages per second through `name`'s bridge, on fresh brokers."""
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        workdir = Path(tmp)
        remote_port, local_port = free_port(), free_port()
        remote = mosquitto(workdir, remote_port)
        local = BROKERS[name](workdir, local_port, remote_port)
        try:
            time.sleep(1.0)  # the bridge's subscription and the broker settle
            sub = subprocess.Popen(
                [
                    *("mosquitto_sub", "-p", str(remote_port), "-t", "plant/up/#", "-q", "1"),
                    *("-C", str(messages * publishers), "-W", str(int(timeout))),
                ],
                stdout=subprocess.DEVNULL,
            )
            time.sleep(0.5)  # subscribed
            before = cpu_by_role(local.pid, remote.pid)
            started = time.monotonic()
            start_publishers(local_port, publishers, messages, window, generator).wait(timeout)
            code = sub.wait(timeout + 5)
            elapsed = time.monotonic() - started
            after = cpu_by_role(local.pid, remote.pid)
        finally:
            for process in (local, remote):
                process.terminate()
                process.wait(10)
        ok = code == 0
        total = messages * publishers
        return {
            "broker": name,
            "python": PYTHON,
            "window": window,
            "messages": total,
            "ok": ok,
            "seconds": round(elapsed, 3),
            "rate": round(total / elapsed) if ok else None,
            "cpu_us_per_message": {
                what: round((after[what] - before[what]) / total * 1e6, 1) for what in after
            },
        }


def cpu_by_role(local: int, remote: int) -> dict[str, float]:
    """CPU seconds so far: "local" (every process of the local broker), "local store" (its
    store processes, a part of "local") and "remote" (the remote Mosquitto)."""
    used = {"local": 0.0, "local store": 0.0, "remote": cpu_seconds(remote) or 0.0}
    for pid in [local, *descendants(local)]:
        seconds = cpu_seconds(pid) or 0.0
        used["local"] += seconds
        if role(pid) == "store":
            used["local store"] += seconds
    return used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bridge_bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=50_000, help="per publisher")
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--out", type=Path, default=None, help="JSON lines appended here")
    parser.add_argument("--window", type=int, default=1, help="QoS 1 in flight per publisher")
    parser.add_argument(
        "--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "mqttbench-build"
    )
    args = parser.parse_args(argv)
    names = args.brokers.split(",")
    generator = build_generator(args.build_dir)
    runs: list[dict[str, object]] = []
    for rep in range(args.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            run = {
                "rep": rep,
                **one_run(
                    name,
                    args.publishers,
                    args.messages,
                    args.timeout,
                    window=args.window,
                    generator=generator,
                ),
            }
            print(orjson.dumps(run).decode(), file=sys.stderr)
            runs.append(run)
            if args.out is not None:
                with args.out.open("ab") as out:
                    out.write(orjson.dumps(run) + b"\n")
    print(table(runs, names))
    return 0


def table(runs: list[dict[str, object]], names: list[str]) -> str:
    """Per broker: the median rate, its median ratio to Mosquitto's bridge in the same rep,
    and the median CPU per message."""
    rates: dict[tuple[int, str], float] = {
        (int(str(r["rep"])), str(r["broker"])): float(str(r["rate"])) for r in runs if r["ok"]
    }
    lines = [
        "| bridge | QoS 1 msg/s, median | / Mosquitto's bridge | runs "
        "| CPU µs/msg: local broker (its store) | remote |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        mine = [rate for (_rep, broker), rate in rates.items() if broker == name]
        ratios = [
            rate / rates[(rep, "mosquitto-bridge")]
            for (rep, broker), rate in rates.items()
            if broker == name and (rep, "mosquitto-bridge") in rates
        ]
        median = f"{statistics.median(mine):,.0f}" if mine else "-"
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        cpu: list[dict[str, float]] = [
            cast("dict[str, float]", r["cpu_us_per_message"])
            for r in runs
            if r["broker"] == name and r["ok"]
        ]
        local, store, remote = (
            f"{statistics.median(c[what] for c in cpu):.1f}" if cpu else "-"
            for what in ("local", "local store", "remote")
        )
        lines.append(
            f"| {name} | {median} | {ratio} | {len(mine)} | {local} ({store}) | {remote} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
