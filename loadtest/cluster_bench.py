"""`python -m loadtest.cluster_bench`: what a message costs when it crosses nodes of a cluster.

A 2-node cluster (nodes `a` and `b`, each `--workers N`, over one `nats-server` with
JetStream and its monitoring port) and one plain broker without `[cluster]` (also
`--workers N`) as the reference. Each scenario of ../shared/bench's generator (`mqttbench`,
built into `--build-dir` on first use) runs with three placements:

- `same`: publishers and subscribers on node a (node b and NATS idle but counted);
- `across`: publishers on node a, subscribers on node b, every delivery through NATS;
- `plain`: publishers and subscribers on the plain broker.

The generator takes one `--port` for all its connections, so the build adds one option,
`--sub-port` (the subscribers' port), to a copy of ../shared/bench/mqttbench.c in
`--build-dir` (three exact textual edits, checked; the shared source stays as it is). One
generator process then keeps its end-to-end window and its latency clock over both nodes.

Scenarios (the harness's own arguments, `--duration` seconds of publishing): `fanin_qos0`
(10 publishers -> 1 subscriber, QoS 0), `fanin_qos1` (the same at QoS 1, 50 in flight per
publisher), `fanout` (1 -> 100 subscribers, QoS 0), `latency` (1 -> 1 at 1,000 msg/s, QoS 0).

CPU: user + system seconds of every process of both nodes and of nats-server (of the plain
broker for `plain`), sampled from /proc every 0.1 s, from the generator's first publish
(its exit time minus its reported duration) until the brokers are quiet again after it
ends; divided by the deliveries. NATS: `in_msgs`/`out_msgs` of http://127.0.0.1:MON/varz
over the same interval, interpolated between samples the same way.

Per repetition every scenario runs once per placement, the placements' order rotated each
repetition; the cluster and the plain broker are started fresh per repetition and the
brokers are quiet before each run. The nodes run at `--log-level info`: the line
"cluster: linked to <node>.<worker>" that says a node is ready is logged at info (nothing is
logged per message). Prints one Markdown table (medians over the repetitions, paired
per-repetition ratios) and appends one JSON line per run to `--out`, which names the
interpreter the brokers ran on (the bench's own). Loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtest.bench import (
    BUILD_DIR,
    DEFAULT_HARNESS,
    PYTHON,
    RESULTS_DIR,
    ROOT,
    free_port,
    git_revision,
    load_harness,
)
from loadtest.tree_cpu import cpu_seconds, descendants

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
GENERATOR = ROOT.parent / "shared" / "bench" / "mqttbench.c"
SCENARIOS = ("fanin_qos0", "fanin_qos1", "fanout", "latency")
TITLES = {
    "fanin_qos0": "QoS 0 fan-in 10→1",
    "fanin_qos1": "QoS 1 fan-in 10→1",
    "fanout": "fan-out 1→100",
    "latency": "latency 1→1 at 1,000 msg/s",
}
PLACEMENTS = ("same", "across", "plain")
READY_TIMEOUT = 60.0
SAMPLE_EVERY = 0.1
QUIET_CPU_S = 0.01  # quiet: all the measured processes used less than this in QUIET_WINDOW
QUIET_WINDOW = 0.25
DRAIN_IDLE = 2.0  # the generator's --drain-idle
GENERATOR_TIMEOUT = 90.0

# The generator with the subscribers' port apart from the publishers': (old, new), each
# `old` found exactly once in ../shared/bench/mqttbench.c.
SUB_PORT_EDITS = (
    (
        "int keepalive, broker_pid, reflect;",
        "int keepalive, broker_pid, reflect, sub_port;",
    ),
    (
        ".sin_port = htons((uint16_t)O.port)};\n"
        "    if (inet_pton(AF_INET, O.host, &a.sin_addr) != 1)",
        ".sin_port = htons((uint16_t)(role == ROLE_SUB && O.sub_port ? O.sub_port : O.port))};\n"
        "    if (inet_pton(AF_INET, O.host, &a.sin_addr) != 1)",
    ),
    (
        'else if (OPT("--port")) O.port = atoi(v);',
        'else if (OPT("--port")) O.port = atoi(v);\n'
        '        else if (OPT("--sub-port")) O.sub_port = atoi(v);',
    ),
)


def build_generator(build_dir: Path) -> Path:
    """mqttbench with `--sub-port`, compiled into `build_dir` unless it is there already."""
    binary = build_dir / "mqttbench-subport"
    if binary.exists() and binary.stat().st_mtime >= GENERATOR.stat().st_mtime:
        return binary
    source = GENERATOR.read_text()
    for old, new in SUB_PORT_EDITS:
        if source.count(old) != 1:
            raise RuntimeError(f"{GENERATOR} changed: cannot add --sub-port at {old[:40]!r}")
        source = source.replace(old, new)
    build_dir.mkdir(parents=True, exist_ok=True)
    patched = build_dir / "mqttbench-subport.c"
    patched.write_text(source)
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(binary), str(patched)], check=True)
    return binary


# -- processes --------------------------------------------------------------------------


def listening_sockets(port: int) -> int:
    """How many sockets listen on `port` (a pool: one per worker once it serves)."""
    count = 0
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def wait_for(what: str, condition: Any, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not condition():
        if process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {READY_TIMEOUT:.0f} s")
        time.sleep(0.05)


@dataclass
class Started:
    """A process this script started, its log and its port."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_nats(workdir: Path) -> tuple[Started, int]:
    port, monitor = free_port(), free_port()
    log = workdir / "nats.log"
    argv = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor)]
    argv += ["-js", "-sd", str(workdir / "jetstream")]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    wait_for("nats-server", lambda: listening_sockets(port) and listening_sockets(monitor), process)
    return Started("nats", process, port, log), monitor


