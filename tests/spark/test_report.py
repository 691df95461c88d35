"""spark.report: the newest windows' busiest topics and clients as a text table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark.event_schema import event_record
from spark.report import build_report, format_table
from spark.stream import StreamOptions, run
from tests.spark.conftest import EventWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

START = 1_700_000_040.0  # 2023-11-14 22:14:00 UTC


def _publish(ts: float, topic: str, client: str, size: int) -> dict[str, object]:
    return event_record(
        "message.publish",
        ts,
        node="n",
        worker=0,
        client_id=client,
        publisher=client,
        topic=topic,
        payload_bytes=size,
    )


def test_format_table_aligns_columns_and_shows_missing_values() -> None:
    text = format_table(("a", "long name"), [("x", None), ("yyyy", {"b": 2, "a": 1})])
    assert text.splitlines() == [
        "a     long name",
        "----  ---------",
        "x     -",
        "yyyy  a=1,b=2",
    ]


@pytest.mark.spark
def test_report_lists_the_newest_window_first_busiest_first(
    spark: SparkSession, tmp_path: Path, write_events: EventWriter
) -> None:
    records = [
        *[_publish(START + i, "old/topic", "c1", 10) for i in range(9)],  # window 22:14
        *[_publish(START + 60 + i, "quiet", "c2", 1) for i in range(2)],  # window 22:15
        *[_publish(START + 60 + i, "busy", "c3", 5) for i in range(4)],
        event_record(
            "client.disconnected",
            START + 70,
            node="n",
            worker=0,
            client_id="c3",
            reason="keepalive_timeout",
        ),
    ]
    write_events(tmp_path / "events", "events-1.json", records)
    output = tmp_path / "out"
    run(spark, StreamOptions(input_dir=str(tmp_path / "events"), output_dir=str(output), once=True))

    report = build_report(spark, str(output), limit=2).splitlines()
    topics = report[report.index("Top topics (newest window first, UTC)") + 3 :][:2]
    assert [line.split()[2:] for line in topics] == [
        ["busy", "4", "0", "20", "1"],
        ["quiet", "2", "0", "2", "1"],
    ]
    assert topics[0].startswith("2023-11-14 22:15:00")
    clients = report[report.index("Top clients (newest window first, UTC)") + 3 :][:2]
    assert [line.split()[2:] for line in clients] == [
        ["c3", "4", "0", "0", "1", "keepalive_timeout=1"],
        ["c2", "2", "0", "0", "0", "-"],
    ]
    assert report[-1] == "Event lines read: 16, corrupt lines skipped: 0, late events dropped: 0"
