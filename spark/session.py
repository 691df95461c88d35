"""Builds the SparkSession for the event jobs: fit for one machine, unchanged on a cluster.

Run with plain `python -m spark.…` (no `spark-submit`), the session is `local[*]` with the driver
bound to 127.0.0.1, the web UI off and few shuffle partitions (200, Spark's default, made a
small `availableNow` query 20x slower here). Its one JVM, which runs every task, starts with
options for a short job on a few cores (`LOCAL_DRIVER_JAVA_OPTIONS`, a 2 GiB heap): a one-shot
job spends as much CPU compiling (the JIT) as parsing its input. Run under
`spark-submit --master spark://…`, the master and everything else come from spark-submit: only
what the caller passes explicitly is set, so nothing local leaks into a cluster run.

Spark's own logs (log4j, through `spark.log.level`) and py4j's (Python logging) are kept at
WARN unless the caller asks for another level: at INFO they drown the job's one line per batch.
`parse_conf` turns the command lines' `--conf KEY=VALUE` into settings, the way spark-submit
takes them, so a plain `python -m spark.…` run can be tuned the same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Final

from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

LOCAL_MASTER = "local[*]"
LOCAL_SHUFFLE_PARTITIONS = 2
LOOPBACK = "127.0.0.1"
# Input split size. With Spark's default (128 MiB) the benchmark's 10 files of 60 MiB were read
# by 9 tasks: 2 cores ran 5 rounds, the last with one core idle. 32 MiB splits make 20 tasks of
# 27-32 MiB (the same task CPU), so both cores stay busy to the end of the parse.
LOCAL_MAX_PARTITION_BYTES = "32m"
DEFAULT_SPARK_LOG_LEVEL = "WARN"
# The local JVM's heap: room for a parsed batch of 16 x 64 MiB files in Spark's cache.
LOCAL_DRIVER_MEMORY = "2g"
# Options of the local JVM. Measured on the 2,000,000-event benchmark (docs/events.md "Speed"),
# two runs side by side on a loaded 2-core machine, they cut the job's CPU by 16%:
LOCAL_DRIVER_JAVA_OPTIONS: Final = (
    # the throughput collector: G1's concurrent marking cost 3-6 s of CPU a run, this 1.6 s
    "-XX:+UseParallelGC",
    # compile a method with C2 (the optimising JIT) only after 10x the usual calls and loops:
    # the per-row code still gets there within the first tens of thousands of rows, while the
    # code that runs once per query or task (planning, Janino, Java serialisation, class
    # loading) stays with C1. 3x cut C2's CPU by 30%; 10x by another quarter (9.0 to 6.7 s on
    # the 2,000,000-event benchmark, two runs side by side), task CPU unchanged
    "-XX:Tier4InvocationThreshold=50000",
    "-XX:Tier4MinInvocationThreshold=6000",
    "-XX:Tier4CompileThreshold=150000",
    "-XX:Tier4BackEdgeThreshold=400000",
)


def launched_by_spark_submit() -> bool:
    """True when this Python process is the driver of a `spark-submit` (its JVM is waiting)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def local_conf(shuffle_partitions: int = LOCAL_SHUFFLE_PARTITIONS) -> dict[str, str]:
    """Settings for a single-machine run (loopback driver, no UI, few shuffle partitions, input
    splits that share the cores evenly, the JVM's heap and options; these two apply when the
    session starts the JVM)."""
    return {
        "spark.driver.memory": LOCAL_DRIVER_MEMORY,
        "spark.driver.extraJavaOptions": " ".join(LOCAL_DRIVER_JAVA_OPTIONS),
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.files.maxPartitionBytes": LOCAL_MAX_PARTITION_BYTES,
        "spark.sql.session.timeZone": "UTC",
    }


def parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    """`["k=v", ...]` (repeated `--conf` flags) as a dict; raises ValueError on a pair with no =."""
    settings = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"--conf takes KEY=VALUE, got {pair!r}")
        settings[key.strip()] = value
    return settings


def build_session(
    app_name: str,
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    log_level: str = DEFAULT_SPARK_LOG_LEVEL,
) -> SparkSession:
    """Get or create the session; `master` None means spark-submit's master, else local[*].

    `log_level` applies to Spark (log4j) and py4j; `conf` wins over every default set here.
    """

    logging.getLogger("py4j").setLevel(log_level.upper())
    builder = SparkSession.builder.appName(app_name)
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.log.level": log_level.upper(),
    }
    if master is None and not launched_by_spark_submit():
        master = LOCAL_MASTER
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            settings.update(local_conf())
            os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # read by the JVM at launch
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(settings["spark.log.level"])  # also when the JVM was up
    logger.info("spark session %s on master %s", app_name, session.sparkContext.master)
    return session
