"""spark.report: the newest windows' busiest topics and clients as text, and as a PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.image as mpimg
import numpy as np
import pytest

from spark.event_schema import event_record
from spark.report import (
    CHART_HEIGHT_PX,
    CHART_WIDTH_PX,
    build_report,
    chart_data,
    draw_chart,
    format_table,
)
from spark.stream import StreamOptions, run
from tests.spark.conftest import EventWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

START = 1_700_000_040.0  # 2023-11-14 22:14:00 UTC
# matplotlib's first two default colours: "published"/"messages in", "delivered"/"messages out"
FIRST_SERIES = (0x1F, 0x77, 0xB4)
SECOND_SERIES = (0xFF, 0x7F, 0x0E)


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


def _delivered(ts: float, topic: str, subscriber: str, publisher: str) -> dict[str, object]:
    return event_record(
        "message.delivered",
        ts,
        node="n",
        worker=0,
        client_id=subscriber,
        publisher=publisher,
        topic=topic,
        payload_bytes=1,
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


@pytest.mark.spark
def test_chart_draws_traffic_per_window_and_the_top_topics_and_clients(
    spark: SparkSession, tmp_path: Path, write_events: EventWriter
) -> None:
    records = [
        *[
            _publish(START + 60 * minute + i, f"t{i % 3}", f"c{i % 4}", 5)
            for minute in range(6)
            for i in range(10)
        ],
        *[_delivered(START + 60 * minute + 30, "t0", "s1", "c0") for minute in range(6)],
    ]
    write_events(tmp_path / "events", "events-1.json", records)
    output = tmp_path / "out"
    run(spark, StreamOptions(input_dir=str(tmp_path / "events"), output_dir=str(output), once=True))

    data = chart_data(spark, str(output), limit=3)
    assert [count for _, count, _ in data.windows] == [10] * 6
    assert [count for _, _, count in data.windows] == [1] * 6
    assert data.topics == [("t0", 24, 6), ("t1", 18, 0), ("t2", 18, 0)]
    assert data.clients[0] == ("c0", 18, 0)

    chart = tmp_path / "chart.png"
    draw_chart(data, chart)
    pixels = (mpimg.imread(chart)[:, :, :3] * 255).round().astype(int)
    assert pixels.shape == (CHART_HEIGHT_PX, CHART_WIDTH_PX, 3)
    # each third of the image (one panel each) shows both series' colours
    for panel in np.array_split(pixels, 3, axis=0):
        for colour in (FIRST_SERIES, SECOND_SERIES):
            assert (panel == colour).all(axis=2).sum() > 50, f"{colour} missing in a panel"
