"""spark.stream over synthetic event files: exact tables that Spark, pandas and DuckDB all read
right, corrupt lines and late events counted, the watermark kept across runs."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pytest

from spark.stream import StreamOptions, run
from tests.spark.conftest import EventWriter
from tests.spark.readers import (
    CLIENT_SESSIONS,
    TOPIC_TRAFFIC,
    batch_totals,
    every_reader,
)
from tests.spark.synthetic import (
    START,
    expected_client_sessions,
    expected_topic_traffic,
    publish,
    synthetic_events,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _data_files(output: Path) -> dict[Path, int]:
    """Every Parquet file a reader of the tables sees, with its modification time."""
    return {
        path: path.stat().st_mtime_ns
        for table in (TOPIC_TRAFFIC, CLIENT_SESSIONS, "batches")
        for path in (output / table).rglob("*.parquet")
    }


def test_once_counts_everything_every_reader_agrees_and_a_rerun_adds_only_new_files(
    spark: SparkSession, tmp_path: Path, write_events: EventWriter
) -> None:
    events, output = tmp_path / "events", tmp_path / "out"
    first = synthetic_events(1, 600, START, 300)
    write_events(events, "events-1.json", first)
    options = StreamOptions(input_dir=str(events), output_dir=str(output), once=True)

    run(spark, options)
    # --once reports every window, including those the watermark has not closed
    assert every_reader(spark, output, TOPIC_TRAFFIC) == expected_topic_traffic(first)
    assert every_reader(spark, output, CLIENT_SESSIONS) == expected_client_sessions(first)

    # more files, some events in windows already reported: merged into the same rows, one
    # micro-batch per file, the first file not read again
    second = synthetic_events(2, 300, START + 240, 200)
    third = synthetic_events(3, 300, START + 400, 100)
    write_events(events, "events-2.json", second)
    write_events(events, "events-3.json", third)
    summary = run(
        spark,
        StreamOptions(
            input_dir=str(events), output_dir=str(output), once=True, max_files_per_trigger=1
        ),
    )
    assert (summary.batches, summary.lines) == (2, len(second) + len(third))
    everything = first + second + third
    assert every_reader(spark, output, TOPIC_TRAFFIC) == expected_topic_traffic(everything)
    assert every_reader(spark, output, CLIENT_SESSIONS) == expected_client_sessions(everything)
    assert batch_totals(output) == (len(everything), 0, 0)
    # readers see partitions of whole rows, never per-batch files
    assert {path.parent.relative_to(output).as_posix() for path in _data_files(output)} == {
        "topic_traffic/date=2023-11-14/hour=22",
        "client_sessions/date=2023-11-14/hour=22",
        f"batches/date={datetime.now(UTC).date().isoformat()}",
    }

    # nothing new: no batch, no file rewritten, nothing counted twice
    files_before = _data_files(output)
    assert run(spark, options).batches == 0
    assert _data_files(output) == files_before
    assert batch_totals(output) == (len(everything), 0, 0)


def test_corrupt_lines_are_counted_and_skipped_not_fatal(
    spark: SparkSession, tmp_path: Path, write_events: EventWriter
) -> None:
    events, output = tmp_path / "events", tmp_path / "out"
    good = synthetic_events(4, 50, START, 120)
    path = write_events(events, "events-1.json", good)
    with path.open("ab") as stream:
        stream.write(b"this is not json\n")
        # a field the tables never use has the wrong type: still a corrupt line
        stream.write(
            b'{"event": "message.publish", "ts": "2023-11-14T22:14:00.000000Z", "qos": "high"}\n'
        )
        stream.write(b'{"event": "message.publish", "ts": null, "topic": "sensors/a"}\n')
        stream.write(b"\n")  # a blank line is not a line of input: not read, not corrupt
    run(spark, StreamOptions(input_dir=str(events), output_dir=str(output), once=True))
    assert batch_totals(output) == (len(good) + 3, 3, 0)
    assert every_reader(spark, output, TOPIC_TRAFFIC) == expected_topic_traffic(good)
    assert every_reader(spark, output, CLIENT_SESSIONS) == expected_client_sessions(good)


def _minute(minute: int, second: int = 0) -> float:
    return START + minute * 60 + second


def test_late_events_are_dropped_counted_and_the_watermark_survives_a_restart(
    spark: SparkSession,
    tmp_path: Path,
    write_events: EventWriter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    events, output = tmp_path / "events", tmp_path / "out"
    options = StreamOptions(
        input_dir=str(events), output_dir=str(output), once=True, max_files_per_trigger=1
    )
    # batch 0: one publish a minute for 30 minutes; greatest time 22:43:01, so the
    # watermark of later batches is 22:33:01 (10 minutes earlier)
    write_events(events, "events-1.json", [publish(_minute(m, 1), "t", "a") for m in range(30)])
    # batch 1: window 22:32-22:33 has closed (late); 22:33-22:34 and 22:38-22:39 are open
    late = publish(_minute(18, 30), "t", "b")
    on_time = [publish(_minute(19, 30), "t", "b"), publish(_minute(24, 0), "t", "b")]
    write_events(events, "events-2.json", [late, *on_time])
    with caplog.at_level(logging.WARNING, logger="spark.stream"):
        run(spark, options)
    assert "batch 1: dropped 1 late event(s): their window closed at the watermark " in caplog.text
    assert "2023-11-14T22:33:01Z" in caplog.text

    # a new run (a restarted job) judges by the same watermark, read back from `batches`
    late_again = publish(_minute(18, 45), "t", "c")
    on_time.append(publish(_minute(19, 45), "t", "c"))
    write_events(events, "events-3.json", [late_again, on_time[-1]])
    run(spark, options)

    assert batch_totals(output) == (35, 0, 2)
    watermarks = duckdb.sql(
        "SELECT batch_id, late_rows, epoch(watermark) FROM read_parquet($path) ORDER BY 1",
        params={"path": f"{output}/batches/**/*.parquet"},
    ).fetchall()
    assert watermarks == [(0, 0, None), (1, 1, _minute(19, 1)), (2, 1, _minute(19, 1))]
    kept = [publish(_minute(m, 1), "t", "a") for m in range(30)] + on_time
    assert every_reader(spark, output, TOPIC_TRAFFIC) == expected_topic_traffic(kept)
