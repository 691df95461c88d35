"""`python -m loadtest.tls_bench`: this broker and Mosquitto over TLS, with stunnel in front of
the shared C load generator.

The shared harness (`../shared/bench`) speaks plain MQTT only, so each run puts an stunnel in
client mode between its generator and the broker: the generator talks plain MQTT to stunnel,
stunnel talks TLS to the broker's TLS listener (full handshakes: `sessionResume = no`). Both
brokers use one trustme certificate (ECDSA P-256) and the harness's own scenario arguments
(`fanin_qos0`, `conn_2k`), `--broker-pid` pointing at the broker so its CPU is measured, not
stunnel's. Runs alternate brokers, `--reps` times; each on a freshly started broker and
stunnel, stopped afterwards (SIGTERM to the PIDs started here).

Caveat: stunnel's own encryption competes with the broker and the generator for the 2 cores,
the same for both brokers; read the figures as TLS throughput of this set-up, the ratio as the
comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trustme

from loadtest.bench import BUILD_DIR, DEFAULT_HARNESS, ROOT, find_mosquitto, load_harness

BROKER_PORT = 19850
STUNNEL_PORT = 19851
SCENARIOS = ("fanin_qos0", "conn_2k")
HEADLINES = {"fanin_qos0": "recv_rate", "conn_2k": "connect_rate"}
OURS_CONFIG = """\
[limits]
max_queued_messages = 0          # as loadtest/bench-broker.toml (Mosquitto's unbounded queue)
[[listeners]]
type = "tls"
port = {port}
certfile = "server.pem"
keyfile = "server.key"
"""
MOSQUITTO_CONFIG = """\
listener {port} 127.0.0.1
certfile {dir}/server.pem
keyfile {dir}/server.key
allow_anonymous true
max_queued_messages 0
"""
STUNNEL_CONFIG = """\
foreground = yes
pid =
debug = 3
[mqtt]
client = yes
accept = 127.0.0.1:{accept}
connect = 127.0.0.1:{connect}
CAfile = {dir}/ca.pem
verifyChain = yes
checkHost = localhost
sessionResume = no
"""


def write_certificates(directory: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    server = ca.issue_cert("localhost", "127.0.0.1")
    server.private_key_pem.write_to_path(str(directory / "server.key"))
    (directory / "server.pem").write_bytes(b"".join(pem.bytes() for pem in server.cert_chain_pems))


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_broker(name: str, directory: Path, mosquitto: Path) -> subprocess.Popen[bytes]:
    log = (directory / f"{name}.log").open("ab")
    if name == "ours":
        (directory / "ours.toml").write_text(OURS_CONFIG.format(port=BROKER_PORT))
        command = [sys.executable, "-m", "actors.main", "--config", str(directory / "ours.toml")]
        command += ["--log-level", "warning", "--data-dir", str(directory / "data")]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.Popen(command, cwd=directory, stdout=log, stderr=log, env=env)
    conf = directory / "mosquitto.conf"
    conf.write_text(MOSQUITTO_CONFIG.format(port=BROKER_PORT, dir=directory))
    return subprocess.Popen([str(mosquitto), "-c", str(conf)], stdout=log, stderr=log)


def run_once(
    name: str, scenario: tuple[list[str], int], directory: Path, gen: str, mosquitto: Path
) -> dict[str, object]:
    """One generator run (`scenario`: the harness's arguments and timeout) against `name`."""
    arguments, timeout = scenario
    broker = start_broker(name, directory, mosquitto)
    stunnel_conf = directory / "stunnel.conf"
    stunnel_conf.write_text(
        STUNNEL_CONFIG.format(accept=STUNNEL_PORT, connect=BROKER_PORT, dir=directory)
    )
    tunnel: subprocess.Popen[bytes] | None = None
    try:
        wait_for_port(BROKER_PORT, broker)
        tunnel = subprocess.Popen(
            ["stunnel", str(stunnel_conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for_port(STUNNEL_PORT, tunnel)
        result = subprocess.run(
            [
                gen,
                *arguments,
                "--port",
                str(STUNNEL_PORT),
                "--broker-pid",
                str(broker.pid),
                "--timeout",
                str(timeout),
            ],
            capture_output=True,
            text=True,
            timeout=timeout + 30,
            check=True,
        )
        return dict(json.loads(result.stdout.strip().splitlines()[-1]))
    finally:
        if tunnel is not None:
            stop(tunnel)
        stop(broker)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.tls_bench", description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10, help="publishing seconds")
    args = parser.parse_args(argv)
    mosquitto = find_mosquitto(None)
    if mosquitto is None or shutil.which("stunnel") is None:
        print("needs mosquitto and stunnel: apt-get install -y mosquitto stunnel4")
        return 2
    harness = load_harness(DEFAULT_HARNESS)
    gen = harness.build_gen(str(BUILD_DIR))
    scenarios = harness.scenarios(args.duration)
    results: dict[tuple[str, str], list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as temp:
        directory = Path(temp)
        # Mosquitto started as root reads its files as the user `mosquitto`.
        directory.chmod(0o755)
        write_certificates(directory)
        for rep in range(args.reps):
            order = ("ours", "mosquitto") if rep % 2 == 0 else ("mosquitto", "ours")
            for scenario in SCENARIOS:
                for name in order:
                    run = run_once(name, scenarios[scenario], directory, gen, mosquitto)
                    results.setdefault((scenario, name), []).append(run)
                    print(json.dumps({**run, "rep": rep, "bench": scenario, "broker": name}))
    print_table(results)
    return 0


def print_table(results: dict[tuple[str, str], list[dict[str, object]]]) -> None:
    """Medians per scenario and broker, with the broker's CPU time per unit of work (per
    connection, per 1,000 messages): the figure that stays meaningful when stunnel or the
    generator, not the broker, sets the pace."""
    print(
        f"{'scenario':<11} {'broker':<10} {'median/s':>9}  {'runs':<24} {'CPU %':>6} "
        f"{'CPU ms/unit':>11}"
    )
    for (scenario, name), runs in sorted(results.items()):
        values = [float(str(run[HEADLINES[scenario]])) for run in runs]
        cpus = [float(str(run.get("broker_cpu_pct", 0))) for run in runs]
        per_unit = 1000 if scenario.startswith("fanin") else 1
        cost = statistics.median(
            10 * cpu * per_unit / v for cpu, v in zip(cpus, values, strict=True) if v
        )
        shown = ", ".join(f"{value:.0f}" for value in values)
        print(
            f"{scenario:<11} {name:<10} {statistics.median(values):>9.0f}  {shown:<24} "
            f"{statistics.median(cpus):>6.0f} {cost:>11.2f}"
        )
    print("CPU ms/unit: broker CPU milliseconds per connection (conn_2k), per 1,000 messages")


if __name__ == "__main__":
    sys.exit(main())
