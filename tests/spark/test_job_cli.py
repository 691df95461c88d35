"""`python -m spark.stream` as a user runs it: killed with SIGKILL in the middle of a batch and
started again, with `--conf` passed through and one log line per batch, from nothing but the
job's zip, pyspark and the standard library (`python -S`, as on a cluster's driver). Plus its
small parsers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from spark.session import parse_conf
from spark.stream import parse_duration
from tests.spark.conftest import EventWriter
from tests.spark.readers import (
    CLIENT_SESSIONS,
    TOPIC_TRAFFIC,
    batch_totals,
    with_duckdb,
    with_pandas,
)
from tests.spark.synthetic import (
    START,
    expected_client_sessions,
    expected_topic_traffic,
    synthetic_events,
)

BATCH_LINE = re.compile(
    r"INFO __main__: batch (\d+): (\d+) lines, (\d+) corrupt, (\d+) late rows dropped, "
    r"[\d.]+ s \(\d+ lines/s\), watermark (\S+)"
)
SPARK_INFO_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", re.MULTILINE)


def _job_env(python_path: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": python_path}
    env.pop("PYSPARK_GATEWAY_PORT", None)  # a plain run, not a spark-submit driver
    return env


def _wait_for(path: Path, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, "the job ended before the batch to kill it in"
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.02)


# Two job runs, each its own JVM: 70 s alone on two slow cores, past the suite's 120 s
# default beside the rest of the suite; the bound is the sum of the test's own waits.
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_job_killed_mid_batch_resumes_exactly_and_logs_each_batch(
    tmp_path: Path, write_events: EventWriter, cluster_python_path: str
) -> None:
    events, output = tmp_path / "events", tmp_path / "out"
    files = [synthetic_events(seed, 200, START, 7200) for seed in (21, 22, 23)]
    for number, records in enumerate(files):
        write_events(events, f"events-{number}.json", records)
    command = [
        sys.executable,
        "-S",  # no site-packages: only the zip, pyspark and py4j (cluster_python_path)
        "-m",
        "spark.stream",
        "--input",
        str(events),
        "--output",
        str(output),
        "--once",
        "--max-files-per-trigger",
        "1",
        "--watermark",
        "1 day",
        "--conf",
        "spark.sql.shuffle.partitions=3",
    ]
    env = _job_env(cluster_python_path)
    killed = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the JVM dies with it
    )
    try:
        _wait_for(output / "_stage" / TOPIC_TRAFFIC / "batch_id=1", killed, timeout=240)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    assert killed.returncode == -signal.SIGKILL

    completed = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    log = completed.stderr

    everything = [record for records in files for record in records]
    for read in (with_pandas, with_duckdb):
        assert read(output, TOPIC_TRAFFIC) == expected_topic_traffic(everything)
        assert read(output, CLIENT_SESSIONS) == expected_client_sessions(everything)
    assert batch_totals(output) == (len(everything), 0, 0)

    # batch 1 (interrupted) is replayed, then batch 2 runs: one line each, then the total
    batches = [match.groups() for match in BATCH_LINE.finditer(log)]
    assert [(int(b), int(lines)) for b, lines, *_ in batches] == [(1, 200), (2, 200)], log
    assert re.search(r"processed 400 lines in 2 batches in [\d.]+ s", log), log
    assert re.search(r"spark session ready in [\d.]+ s", log), log
    assert "INFO py4j" not in log
    assert not SPARK_INFO_LINE.search(log), log
    # --conf reached the session: the checkpoint records the shuffle partitions it pinned
    offsets = (output / "_checkpoints" / "offsets" / "0").read_text()
    assert '"spark.sql.shuffle.partitions":"3"' in offsets


def test_the_cluster_python_path_lacks_what_a_cluster_lacks(
    tmp_path: Path, cluster_python_path: str
) -> None:
    completed = subprocess.run(
        [sys.executable, "-S", "-c", "import spark.json_lines"],
        cwd=tmp_path,
        env=_job_env(cluster_python_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 1
    assert "ModuleNotFoundError: No module named 'orjson'" in completed.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 minute", timedelta(minutes=1)),
        ("10 minutes", timedelta(minutes=10)),
        ("1 hour 30 minutes", timedelta(minutes=90)),
        ("500 milliseconds", timedelta(milliseconds=500)),
        ("2 Seconds", timedelta(seconds=2)),
        ("1day", timedelta(days=1)),
    ],
)
def test_durations_read_like_spark_intervals(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "10", "minutes", "0 minutes", "1 fortnight", "1 minute x"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_conf_pairs_split_at_the_first_equals_sign() -> None:
    assert parse_conf(["a.b=1", "spark.x= y=z"]) == {"a.b": "1", "spark.x": " y=z"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_conf(["no-equals-sign"])