def start_broker(workdir: Path, name: str, workers: int, cluster: str | None) -> Started:
    """`python -m actors.main` on a free port; `cluster` is its `[cluster]` table or None."""
    port = free_port()
    argv = [sys.executable, "-m", "actors.main", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--http-port", "0", "--workers", str(workers)]
    argv += ["--data-dir", str(workdir / f"data-{name}"), "--log-level", "info"]
    if cluster is not None:
        config = workdir / f"{name}.toml"
        config.write_text(cluster)
        argv += ["--config", str(config)]
    log = workdir / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    wait_for(name, lambda: listening_sockets(port) >= workers, process)
    return Started(name, process, port, log)


def linked(node: Started, other: str, workers: int) -> bool:
    """Every worker of `node` logged its link to every worker of node `other`."""
    text = node.log.read_text(errors="replace")
    return all(
        text.count(f"cluster: linked to {other}.{worker}\n") >= workers for worker in range(workers)
    )


@dataclass
class Brokers:
    nats: Started
    monitor: int
    a: Started
    b: Started
    plain: Started

    def all(self) -> list[Started]:
        return [self.plain, self.b, self.a, self.nats]


@contextmanager
def brokers(workers: int, rep: int) -> Iterator[Brokers]:
    """NATS, nodes a and b of a fresh cluster, and a plain broker, all `workers` wide."""
    started: list[Started] = []
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp:
        workdir = Path(tmp)
        try:
            nats, monitor = start_nats(workdir)
            started.append(nats)
            nodes = {}
            for node in ("a", "b"):
                table = f'[cluster]\nname = "bench{os.getpid()}r{rep}"\nnode = "{node}"\n'
                table += f'nats = ["nats://127.0.0.1:{nats.port}"]\n'
                nodes[node] = start_broker(workdir, node, workers, table)
                started.append(nodes[node])
            started.append(start_broker(workdir, "plain", workers, None))
            for node, other in (("a", "b"), ("b", "a")):
                wait_for(
                    f"node {node} linked to {other}",
                    lambda n=node, o=other: linked(nodes[n], o, workers),
                    nodes[node].process,
                )
            yield Brokers(nats, monitor, nodes["a"], nodes["b"], started[-1])
        finally:
            for process in reversed(started):
                process.stop()


# -- measuring --------------------------------------------------------------------------


def varz(monitor: int) -> tuple[float, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=2) as answer:
        data = json.loads(answer.read())
    return float(data["in_msgs"]), float(data["out_msgs"])


@dataclass
class Sampler:
    """CPU seconds per group of processes (each a tree) and NATS's message counters, over
    time. A sample is (monotonic time, CPU per group, NATS in, NATS out)."""

    roots: Mapping[str, int]
    monitor: int | None
    samples: list[tuple[float, dict[str, float], float, float]] = field(default_factory=list)
    _cpu: dict[int, float] = field(default_factory=dict)
    _group: dict[int, str] = field(default_factory=dict)

    def sample(self) -> None:
        for group, root in self.roots.items():
            for pid in [root, *descendants(root)]:
                seconds = cpu_seconds(pid)
                if seconds is not None:
                    self._cpu[pid] = seconds  # a process gone keeps its last reading
                    self._group[pid] = group
        totals = {group: 0.0 for group in self.roots}
        for pid, seconds in self._cpu.items():
            totals[self._group[pid]] += seconds
        nats_in, nats_out = varz(self.monitor) if self.monitor is not None else (0.0, 0.0)
        self.samples.append((time.monotonic(), totals, nats_in, nats_out))

    def total(self) -> float:
        return sum(self.samples[-1][1].values())

    def at(self, moment: float) -> tuple[dict[str, float], float, float]:
        """The readings at `moment`, interpolated between the samples around it."""
        before = [s for s in self.samples if s[0] <= moment] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= moment] or self.samples[-1:]
        (t0, cpu0, in0, out0), (t1, cpu1, in1, out1) = before[-1], after[0]
        share = (moment - t0) / (t1 - t0) if t1 > t0 else 0.0

        def mix(x: float, y: float) -> float:
            return x + (y - x) * share

        return {g: mix(cpu0[g], cpu1[g]) for g in cpu0}, mix(in0, in1), mix(out0, out1)

    def wait_quiet(self, timeout: float) -> float:
        """Sample until the processes together used under QUIET_CPU_S in QUIET_WINDOW (or
        `timeout` passed); returns when they were last seen busy."""
        started = time.monotonic()
        self.sample()
        last = self.total()
        while time.monotonic() - started < timeout:
            time.sleep(QUIET_WINDOW)
            self.sample()
            now = self.total()
            if now - last < QUIET_CPU_S:
                break
            last = now
        return time.monotonic()


