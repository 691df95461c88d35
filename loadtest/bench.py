"""`python -m loadtest.bench`: this broker side by side with Mosquitto on ../shared/bench.

Drives the shared harness (`../shared/bench/bench.py`, a C load generator and its driver) as a
subprocess; nothing of it is copied here. One call runs every chosen scenario `--reps` times
on freshly started brokers (ours listed first, so every ratio is "other / ours"), interleaved
and with the order rotated per repetition by the harness, then prints the harness's table and
writes `loadtest/results/bench-<UTC>.jsonl` and `.md`. Everything runs on 127.0.0.1 and every
run is bounded by the harness (messages, seconds, generator timeout). docs/loadtest.md says how
to read the numbers.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

logger = logging.getLogger("loadtest.bench")

ROOT = Path(__file__).resolve().parents[1]
# The interpreter the benches run this broker on (their own): its version and install
PYTHON = f"{platform.python_version()} {sys.base_prefix}"
RESULTS_DIR = ROOT / "loadtest" / "results"
BUILD_DIR = RESULTS_DIR / "tmp" / "mqttbench-build"  # git-ignored
DEFAULT_HARNESS = ROOT.parent / "shared" / "bench" / "bench.py"
OURS_PORT = 19840
# The harness starts brokers in a fresh temporary directory (so `data/` starts empty each run);
# PYTHONPATH makes the checkout importable from there. `env` execs, so the PID stays the broker's.
OURS_COMMAND = (
    "env PYTHONPATH={root} {python} -m actors.main"
    " --host 127.0.0.1 --port {port} --log-level warning"
    " --config {root}/loadtest/bench-broker.toml"
)
MOSQUITTO_COMMAND = "{mosquitto} -c {conf:mosquitto-unbounded-queue.conf}"
SINK_COMMAND = "{gen} sink --port {port} --reflect"  # the generator's own ceiling
PER_RUN_OVERHEAD_S = 100  # harness bounds per run: broker start 30 s, generator +60 s, stop 10 s


@dataclass(frozen=True)
class Opponent:
    name: str
    command: str  # a harness broker command: {port}, {gen}, {conf:NAME} are the harness's
    version: str


def free_port() -> int:
    """A port on 127.0.0.1 free now, for a server a bench starts a moment later."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def load_harness(path: Path) -> ModuleType:
    """The harness module, read for its scenario names and time bounds (not run in-process)."""
    spec = importlib.util.spec_from_file_location("shared_mqtt_bench", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load the benchmark harness {path}")
    module = importlib.util.module_from_spec(spec)
    writes_bytecode, sys.dont_write_bytecode = (
        sys.dont_write_bytecode,
        True,
    )  # ../shared stays as is
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


def find_mosquitto(explicit: str | None) -> Path | None:
    """`--mosquitto`, else `mosquitto` on PATH, else Debian's /usr/sbin/mosquitto."""
    candidates = [explicit] if explicit else [shutil.which("mosquitto"), "/usr/sbin/mosquitto"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def resolve_opponent(against: str, mosquitto: str | None) -> Opponent | None:
    """The broker measured next to ours, or None (logged) when it is not installed."""
    if against == "sink":
        return Opponent("sink", SINK_COMMAND, "mqttbench sink --reflect")
    binary = find_mosquitto(mosquitto)
    if binary is None:
        logger.error(
            "mosquitto is not installed: run `apt-get install -y mosquitto` (do not start its "
            "service: the harness starts its own copy on 127.0.0.1) or pass --mosquitto PATH"
        )
        return None
    probe = subprocess.run(
        [str(binary), "-h"], capture_output=True, text=True, timeout=10, check=False
    )
    version = (probe.stdout or probe.stderr).strip().splitlines()[0]
    command = MOSQUITTO_COMMAND.replace("{mosquitto}", shlex.quote(str(binary)))
    return Opponent("mosquitto", command, version)


def run_command(args: argparse.Namespace, opponent: Opponent, out: Path) -> list[str]:
    """The harness `run` command line: ours first, then the opponent, on adjacent ports."""
    ours = OURS_COMMAND.replace("{python}", shlex.quote(sys.executable)).replace(
        "{root}", shlex.quote(str(ROOT))
    )
    return [
        sys.executable, str(args.harness), "run",
        "--reps", str(args.reps),
        "--scenarios", ",".join(args.scenarios),
        "--duration", str(args.duration),
        "--build-dir", str(BUILD_DIR),
        "--out", str(out),
        "--broker", "ours", str(args.port), ours,
        "--broker", opponent.name, str(args.port + 1), opponent.command,
    ]  # fmt: skip


def time_bound(harness: ModuleType, args: argparse.Namespace) -> float:
    """Upper bound of the whole run from the harness's own per-run bounds."""
    timeouts = harness.scenarios(args.duration)
    per_rep = sum(timeouts[name][1] + PER_RUN_OVERHEAD_S + args.duration for name in args.scenarios)
    return float(2 * args.reps * per_rep)


def git_revision() -> str:
    """The commit measured, marked when the checkout has uncommitted changes."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
        timeout=10, check=False,
    )  # fmt: skip
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, timeout=10,
        check=False,
    )  # fmt: skip
    revision = head.stdout.strip() or "unknown"
    return f"{revision} + uncommitted changes" if dirty.stdout.strip() else revision


def write_markdown(path: Path, args: argparse.Namespace, opponent: Opponent, table: str) -> None:
    """A short record of the run: what, where, which versions, the harness's table."""
    load = Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3]
    lines = [
        f"# ours vs {opponent.name}: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"- command: `python -m loadtest.bench --against {args.against} --reps {args.reps} "
        f"--scenarios {','.join(args.scenarios)} --duration {args.duration}`",
        f"- ours: commit {git_revision()}; {opponent.name}: {opponent.version}",
        f"- machine: {os.cpu_count()} CPUs, load average after the run {' '.join(load)}",
        f"- raw runs: `{path.with_suffix('.jsonl').name}`; ratios are {opponent.name} / ours",
        "",
        "```",
        table.rstrip(),
        "```",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def parse_args(argv: list[str] | None, scenario_names: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    parser.add_argument("--against", choices=("mosquitto", "sink"), default="mosquitto")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument(
        "--scenarios",
        type=lambda text: [name for name in text.split(",") if name],
        default=scenario_names,
        help=f"comma list of {','.join(scenario_names)} (default all)",
    )
    parser.add_argument("--duration", type=int, default=10, help="publishing seconds per run")
    parser.add_argument("--port", type=int, default=OURS_PORT, help="ours; opponent port + 1")
    parser.add_argument("--mosquitto", help="mosquitto binary (default: PATH, /usr/sbin)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.scenarios) - set(scenario_names))
    if unknown or not args.scenarios or args.reps < 1 or args.duration < 1:
        parser.error(
            f"scenarios must be among {', '.join(scenario_names)} (got unknown {unknown}); "
            "--reps and --duration must be at least 1"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    harness_path = Path(os.environ.get("MQTT_BENCH_HARNESS", DEFAULT_HARNESS))
    if not harness_path.is_file():
        logger.error("benchmark harness %s not found: set MQTT_BENCH_HARNESS", harness_path)
        return 2
    harness = load_harness(harness_path)
    args = parse_args(argv, list(harness.SCENARIO_ORDER))
    args.harness = harness_path
    opponent = resolve_opponent(args.against, args.mosquitto)
    if opponent is None:
        return 2
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / time.strftime("bench-%Y%m%dT%H%M%SZ.jsonl", time.gmtime())
    bound = time_bound(harness, args)
    logger.info(
        "running %s against ours (at most %.0f s); results -> %s", opponent.name, bound, out
    )
    run = subprocess.run(
        run_command(args, opponent, out), cwd=ROOT, stdout=subprocess.DEVNULL, timeout=bound,
        check=False,
    )  # fmt: skip
    if run.returncode or not out.is_file():
        logger.error("the harness failed with exit code %d; its log is above", run.returncode)
        return 1
    report = subprocess.run(
        [sys.executable, str(harness_path), "report", "--order", f"ours,{opponent.name}", str(out)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    sys.stdout.write(report.stdout)
    write_markdown(out.with_suffix(".md"), args, opponent, report.stdout)
    logger.info("table written to %s", out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
