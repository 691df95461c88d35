"""The job on a real Spark standalone cluster, started from pip's pyspark as docs/events.md says.

A master and one worker run from `spark-class` (SPARK_HOME = pip's pyspark directory, every
service bound to 127.0.0.1, the master's REST server off); the job is submitted with
`spark-submit --py-files broker.zip spark/stream.py` from a directory other than the
repository. The driver's Python is `python -S` with only pyspark and py4j on its path: the
zip must carry everything else. The tables must equal the local run's on the same files.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark.stream import StreamOptions, run
from tests.spark.conftest import REPO, EventWriter
from tests.spark.readers import (
    CLIENT_SESSIONS,
    TOPIC_TRAFFIC,
    batch_totals,
    with_duckdb,
    with_pandas,
)
from tests.spark.synthetic import START, expected_topic_traffic, synthetic_events
from tests.support.ports import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
START_TIMEOUT_SECONDS = 120.0


def _spark_home() -> Path:
    import pyspark  # noqa: PLC0415

    return Path(pyspark.__file__).parent


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in {log}"
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group started for `process` (the JVM under spark-class)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)


@contextmanager
def standalone_cluster(directory: Path, env: dict[str, str]) -> Iterator[tuple[str, float]]:
    """A master and a worker (2 cores, 2 GiB); yields the master URL and the start-up seconds."""
    spark_class = str(_spark_home() / "bin" / "spark-class")
    port = free_port()
    url = f"spark://{LOOPBACK}:{port}"
    started = time.monotonic()
    processes: list[subprocess.Popen[bytes]] = []

    def launch(name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = directory / f"{name}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [spark_class, f"org.apache.spark.deploy.{name}", "--host", LOOPBACK, *args],
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        processes.append(process)
        return process, log

    try:
        master, master_log = launch("master.Master", "--port", str(port), "--webui-port", "0")
        _wait_for_line(master_log, "I have been elected leader", master)
        worker, worker_log = launch(
            "worker.Worker",
            "--port",
            "0",
            "--webui-port",
            "0",
            "--cores",
            "2",
            "--memory",
            "2g",
            url,
        )
        _wait_for_line(worker_log, "Successfully registered with master", worker)
        yield url, time.monotonic() - started
    finally:
        for process in reversed(processes):
            _stop(process)


# A standalone master and worker, then spark-submit's own JVM and executor: 60-110 s on two
# slow cores, past the suite's 120 s default with the set-up.
@pytest.mark.timeout(360)
def test_a_standalone_cluster_run_gives_the_local_run_tables(
    spark: SparkSession,
    tmp_path: Path,
    write_events: EventWriter,
    job_zip: Path,
    spark_libraries: Path,
) -> None:
    events = tmp_path / "events"
    files = [synthetic_events(seed, 300, START, 7200) for seed in (31, 32, 33)]
    for number, records in enumerate(files):
        write_events(events, f"events-{number}.json", records)
    local, on_cluster = tmp_path / "local", tmp_path / "cluster"
    run(
        spark,
        StreamOptions(
            input_dir=str(events),
            output_dir=str(local),
            once=True,
            max_files_per_trigger=1,
            watermark="1 day",  # the files overlap in time: nothing is late here
        ),
    )

    driver_python = tmp_path / "python-S"  # the venv's interpreter without its site-packages
    driver_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    driver_python.chmod(0o755)
    env = {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": str(driver_python),
        "PYSPARK_DRIVER_PYTHON": str(driver_python),
        "PYTHONPATH": str(spark_libraries),
    }
    env.pop("PYSPARK_GATEWAY_PORT", None)
    with standalone_cluster(tmp_path, env) as (master, startup_seconds):
        submitted = time.monotonic()
        completed = subprocess.run(
            [
                str(_spark_home() / "bin" / "spark-submit"),
                "--master",
                master,
                "--py-files",
                str(job_zip),
                "--conf",
                f"spark.driver.host={LOOPBACK}",
                "--conf",
                f"spark.driver.bindAddress={LOOPBACK}",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.executor.memory=1g",
                "--conf",
                "spark.sql.shuffle.partitions=2",
                str(REPO / "spark" / "stream.py"),
                "--input",
                str(events),
                "--output",
                str(on_cluster),
                "--once",
                "--max-files-per-trigger",
                "1",
                "--watermark",
                "1 day",
            ],
            cwd=tmp_path,  # not the repository: the zip carries the job
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        submit_seconds = time.monotonic() - submitted
    logger.info(
        "standalone cluster up in %.1f s; spark-submit ran %.1f s", startup_seconds, submit_seconds
    )
    log = completed.stdout + completed.stderr  # spark-submit sends the driver's stderr to stdout
    assert completed.returncode == 0, log[-5000:]
    assert f"spark session mqtt-broker-events on master {master}" in log
    assert "processed 900 lines in 3 batches" in log
    assert list((tmp_path / "work").glob("app-*")), "no executor ran on the worker"

    everything = [record for records in files for record in records]
    assert with_pandas(on_cluster, TOPIC_TRAFFIC) == expected_topic_traffic(everything)
    for table in (TOPIC_TRAFFIC, CLIENT_SESSIONS):
        assert with_duckdb(on_cluster, table) == with_duckdb(local, table)
    assert batch_totals(on_cluster) == batch_totals(local) == (900, 0, 0)
