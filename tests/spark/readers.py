"""Read the job's tables the way a user would: plain Spark, pandas (pyarrow) and DuckDB.

Each reader points at `OUTPUT/<table>` with no rule of the job's, and returns the rows as
`{key: values}` with plain Python values (window start as epoch seconds), after checking that
no key appears twice: the tables promise one row per key, whatever the reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Key = tuple[Any, ...]
Rows = dict[Key, tuple[Any, ...]]

TOPIC_TRAFFIC = "topic_traffic"
CLIENT_SESSIONS = "client_sessions"
BATCHES = "batches"
WINDOW_SECONDS = 60


def _topic_values(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        int(row["published"]),
        int(row["delivered"]),
        int(row["bytes"]),
        int(row["distinct_publishers"]),
        list(row["publishers"]),
    )


def _client_values(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        int(row["connects"]),
        int(row["disconnects"]),
        dict(row["disconnects_by_reason"]),
        int(row["messages_in"]),
        int(row["messages_out"]),
    )


_VALUES: dict[str, tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]]]] = {
    TOPIC_TRAFFIC: ("topic", _topic_values),
    CLIENT_SESSIONS: ("client_id", _client_values),
}


def _keyed(table: str, rows: Iterable[dict[str, Any]]) -> Rows:
    key_column, values = _VALUES[table]
    result: Rows = {}
    for row in rows:
        assert row["window_end"] - row["window_start"] == WINDOW_SECONDS, row
        key = (int(row["window_start"]), row[key_column])
        assert key not in result, f"{table}: key {key} appears twice"
        result[key] = values(row)
    return result


def with_spark(spark: SparkSession, output: Path, table: str) -> Rows:
    """`spark.read.parquet(OUTPUT/table)`, nothing more (timestamps cast to epoch seconds)."""
    frame = spark.read.parquet(str(output / table))
    rows = frame.withColumns(
        {
            "window_start": frame["window_start"].cast("long"),
            "window_end": frame["window_end"].cast("long"),
        }
    ).collect()
    return _keyed(table, (row.asDict() for row in rows))


def with_pandas(output: Path, table: str) -> Rows:
    """`pandas.read_parquet(OUTPUT/table)` (pyarrow, hive partitions)."""
    frame = pd.read_parquet(output / table)
    records = frame.to_dict("records")
    for record in records:
        record["window_start"] = record["window_start"].timestamp()
        record["window_end"] = record["window_end"].timestamp()
        if "disconnects_by_reason" in record:
            record["disconnects_by_reason"] = dict(record["disconnects_by_reason"])
    return _keyed(table, records)


def with_duckdb(output: Path, table: str) -> Rows:
    """DuckDB's `read_parquet('OUTPUT/table/**/*.parquet', hive_partitioning = true)`."""
    relation = duckdb.sql(
        "SELECT * REPLACE (epoch(window_start) AS window_start, epoch(window_end) AS window_end) "
        "FROM read_parquet($path, hive_partitioning = true)",
        params={"path": f"{output / table}/**/*.parquet"},
    )
    names = relation.columns
    return _keyed(table, (dict(zip(names, row, strict=True)) for row in relation.fetchall()))


def every_reader(spark: SparkSession, output: Path, table: str) -> Rows:
    """The table as Spark reads it, after checking pandas and DuckDB read exactly the same."""
    rows = with_spark(spark, output, table)
    assert with_pandas(output, table) == rows, f"pandas reads {table} differently from Spark"
    assert with_duckdb(output, table) == rows, f"DuckDB reads {table} differently from Spark"
    return rows


def batch_totals(output: Path) -> tuple[int, int, int]:
    """(input lines, corrupt lines, late rows) summed over the `batches` table, with DuckDB."""
    [row] = duckdb.sql(
        "SELECT sum(input_lines), sum(corrupt_lines), sum(late_rows) "
        "FROM read_parquet($path, hive_partitioning = true)",
        params={"path": f"{output / BATCHES}/**/*.parquet"},
    ).fetchall()
    return (int(row[0]), int(row[1]), int(row[2]))
