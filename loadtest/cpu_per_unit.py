"""`python -m loadtest.cpu_per_unit`: the broker's CPU per unit of work, every process counted.

What a pool costs does not depend on free cores: a pool whose CPU per delivered message and
per connection stays near one process's scales with cores on a bigger machine, as long as no
single process (the supervisor, the store) carries a share that grows with the workers. This
command measures that on any machine, however few cores it has.

For every `--workers` count (default 1, 2, 4) and every scenario it starts a fresh broker,
runs the generator of `../shared/bench` (`mqttbench`, built on first use) once against it,
and counts the CPU seconds (user + system) of every process of the broker, from just before
the generator starts until the broker is quiet again after it ends:

- `fanin_qos0`: the harness's QoS 0 fan-in (10 publishers, 1 subscriber); unit: a message
  delivered to the subscriber;
- `fanout`: the harness's 1 -> 100 fan-out; unit: a delivery. The connections each worker
  holds are counted while it runs, so the table says whether subscribers were on every
  worker;
- `storm`: `--connections` clients connect (at most 100 handshakes outstanding), stay
  `--hold` seconds, and disconnect; unit: a connection, its whole life.

Runs are interleaved: each repetition runs every scenario once per worker count, with the
worker counts' order rotated. The Markdown table (stdout) gives per scenario and worker count
the median CPU per unit, the median of each repetition's ratio to one process, and each
process's share of the CPU (supervisor, store, each worker). One JSON line per run goes to
`--out` (default `loadtest/results/cpu-per-unit-<UTC>.jsonl`). Loopback only; every run is
bounded by the generator's own limits. docs/loadtest.md says how to read it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from loadtest.bench import BUILD_DIR, DEFAULT_HARNESS, RESULTS_DIR, ROOT, git_revision, load_harness
from loadtest.tree_cpu import TreeSampler, sample_in_background

logger = logging.getLogger("loadtest.cpu_per_unit")

SCENARIOS = ("fanin_qos0", "fanout", "storm")
TITLES = {
    "fanin_qos0": ("QoS 0 fan-in", "delivered message"),
    "fanout": ("fan-out 1→100", "delivery"),
    "storm": ("connection storm", "connection"),
}
PORT = 19880
BROKER_COMMAND = (
    "env PYTHONPATH={root} {python} -m actors.main --host 127.0.0.1 --port {port}"
    " --log-level warning --workers {workers} --data-dir {workdir}/data --http-port 0"
)
QUIET_CPU_S = 0.01  # the broker is quiet when all its processes used less in QUIET_WINDOW_S
QUIET_WINDOW_S = 0.25
SAMPLE_EVERY_S = 0.1
GENERATOR_TIMEOUT_S = 300  # beyond the generator's own bounds (its --timeout is 120 s)
FANOUT_CONNECTIONS = 101  # the harness's fan-out: one publisher, 100 subscribers
# What the records keep of the generator's own JSON line.
GENERATOR_FIGURES = (
    "argv", "sent", "received", "delivered_pct", "connected", "gen_cpu_pct", "host_other_pct",
    "duration_s",
)  # fmt: skip


# -- the pure part: from CPU samples to the table ---------------------------------------


def cpu_used(before: Mapping[int, float], after: Mapping[int, float]) -> dict[int, float]:
    """CPU seconds each process used between two samples: a process first seen after
    `before` used all of its time in between (it was started then)."""
    return {pid: seconds - before.get(pid, 0.0) for pid, seconds in after.items()}


def by_role(used: Mapping[int, float], roles: Mapping[int, str]) -> dict[str, float]:
    """CPU seconds per role; a restarted worker's processes add up under its one role. A
    process with `--workers 1` on its command line (role "broker") that has workers beside it
    is their supervisor: a pool of one."""
    pooled = any(name.startswith("worker ") for name in roles.values())
    totals: dict[str, float] = {}
    for pid, seconds in used.items():
        name = roles.get(pid, "gone")
        if name == "broker" and pooled:
            name = "supervisor"
        totals[name] = totals.get(name, 0.0) + seconds
    return totals


@dataclass(frozen=True)
class Run:
    """One scenario on one freshly started broker."""

    scenario: str
    workers: int
    rep: int
    units: int  # deliveries or connections
    rate: float  # units per second, as the generator measured them
    cpu: dict[str, float]  # CPU seconds per role

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu.values())

    @property
    def us_per_unit(self) -> float | None:
        return self.cpu_s * 1e6 / self.units if self.units else None


def role_order(name: str) -> tuple[int, int, str]:
    """Supervisor, store, then the workers by number (one process's "broker" with them)."""
    first = {"supervisor": 0, "store": 1}.get(name)
    if first is not None:
        return (first, 0, name)
    number = name.removeprefix("worker ")
    return (2, int(number) if number.isdigit() else -1, name)


def shares(runs: Iterable[Run]) -> dict[str, float]:
    """Each role's part of the CPU these runs used together, in per cent."""
    totals: dict[str, float] = {}
    for run in runs:
        for name, seconds in run.cpu.items():
            totals[name] = totals.get(name, 0.0) + seconds
    whole = sum(totals.values())
    if not whole:
        return {}
    return {name: 100 * totals[name] / whole for name in sorted(totals, key=role_order)}


def figure(value: float) -> str:
    """Three significant digits, at most, as the harness's table prints them."""
    if value >= 100_000:
        return f"{value / 1000:.0f}k"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def spread(values: Sequence[float]) -> str:
    """`median [min-max]`, or the one value."""
    middle = figure(statistics.median(values))
    if len(values) == 1:
        return middle
    return f"{middle} [{figure(min(values))}-{figure(max(values))}]"


def ratios_to_one_process(runs: Sequence[Run], scenario: str, workers: int) -> list[float]:
    """Per repetition: this worker count's CPU per unit over one process's."""
    base = {
        run.rep: run.us_per_unit
        for run in runs
        if run.scenario == scenario and run.workers == 1 and run.us_per_unit
    }
    return [
        run.us_per_unit / base[run.rep]
        for run in runs
        if run.scenario == scenario and run.workers == workers and run.us_per_unit
        if run.rep in base
    ]


def markdown(runs: Sequence[Run], placement: Mapping[tuple[str, int], bool] | None = None) -> str:
    """The table: a row per scenario and worker count. `placement`: whether every worker held
    a connection of the scenario in every run (marked "not every worker" when not)."""
    lines = [
        "| scenario | workers | CPU µs per unit | / one process | units/s | CPU share %, "
        "supervisor / store / each worker | runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        title, unit = TITLES[scenario]
        for workers in sorted({run.workers for run in runs if run.scenario == scenario}):
            these = [run for run in runs if run.scenario == scenario and run.workers == workers]
            costs = [run.us_per_unit for run in these if run.us_per_unit is not None]
            if not costs:
                continue
            ratios = ratios_to_one_process(runs, scenario, workers)
            part = shares(these)
            rest = [figure(part[name]) for name in part if name not in ("supervisor", "store")]
            share = " / ".join(
                [
                    figure(part["supervisor"]) if "supervisor" in part else "-",
                    figure(part.get("store", 0.0)),
                    ", ".join(rest),
                ]
            )
            note = "" if (placement or {}).get((scenario, workers), True) else " (not every worker)"
            lines.append(
                f"| {title}{note}, per {unit} | {workers} | {spread(costs)} | "
                f"{spread(ratios) if ratios else '-'} | {spread([run.rate for run in these])} | "
                f"{share} | {len(these)} |"
            )
    return "\n".join(lines)


# -- running brokers and the generator -----------------------------------------------------


def generator_arguments(harness: ModuleType, args: argparse.Namespace) -> dict[str, list[str]]:
    """The generator's arguments per scenario: the harness's own for the message scenarios."""
    own = harness.scenarios(args.duration)
    return {
        "fanin_qos0": list(own["fanin_qos0"][0]),
        "fanout": list(own["fanout"][0]),
        "storm": ["connections", "--conns", str(args.connections), "--hold", str(args.hold)],
    }


def listening_sockets(port: int) -> int:
    """How many sockets listen on 127.0.0.1:`port` (a pool: one per worker once it serves)."""
    count = 0
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def connections_per_worker(sampler: TreeSampler, port: int) -> dict[str, int]:
    """Established client connections each process of the broker holds on `port`."""
    held: dict[str, int] = {}
    for pid, name in list(sampler.roles.items()):  # the sampling thread adds to it
        if name in ("supervisor", "store"):
            continue
        try:
            found = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        held[name] = sum(
            1 for c in found if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
        )
    return held


def wait_until(condition: Callable[[], bool], timeout: float, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()


def wait_quiet(sampler: TreeSampler, timeout: float) -> float:
    """Sample until the broker's processes together used under QUIET_CPU_S in a window of
    QUIET_WINDOW_S (or `timeout` passed); returns the seconds waited."""
    started = time.monotonic()
    sampler.sample()
    last = sum(sampler.cpu.values())
    while time.monotonic() - started < timeout:
        time.sleep(QUIET_WINDOW_S)
        sampler.sample()
        now = sum(sampler.cpu.values())
        if now - last < QUIET_CPU_S:
            break
        last = now
    return time.monotonic() - started


@dataclass(frozen=True)
class Setup:
    """What every run of a series shares."""

    harness: ModuleType  # ../shared/bench/bench.py: its Broker starts and stops brokers
    generator: str  # the mqttbench binary
    arguments: dict[str, list[str]]  # the generator's, per scenario
    port: int
    logdir: str  # the brokers' output


def measure(setup: Setup, scenario: str, workers: int, rep: int) -> tuple[Run, dict[str, Any]]:
    """One run: a fresh broker, the generator once, the CPU of every broker process."""
    command = (
        BROKER_COMMAND.replace("{root}", str(ROOT))
        .replace("{python}", sys.executable)
        .replace("{workers}", str(workers))
    )
    port, generator = setup.port, setup.generator
    broker = setup.harness.Broker(f"w{workers}", port, command, generator, setup.logdir)
    broker.start()
    process: subprocess.Popen[str] | None = None
    try:
        if not wait_until(lambda: listening_sockets(port) >= workers, timeout=30):
            raise RuntimeError(f"{workers} workers did not all listen on {port} within 30 s")
        sampler = TreeSampler(broker.proc.pid)
        wait_quiet(sampler, timeout=30)  # start-up work done
        before = dict(sampler.cpu)
        stop_sampling = sample_in_background(sampler.sample, every=SAMPLE_EVERY_S)
        argv = [generator, *setup.arguments[scenario], "--port", str(port)]
        argv += ["--broker-pid", str(broker.pid)]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        placement = watch_placement(process, sampler, port) if scenario == "fanout" else None
        out, err = process.communicate(timeout=GENERATOR_TIMEOUT_S)
        stop_sampling()
        settle_s = wait_quiet(sampler, timeout=15)
        used = cpu_used(before, sampler.cpu)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        broker.stop()
    result = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    if not result.get("ok"):
        raise RuntimeError(f"generator failed (exit {process.returncode}): {err[-300:]}")
    units = int(result["connected"] if scenario == "storm" else result["received"])
    rate = float(result["connect_rate"] if scenario == "storm" else result["recv_rate"])
    run = Run(scenario, workers, rep, units, rate, by_role(used, sampler.roles))
    record = {
        "scenario": scenario,
        "workers": workers,
        "rep": rep,
        "units": units,
        "rate": rate,
        "cpu_s": round(run.cpu_s, 3),
        "cpu_us_per_unit": run.us_per_unit,
        "cpu_by_role": {name: round(seconds, 3) for name, seconds in run.cpu.items()},
        "processes": [
            {"pid": pid, "role": sampler.roles.get(pid, "gone"), "cpu_s": round(seconds, 3)}
            for pid, seconds in sorted(used.items())
        ],
        "connections_per_worker": placement,
        "settle_s": round(settle_s, 2),
        "generator": {key: result.get(key) for key in GENERATOR_FIGURES},
    }
    return run, record


def watch_placement(
    process: subprocess.Popen[str], sampler: TreeSampler, port: int
) -> dict[str, int]:
    """The connections each worker holds once the fan-out's 101 are all open (or the
    generator ended first: then the last count)."""
    held: dict[str, int] = {}
    deadline = time.monotonic() + 30
    while process.poll() is None and time.monotonic() < deadline:
        held = connections_per_worker(sampler, port)
        if sum(held.values()) >= FANOUT_CONNECTIONS:
            break
        time.sleep(0.2)
    return held


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    def numbers(text: str) -> list[int]:
        return [int(part) for part in text.split(",") if part]

    def names(text: str) -> list[str]:
        return [part for part in text.split(",") if part]

    parser = argparse.ArgumentParser(
        prog="python -m loadtest.cpu_per_unit", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--workers", type=numbers, default=[1, 2, 4], help="default 1,2,4")
    parser.add_argument(
        "--scenarios", type=names, default=list(SCENARIOS), help=f"default {','.join(SCENARIOS)}"
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--duration", type=int, default=10, help="publishing seconds (default 10)")
    parser.add_argument("--connections", type=int, default=10_000, help="storm (default 10000)")
    parser.add_argument("--hold", type=float, default=1.0, help="storm: seconds held (default 1)")
    parser.add_argument("--port", type=int, default=PORT, help=f"broker port (default {PORT})")
    parser.add_argument("--out", type=Path, help="JSON lines appended here")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown or not args.workers or min(args.workers) < 1 or args.reps < 1:
        parser.error(f"scenarios among {', '.join(SCENARIOS)} (unknown: {unknown}); "
                     "worker counts and --reps at least 1")  # fmt: skip
    return args


def run_series(setup: Setup, args: argparse.Namespace, out: Path) -> str:
    """Every repetition, scenario and worker count, interleaved; the table of them all."""
    runs: list[Run] = []
    placement: dict[tuple[str, int], bool] = {}
    commit = git_revision()
    for rep in range(args.reps):
        turn = rep % len(args.workers)
        for scenario in args.scenarios:
            for workers in args.workers[turn:] + args.workers[:turn]:
                run, record = measure(setup, scenario, workers, rep)
                record["commit"] = commit
                record["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                with out.open("a", encoding="utf-8") as lines:
                    lines.write(json.dumps(record) + "\n")
                runs.append(run)
                held = record["connections_per_worker"]
                if held is not None:
                    everywhere = len(held) == workers and all(held.values())
                    key = (scenario, workers)
                    placement[key] = placement.get(key, True) and everywhere
                logger.info(
                    "rep %d %s workers=%d: %d units, %.1f CPU us each",
                    rep, scenario, workers, run.units, run.us_per_unit or 0,
                )  # fmt: skip
    return markdown(runs, placement)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    harness_path = Path(os.environ.get("MQTT_BENCH_HARNESS", DEFAULT_HARNESS))
    if not harness_path.is_file():
        logger.error("benchmark harness %s not found: set MQTT_BENCH_HARNESS", harness_path)
        return 2
    harness = load_harness(harness_path)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by broker and generator
    setup = Setup(
        harness=harness,
        generator=harness.build_gen(str(BUILD_DIR)),
        arguments=generator_arguments(harness, args),
        port=args.port,
        logdir=tempfile.mkdtemp(prefix="cpu-per-unit-logs-"),
    )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or RESULTS_DIR / f"cpu-per-unit-{stamp}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    logger.info("results -> %s (broker logs in %s)", out, setup.logdir)
    sys.stdout.write(run_series(setup, args, out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