@contextmanager
def sampling(sampler: Sampler) -> Iterator[None]:
    done = threading.Event()

    def loop() -> None:
        while not done.wait(SAMPLE_EVERY):
            sampler.sample()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


GENERATOR_FIGURES = (
    "sent", "received", "expected", "delivered_pct", "duration_s", "recv_rate", "ack_rate",
    "lat_p50_ms", "lat_p99_ms", "lat_max_ms", "seq_gaps", "out_of_order", "gen_cpu_pct",
    "host_other_pct", "end",
)  # fmt: skip


def measure(
    generator: Path, arguments: Sequence[str], setup: Brokers, placement: str
) -> dict[str, Any]:
    """One run of the generator with `placement`; the record of it."""
    if placement == "plain":
        roots = {"plain": setup.plain.process.pid}
        pub_port = sub_port = setup.plain.port
        monitor = None
    else:
        roots = {"a": setup.a.process.pid, "b": setup.b.process.pid}
        roots["nats"] = setup.nats.process.pid
        pub_port = setup.a.port
        sub_port = setup.b.port if placement == "across" else setup.a.port
        monitor = setup.monitor
    sampler = Sampler(roots, monitor)
    sampler.wait_quiet(timeout=15)
    argv = [str(generator), *arguments, "--port", str(pub_port), "--sub-port", str(sub_port)]
    argv += ["--broker-pid", str(roots.get("a", roots.get("plain")))]
    argv += ["--drain-idle", str(DRAIN_IDLE), "--drain-max", "20", "--settle", "0.5"]
    argv += ["--timeout", str(GENERATOR_TIMEOUT - 15)]
    with sampling(sampler):
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=GENERATOR_TIMEOUT, check=False
        )
        exited = time.monotonic()
    quiet = sampler.wait_quiet(timeout=15)
    lines = done.stdout.strip().splitlines()
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    record: dict[str, Any] = {"placement": placement, "ok": bool(result.get("ok"))}
    if not record["ok"]:
        record["error"] = result.get("error") or done.stderr[-300:]
        return record
    # The generator's first publish: its last delivery (it exits right after it, or after
    # --drain-idle without progress) minus the duration it reports.
    last = exited - (DRAIN_IDLE if result.get("end") == "idle" else 0.0)
    first = last - float(result["duration_s"])
    cpu0, in0, out0 = sampler.at(first)
    cpu1, in1, out1 = sampler.at(quiet)
    used = {group: round(cpu1[group] - cpu0[group], 4) for group in cpu0}
    deliveries = int(result["received"])
    record.update(
        deliveries=deliveries,
        rate=float(result["recv_rate"]),
        cpu_s=round(sum(used.values()), 4),
        cpu_by_group=used,
        cpu_us_per_delivery=sum(used.values()) * 1e6 / deliveries if deliveries else None,
        measured_s=round(quiet - first, 3),
        nats_in_msgs=round(in1 - in0) if monitor is not None else None,
        nats_out_msgs=round(out1 - out0) if monitor is not None else None,
        generator={key: result.get(key) for key in GENERATOR_FIGURES},
    )
    return record


