"""`python -m spark.report OUTPUT [--limit N]`: the newest windows of the job's tables as text.

Reads `topic_traffic` and `client_sessions` through `spark.stream.read_table` (the current row
of every (window, key)) and prints, newest window first, the busiest topics and clients, then
the corrupt-line count. Spark reads the Parquet: pyarrow is not installed in this project and
the job's merge rule (latest batch wins) lives in one place.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark.session import build_session
from spark.stream import CLIENT_SESSIONS, TOPIC_TRAFFIC, corrupt_line_count, read_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def build_report(spark: SparkSession, output_dir: str, limit: int) -> str:
    """The report text: top `limit` rows of each table, newest windows first."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    window_text = F.date_format("window_start", "yyyy-MM-dd HH:mm:ss")  # session zone: UTC
    topics = (
        read_table(spark, output_dir, TOPIC_TRAFFIC)
        .orderBy(F.col("window_start").desc(), F.col("published").desc(), F.col("topic"))
        .withColumn("window_start", window_text)
        .select(*TOPIC_COLUMNS)
        .limit(limit)
        .collect()
    )
    clients = (
        read_table(spark, output_dir, CLIENT_SESSIONS)
        .withColumn("_traffic", F.col("messages_in") + F.col("messages_out"))
        .orderBy(F.col("window_start").desc(), F.col("_traffic").desc(), F.col("client_id"))
        .withColumn("window_start", window_text)
        .select(*CLIENT_COLUMNS)
        .limit(limit)
        .collect()
    )
    lines_read, corrupt = corrupt_line_count(spark, output_dir)
    return "\n".join(
        [
            "Top topics (newest window first, UTC)",
            format_table(TOPIC_COLUMNS, [tuple(row) for row in topics]),
            "",
            "Top clients (newest window first, UTC)",
            format_table(CLIENT_COLUMNS, [tuple(row) for row in clients]),
            "",
            f"Event lines read: {lines_read}, corrupt lines skipped: {corrupt}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark.report", description=__doc__)
    parser.add_argument("output", help="the --output directory of spark.stream")
    parser.add_argument("--limit", type=int, default=20, help="rows per table (default 20)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    spark = build_session("mqtt-broker-events-report", master=args.master)
    try:
        sys.stdout.write(build_report(spark, args.output, args.limit) + "\n")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
