"""`python -m spark.report OUTPUT [--limit N] [--chart FILE.png]`: the job's tables at a glance.

Prints, newest window first, the busiest topics and clients of `topic_traffic` and
`client_sessions`, then what the job read and skipped (`batches`: lines, corrupt lines, late
events). With `--chart`, also draws a PNG (matplotlib): traffic per window (published and
delivered), and the top topics and clients over all windows. The tables are plain Parquet with
one row per key, so Spark reads them as they are (`spark.tables.read` only adds their types).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from spark import tables
from spark.session import DEFAULT_SPARK_LOG_LEVEL, build_session, parse_conf

if TYPE_CHECKING:
    from matplotlib.axes import Axes

logger = logging.getLogger(__name__)

TOPIC_COLUMNS = ("window_start", "topic", "published", "delivered", "bytes", "distinct_publishers")
CLIENT_COLUMNS = (
    "window_start",
    "client_id",
    "messages_in",
    "messages_out",
    "connects",
    "disconnects",
    "disconnects_by_reason",
)
CHART_WIDTH_PX: Final = 1200
CHART_HEIGHT_PX: Final = 1500
CHART_DPI: Final = 100


class NoTablesError(LookupError):
    """OUTPUT has no tables yet: the job has not written a batch there."""


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows as left-aligned text columns under a header line and a rule."""
    cells = [[str(h) for h in headers], *[[_cell(value) for value in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: object) -> str:
    if isinstance(value, dict):
        return ",".join(f"{key}={count}" for key, count in sorted(value.items())) or "-"
    if value is None:
        return "-"
    return str(value)


def _table(spark: SparkSession, output_dir: str, table: tables.Table) -> DataFrame:
    frame = tables.read(spark, output_dir, table)
    if frame is None:
        raise NoTablesError(f"{output_dir} has no {table.name} table: run spark.stream first")
    return frame


def ingest_totals(spark: SparkSession, output_dir: str) -> tuple[int, int, int]:
    """(lines read, corrupt lines skipped, late events dropped) over every batch so far."""

    row = (
        _table(spark, output_dir, tables.BATCHES)
        .agg(sf.sum("input_lines"), sf.sum("corrupt_lines"), sf.sum("late_rows"))
        .first()
    )
    if row is None or row[0] is None:
        return (0, 0, 0)
    return (int(row[0]), int(row[1]), int(row[2]))


def build_report(spark: SparkSession, output_dir: str, limit: int) -> str:
    """The report text: top `limit` rows of each table, newest windows first."""

    window_text = sf.date_format("window_start", "yyyy-MM-dd HH:mm:ss")  # session zone: UTC
    topics = (
        _table(spark, output_dir, tables.TOPIC_TRAFFIC)
        .orderBy(sf.col("window_start").desc(), sf.col("published").desc(), sf.col("topic"))
        .withColumn("window_start", window_text)
        .select(*TOPIC_COLUMNS)
        .limit(limit)
        .collect()
    )
    clients = (
        _table(spark, output_dir, tables.CLIENT_SESSIONS)
        .withColumn("_traffic", sf.col("messages_in") + sf.col("messages_out"))
        .orderBy(sf.col("window_start").desc(), sf.col("_traffic").desc(), sf.col("client_id"))
        .withColumn("window_start", window_text)
        .select(*CLIENT_COLUMNS)
        .limit(limit)
        .collect()
    )
    lines_read, corrupt, late = ingest_totals(spark, output_dir)
    return "\n".join(
        [
            "Top topics (newest window first, UTC)",
            format_table(TOPIC_COLUMNS, [tuple(row) for row in topics]),
            "",
            "Top clients (newest window first, UTC)",
            format_table(CLIENT_COLUMNS, [tuple(row) for row in clients]),
            "",
            f"Event lines read: {lines_read}, corrupt lines skipped: {corrupt}, "
            f"late events dropped: {late}",
        ]
    )


@dataclass(frozen=True, slots=True)
class ChartData:
    """What the chart shows, collected from the tables."""

    windows: list[tuple[datetime, int, int]]  # (window start, published, delivered)
    topics: list[tuple[str, int, int]]  # (topic, published, delivered), busiest first
    clients: list[tuple[str, int, int]]  # (client id, messages in, messages out), busiest first


def chart_data(spark: SparkSession, output_dir: str, limit: int) -> ChartData:
    """Traffic per window, and the `limit` busiest topics and clients (messages in and out)."""

    traffic = _table(spark, output_dir, tables.TOPIC_TRAFFIC)
    windows = (
        traffic.groupBy("window_start")
        .agg(sf.sum("published").alias("published"), sf.sum("delivered").alias("delivered"))
        .orderBy("window_start")
        .collect()
    )
    topics = (
        traffic.groupBy("topic")
        .agg(sf.sum("published").alias("published"), sf.sum("delivered").alias("delivered"))
        .orderBy((sf.col("published") + sf.col("delivered")).desc(), "topic")
        .limit(limit)
        .collect()
    )
    clients = (
        _table(spark, output_dir, tables.CLIENT_SESSIONS)
        .groupBy("client_id")
        .agg(sf.sum("messages_in").alias("messages_in"), sf.sum("messages_out").alias("out"))
        .orderBy((sf.col("messages_in") + sf.col("out")).desc(), "client_id")
        .limit(limit)
        .collect()
    )
    return ChartData(
        windows=[(row[0], int(row[1]), int(row[2])) for row in windows],
        topics=[(row[0], int(row[1]), int(row[2])) for row in topics],
        clients=[(row[0], int(row[1]), int(row[2])) for row in clients],
    )


def draw_chart(data: ChartData, path: Path) -> None:
    """Three panels in one PNG of CHART_WIDTH_PX x CHART_HEIGHT_PX (matplotlib, no display)."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    figure = Figure(
        figsize=(CHART_WIDTH_PX / CHART_DPI, CHART_HEIGHT_PX / CHART_DPI),
        dpi=CHART_DPI,
        layout="constrained",
    )
    per_window, top_topics, top_clients = figure.subplots(
        3, 1, height_ratios=(1, 1.2, 1.2), squeeze=True
    )
    starts = [start for start, _, _ in data.windows]
    per_window.plot(starts, [p for _, p, _ in data.windows], label="published", marker=".")
    per_window.plot(starts, [d for _, _, d in data.windows], label="delivered", marker=".")
    locator = AutoDateLocator()
    per_window.xaxis.set_major_locator(locator)
    per_window.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    per_window.set_title("Messages per window (UTC)")
    per_window.set_ylabel("messages")
    per_window.set_ylim(bottom=0)
    per_window.legend()
    per_window.grid(alpha=0.3)
    _bars(top_topics, data.topics, ("published", "delivered"), "Top topics")
    _bars(top_clients, data.clients, ("messages in", "messages out"), "Top clients")
    figure.savefig(path, format="png")


def _bars(
    axes: Axes, rows: list[tuple[str, int, int]], labels: tuple[str, str], title: str
) -> None:
    """Horizontal stacked bars, busiest at the top."""
    names = [name for name, _, _ in rows][::-1]
    first = [a for _, a, _ in rows][::-1]
    second = [b for _, _, b in rows][::-1]
    axes.barh(names, first, label=labels[0])
    axes.barh(names, second, left=first, label=labels[1])
    axes.set_title(f"{title} (all windows)")
    axes.set_xlabel("messages")
    axes.legend(loc="lower right")
    axes.grid(axis="x", alpha=0.3)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark.report", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("output", help="the --output directory of spark.stream")
    parser.add_argument("--limit", type=int, default=20, help="rows per table (default 20)")
    parser.add_argument("--chart", type=Path, help="also draw the tables into this PNG file")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--spark-log-level", default=DEFAULT_SPARK_LOG_LEVEL)
    args = parser.parse_args(argv)
    try:
        conf = parse_conf(args.conf)
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    spark = build_session(
        "mqtt-broker-events-report",
        master=args.master,
        conf=conf,
        log_level=args.spark_log_level,
    )
    try:
        sys.stdout.write(build_report(spark, args.output, args.limit) + "\n")
        if args.chart is not None:
            draw_chart(chart_data(spark, args.output, args.limit), args.chart)
            logger.info("chart written to %s", args.chart)
    except NoTablesError as error:
        logger.error("%s", error)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