# -- the table --------------------------------------------------------------------------


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def cell(value: float | None, digits: int = 2, suffix: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M{suffix}"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.0f}k{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def paired_ratios(
    runs: Sequence[Mapping[str, Any]], scenario: str, placement: str, to: str
) -> list[float]:
    """Per repetition, `placement`'s CPU per delivery over `to`'s in the same repetition."""
    by = {(r["placement"], r["rep"]): float(r["cpu_us_per_delivery"]) for r in runs}
    return [
        by[(placement, rep)] / by[(to, rep)]
        for (name, rep) in by
        if name == placement and (to, rep) in by
    ]


def nats_cell(mine: Sequence[Mapping[str, Any]]) -> str:
    """NATS messages in and out (medians), and deliveries per message in when they crossed."""
    if not any(r.get("nats_in_msgs") is not None for r in mine):
        return "-"
    in_ = median([float(r["nats_in_msgs"]) for r in mine])
    out = median([float(r["nats_out_msgs"]) for r in mine])
    text = f"{cell(in_, 0)} / {cell(out, 0)}"
    if mine[0]["placement"] == "across":
        per = median([r["deliveries"] / r["nats_in_msgs"] for r in mine if r["nats_in_msgs"]])
        text += f" ({cell(per, 0)})"
    return text


def markdown(runs: Sequence[Mapping[str, Any]], workers: int) -> str:
    """One row per scenario and placement, medians over the repetitions; the ratios are
    each repetition's own (placement / same node, placement / plain), then their median."""
    ok = [r for r in runs if r["ok"] and r["workers"] == workers]
    lines = [
        "| scenario | placement | deliveries/s | CPU µs per delivery | / same node | / plain "
        "| NATS msgs in / out (deliveries per msg in) | p50 ms | p99 ms | runs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        those = [r for r in ok if r["scenario"] == scenario]
        for placement in PLACEMENTS:
            mine = [r for r in those if r["placement"] == placement]
            if not mine:
                continue
            cpu = [float(r["cpu_us_per_delivery"]) for r in mine]
            same = median(paired_ratios(those, scenario, placement, "same"))
            plain = median(paired_ratios(those, scenario, placement, "plain"))
            latency = ["-", "-"]
            if scenario == "latency":
                latency = [
                    cell(median([float(r["generator"][key]) for r in mine]), 3)
                    for key in ("lat_p50_ms", "lat_p99_ms")
                ]
            lines.append(
                f"| {TITLES[scenario]} | {placement} | {cell(median([r['rate'] for r in mine]))} "
                f"| {cell(median(cpu))} [{cell(min(cpu))}-{cell(max(cpu))}] "
                f"| {cell(same)} | {cell(plain)} | {nats_cell(mine)} "
                f"| {latency[0]} | {latency[1]} | {len(mine)} |"
            )
    return "\n".join(lines)


# -- the series -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.cluster_bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--workers", type=int, default=1, help="per node and plain broker")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5, help="publishing seconds per run")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    stamp = time.strftime("%Y%m%dT%H%MZ", time.gmtime())
    parser.add_argument(
        "--out", type=Path, default=RESULTS_DIR / f"cluster-bench-{stamp}.jsonl",
        help="JSON lines appended here",
    )  # fmt: skip
    parser.add_argument("--build-dir", type=Path, default=BUILD_DIR)
    parser.add_argument("--harness", type=Path, default=DEFAULT_HARNESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path(NATS_SERVER).exists():
        print("nats-server is not installed (Debian package nats-server)", file=sys.stderr)
        return 2
    generator = build_generator(args.build_dir)
    own = load_harness(args.harness).scenarios(args.duration)
    scenarios = args.scenarios.split(",")
    revision = git_revision()
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        order = PLACEMENTS[rep % 3 :] + PLACEMENTS[: rep % 3]
        with brokers(args.workers, rep) as setup:
            for scenario in scenarios:
                for placement in order:
                    run = {"scenario": scenario, "workers": args.workers, "rep": rep}
                    run |= measure(generator, own[scenario][0], setup, placement)
                    run["revision"] = revision
                    run["python"] = PYTHON  # the nodes' and the plain broker's
                    print(json.dumps(run), file=sys.stderr)
                    runs.append(run)
                    with args.out.open("a", encoding="utf-8") as out:
                        out.write(json.dumps(run) + "\n")
    print(markdown(runs, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
