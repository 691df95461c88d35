"""The Locust scenarios, run headless in a subprocess against a real broker; their CSV is read.

Locust monkey-patches socket, threading and time when imported, so it never runs inside the
pytest process: each test starts `python -m locust` and checks the `--csv` statistics.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from tests.support.broker_process import ROOT, BrokerProcess
from tests.support.ports import free_port

LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"
ALL_SCENARIOS = ("telemetry", "fanout", "chat", "connect_storm", "retained")
RETAINED_TOPICS = 20


def run_locust(
    tmp_path: Path, port: int, scenarios: tuple[str, ...], users: int, seconds: int
) -> tuple[subprocess.CompletedProcess[str], dict[tuple[str, str], dict[str, str]], str]:
    """Run Locust; return the process, the stats rows by (Type, Name), the failures CSV."""
    prefix = tmp_path / "locust"
    args = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--stop-timeout", "2",
        "--host", f"mqtt://127.0.0.1:{port}", "--csv", str(prefix), "--only-summary",
        "--mqtt-qos", "0,1,2", "--mqtt-retained-topics", str(RETAINED_TOPICS),
        "--mqtt-topic-prefix", f"test-{tmp_path.name}", "--mqtt-timeout", "3",
        "--mqtt-interval", "0.5",
        *scenarios,
    ]  # fmt: skip
    completed = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 30, check=False
    )
    stats_path = prefix.with_name("locust_stats.csv")
    assert stats_path.is_file(), completed.stderr[-3000:]
    with stats_path.open(encoding="utf-8") as stats_file:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(stats_file)}
    failures = prefix.with_name("locust_failures.csv").read_text(encoding="utf-8")
    return completed, rows, failures


def count(rows: dict[tuple[str, str], dict[str, str]], request_type: str, name: str) -> int:
    row = rows.get((request_type, name))
    assert row is not None, f"no {request_type} {name!r} row in {sorted(rows)}"
    return int(row["Request Count"])


def test_every_scenario_reports_requests_and_no_failures(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    completed, rows, failures = run_locust(tmp_path, broker.port, ALL_SCENARIOS, 10, 5)

    assert rows[("", "Aggregated")]["Failure Count"] == "0", failures
    assert completed.returncode == 0, completed.stderr[-3000:]
    for scenario in ("telemetry", "fanout", "chat", "retained"):
        assert count(rows, "CONNECT", scenario) == 2
    # QoS 0, 1 and 2 publishes complete (write, PUBACK, PUBCOMP) and reach a subscriber
    for qos in (0, 1, 2):
        for scenario in ("fanout", "chat"):
            assert count(rows, "PUBLISH", f"{scenario} qos{qos}") > 0
            assert count(rows, "DELIVER", f"{scenario} qos{qos}") > 0
    assert count(rows, "DELIVER", "telemetry qos0") > 0
    # exactly once: the one fanout subscriber never gets a QoS 2 message twice [MQTT-4.3.3-2]
    assert count(rows, "DELIVER", "fanout qos2") <= count(rows, "PUBLISH", "fanout qos2")
    # connect_storm churns: 2 users, each CONNECT held 0.5 s then reconnecting at once
    assert count(rows, "CONNECT", "connect_storm") >= 8
    # every retained topic arrives with RETAIN=1 after the subscription [MQTT-3.3.1-8]
    assert count(rows, "PUBLISH", "retained seed") == RETAINED_TOPICS
    assert count(rows, "RETAINED", f"retained {RETAINED_TOPICS} topics") >= 2


def test_refused_connections_are_failures_with_reason_and_back_off(tmp_path: Path) -> None:
    closed_port = free_port()  # a loopback port with no listener

    completed, rows, failures = run_locust(tmp_path, closed_port, ("telemetry",), 2, 3)

    assert completed.returncode != 0
    attempts = count(rows, "CONNECT", "telemetry")
    assert rows[("CONNECT", "telemetry")]["Failure Count"] == str(attempts)
    assert "Connection refused" in failures
    # Paho-style backoff (1 s, 2 s, ...): at most 3 attempts per user in 3 s, not a busy loop
    assert 2 <= attempts <= 6
