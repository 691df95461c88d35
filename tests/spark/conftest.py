"""Shared Spark fixtures: ONE local SparkSession for the whole test run, an event writer, and
the Python path a cluster gives the job.

The session is small (local[2], 2 shuffle partitions, driver on 127.0.0.1, no UI): Spark's
start-up (~7 s here) is paid once. Spark tests are skipped only when `java` is missing.

`cluster_python_path` is what a plain Spark distribution's driver has, for `python -S` (no
site-packages): the job's zip (`spark` and `core`, as docs/events.md builds it) and pyspark
with py4j. A job that imports anything else (orjson, gevent, ...) fails there as on a cluster.
"""

from __future__ import annotations

import os
import shutil
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark.json_lines import to_json_line
from spark.session import build_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EventWriter = Callable[[Path, str, Iterable[dict[str, object]]], Path]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if shutil.which("java") is None:
        pytest.skip("Spark tests need a Java runtime: `java` is not on PATH (make system-deps)")
    session = build_session("broker-event-tests", master="local[2]")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def job_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """broker.zip as docs/events.md makes it: the `spark` and `core` packages, sources only."""
    archive = tmp_path_factory.mktemp("job") / "broker.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for package in ("spark", "core"):
            for source in sorted((REPO / package).glob("*.py")):
                bundle.write(source, source.relative_to(REPO).as_posix())
    return archive


@pytest.fixture(scope="session")
def spark_libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding only pyspark and py4j (links), as a Spark distribution's python/."""
    import py4j  # noqa: PLC0415
    import pyspark  # noqa: PLC0415

    libraries = tmp_path_factory.mktemp("spark-python")
    for module in (pyspark, py4j):
        package = Path(module.__file__ or "").parent
        (libraries / package.name).symlink_to(package, target_is_directory=True)
    return libraries


@pytest.fixture(scope="session")
def cluster_python_path(job_zip: Path, spark_libraries: Path) -> str:
    """PYTHONPATH for `python -S`: the job zip, pyspark and py4j, nothing else."""
    return os.pathsep.join([str(job_zip), str(spark_libraries)])


@pytest.fixture
def write_events() -> EventWriter:
    """Write records as an event file the way the sink publishes one (write aside, rename in).

    Spark takes new files in modification-time order (milliseconds); files a test writes in
    a row get times a second apart, as the sink's would be, so that order is the writing order.
    """
    last_stamp = 0.0

    def write(directory: Path, name: str, records: Iterable[dict[str, object]]) -> Path:
        nonlocal last_stamp
        directory.mkdir(parents=True, exist_ok=True)
        aside = directory / f"_{name}"
        aside.write_bytes(b"".join(to_json_line(record) for record in records))
        last_stamp = max(time.time(), last_stamp + 1)
        os.utime(aside, (last_stamp, last_stamp))
        final = directory / name
        os.replace(aside, final)
        return final

    return write
