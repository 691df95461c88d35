"""The job's output tables: Hive-partitioned Parquet that any Parquet reader reads right.

Layout under the job's OUTPUT directory (docs/events.md has the columns):

    topic_traffic/date=2025-01-31/hour=13/part-*.parquet    one row per (window, topic), UTC
    client_sessions/date=2025-01-31/hour=13/part-*.parquet  one row per (window, client)
    batches/date=2025-01-31/part-*.parquet                  one row per micro-batch
    _stage/<table>/batch_id=N/...                           batch N's merged partitions
    _checkpoints/                                           the streaming query's

Each row holds the latest totals of its key, so `spark.read.parquet`, pandas, DuckDB or any
other reader of `OUTPUT/<table>` gets the right answer with no special rule. Micro-batch N
merges its increments into a table in two steps (`merge_batch`), either of which a crash may
cut short and Spark's replay of batch N then finishes:

1. **Merge into the stage.** Read the partitions the increments touch, combine old rows and
   increments per key (each table says how: counts add up, sets unite; `batches` only adds
   the batch's own row), write the merged partitions to
   `_stage/<table>/batch_id=N` and mark that directory complete (`_MERGED`). An unmarked
   stage is deleted and redone; the table itself is untouched until the mark exists.
2. **Publish.** For each partition in the marked stage, delete the table's copy and rename
   the staged one in. A moved partition is no longer in the stage, and a marked stage is never
   merged again, so redoing this step only finishes the moves.

At the start of batch N, stages of other batches are deleted (`clean_stages`): batch N-1 was
committed by Spark, so its stage was fully published. The same replay that would double-count
increments therefore finds either nothing done (merge again from the same old rows) or a
marked stage (publish only): exactly once, as long as OUTPUT and its checkpoints stay together.

Readers only look at `OUTPUT/<table>`: they never see a stage. A reader that lists a partition
at the instant it is swapped may miss it or find a file gone (Hive-style tables have no
snapshots); read again, or use a table format (Delta Lake, Iceberg) if that matters.

Files are handled through Hadoop's FileSystem API on the driver, so HDFS, S3 and local paths
work alike (on S3 a rename is a copy: fine for these small partitions, slower for big ones).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

logger = logging.getLogger(__name__)

STAGE_DIR: Final = "_stage"
MERGED_MARKER: Final = "_MERGED"

# Column name -> the aggregate that merges a key's old row and new row (unioned) into one.
MergeRule = Callable[[str], "Column"]


def _sum(name: str) -> Column:

    return sf.sum(name)


def _publisher_set() -> Column:

    return sf.array_distinct(sf.flatten(sf.collect_list("publishers")))


def _sorted_publishers(_name: str) -> Column:

    return sf.array_sort(_publisher_set())


def _publisher_count(_name: str) -> Column:

    return sf.size(_publisher_set())


def _sum_maps(name: str) -> Column:

    def add(_key: Column, a: Column, b: Column) -> Column:
        return sf.coalesce(a, sf.lit(0)) + sf.coalesce(b, sf.lit(0))

    empty = sf.create_map().cast("MAP<STRING, BIGINT>")
    return sf.aggregate(sf.collect_list(name), empty, lambda acc, m: sf.map_zip_with(acc, m, add))


MICROS_PER_HOUR: Final = 3_600_000_000


def _utc_date_and_hour(column: str) -> dict[str, Column]:
    """UTC date and hour of a timestamp column, by integer arithmetic: cheap on every row, and
    the same partitions whatever the session's time zone."""

    def floor_div(value: Column, divisor: int) -> Column:  # exact: the remainder goes first
        return ((value - sf.pmod(value, sf.lit(divisor))) / sf.lit(divisor)).cast("long")

    hours = floor_div(sf.unix_micros(column), MICROS_PER_HOUR)
    return {
        "date": sf.date_from_unix_date(floor_div(hours, 24).cast("int")),
        "hour": sf.pmod(hours, sf.lit(24)).cast("int"),
    }


def hourly_partitions(first_micros: int, last_micros: int) -> list[tuple[date, int]]:
    """The (date, hour) partitions of every UTC hour from one epoch time to another (in µs),
    as `_utc_date_and_hour` computes them in Spark."""
    epoch = date(1970, 1, 1)
    return [
        (epoch + timedelta(days=hour // 24), hour % 24)
        for hour in range(first_micros // MICROS_PER_HOUR, last_micros // MICROS_PER_HOUR + 1)
    ]


def _window_partitions() -> dict[str, Column]:
    return _utc_date_and_hour("window_start")


def _batch_partitions() -> dict[str, Column]:
    return {"date": _utc_date_and_hour("processed_at")["date"]}


@dataclass(frozen=True, slots=True)
class Table:
    """A table's columns (name, Spark SQL type) and how a batch's rows merge into it."""

    name: str
    keys: tuple[tuple[str, str], ...]
    values: tuple[tuple[str, str], ...]
    partitions: tuple[tuple[str, str], ...]
    partition_values: Callable[[], Mapping[str, Column]]  # from the key columns
    # How each value merges; None: a batch only adds rows with keys of its own (`batches`).
    merge: Mapping[str, MergeRule] | None = None

    @property
    def key_names(self) -> list[str]:
        return [name for name, _ in self.keys]

    @property
    def partition_names(self) -> list[str]:
        return [name for name, _ in self.partitions]

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return self.keys + self.values + self.partitions

    def ddl(self) -> str:
        """The schema as Spark DDL, partition columns last (as every reader shows them)."""
        return ", ".join(f"`{name}` {kind}" for name, kind in self.columns)


TOPIC_TRAFFIC: Final = Table(
    name="topic_traffic",
    keys=(("window_start", "TIMESTAMP"), ("window_end", "TIMESTAMP"), ("topic", "STRING")),
    values=(
        ("published", "BIGINT"),
        ("delivered", "BIGINT"),
        ("bytes", "BIGINT"),
        ("distinct_publishers", "INT"),
        ("publishers", "ARRAY<STRING>"),
    ),
    partitions=(("date", "DATE"), ("hour", "INT")),
    partition_values=_window_partitions,
    merge={
        "published": _sum,
        "delivered": _sum,
        "bytes": _sum,
        "distinct_publishers": _publisher_count,
        "publishers": _sorted_publishers,
    },
)
CLIENT_SESSIONS: Final = Table(
    name="client_sessions",
    keys=(("window_start", "TIMESTAMP"), ("window_end", "TIMESTAMP"), ("client_id", "STRING")),
    values=(
        ("connects", "BIGINT"),
        ("disconnects", "BIGINT"),
        ("disconnects_by_reason", "MAP<STRING, BIGINT>"),
        ("messages_in", "BIGINT"),
        ("messages_out", "BIGINT"),
    ),
    partitions=(("date", "DATE"), ("hour", "INT")),
    partition_values=_window_partitions,
    merge={
        "connects": _sum,
        "disconnects": _sum,
        "disconnects_by_reason": _sum_maps,
        "messages_in": _sum,
        "messages_out": _sum,
    },
)
BATCHES: Final = Table(
    name="batches",
    keys=(("batch_id", "BIGINT"),),
    values=(
        ("processed_at", "TIMESTAMP"),
        ("input_lines", "BIGINT"),
        ("corrupt_lines", "BIGINT"),
        ("late_rows", "BIGINT"),
        ("max_event_time", "TIMESTAMP"),
        ("watermark", "TIMESTAMP"),
    ),
    partitions=(("date", "DATE"),),
    partition_values=_batch_partitions,
)
TABLES: Final = (TOPIC_TRAFFIC, CLIENT_SESSIONS, BATCHES)


def table_path(output_dir: str, table: Table) -> str:
    return f"{output_dir.rstrip('/')}/{table.name}"


def stage_path(output_dir: str, table: Table, batch_id: int) -> str:
    return f"{output_dir.rstrip('/')}/{STAGE_DIR}/{table.name}/batch_id={batch_id}"


def partition_path(names: list[str], values: tuple[Any, ...]) -> str:
    """`date=2025-01-31/hour=13`: the directory Spark's partitionBy writes for these values."""
    return "/".join(
        f"{name}={value.isoformat() if isinstance(value, date) else value}"
        for name, value in zip(names, values, strict=True)
    )


class HadoopFiles:
    """The few file operations the merge needs, through Hadoop's FileSystem (any scheme)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        jvm: Any = spark._jvm  # pyspark's handle on the driver JVM
        self._path_class = jvm.org.apache.hadoop.fs.Path
        hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._fs = self._path_class(root).getFileSystem(hadoop_conf)

    def _path(self, path: str) -> Any:
        return self._path_class(path)

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def delete(self, path: str) -> None:
        self._fs.delete(self._path(path), True)

    def touch(self, path: str) -> None:
        self._fs.create(self._path(path), True).close()

    def children(self, path: str) -> list[str]:
        """Names in a directory; empty when it does not exist."""
        if not self.exists(path):
            return []
        return [status.getPath().getName() for status in self._fs.listStatus(self._path(path))]

    def partition_dirs(self, path: str, depth: int) -> Iterator[str]:
        """Relative paths `a=1/b=2` of the partition directories `depth` levels below `path`."""
        statuses = self._fs.globStatus(self._path(path + "/*=*" * depth)) or []
        for status in statuses:
            names, current = [], status.getPath()
            for _ in range(depth):
                names.append(current.getName())
                current = current.getParent()
            yield "/".join(reversed(names))

    def replace_dir(self, source: str, target: str) -> None:
        """Delete `target` and move `source` there (its parent is created if needed)."""
        target_path = self._path(target)
        self._fs.delete(target_path, True)
        self._fs.mkdirs(target_path.getParent())
        if not self._fs.rename(self._path(source), target_path):
            raise OSError(f"could not rename {source} to {target}")


def clean_stages(spark: SparkSession, output_dir: str, batch_id: int) -> None:
    """Delete every table's stage except batch `batch_id`'s (older ones are fully published)."""
    files = HadoopFiles(spark, output_dir)
    keep = f"batch_id={batch_id}"
    for table in TABLES:
        root = f"{output_dir.rstrip('/')}/{STAGE_DIR}/{table.name}"
        for name in files.children(root):
            if name != keep:
                files.delete(f"{root}/{name}")


def read(spark: SparkSession, output_dir: str, table: Table) -> DataFrame | None:
    """The whole table with its declared types; None before the job's first batch wrote it."""
    path = table_path(output_dir, table)
    if not HadoopFiles(spark, output_dir).exists(path):
        return None
    return spark.read.schema(table.ddl()).parquet(path)


def merge_batch(
    spark: SparkSession,
    output_dir: str,
    table: Table,
    increments: DataFrame,
    batch_id: int,
    *,
    partitions: Iterable[tuple[Any, ...]],
) -> int:
    """Merge batch `batch_id`'s rows into the table; returns how many partitions it published.

    `increments` has the key and value columns; `partitions` lists partition values that cover
    its rows (the caller gets them in a pass it makes anyway; a partition with no new rows is
    only rewritten as it was). Idempotent per batch id (see the
    module docstring): a replay after a crash at any point leaves the same table as one
    uninterrupted run.
    """
    files = HadoopFiles(spark, output_dir)
    stage = stage_path(output_dir, table, batch_id)
    if not files.exists(f"{stage}/{MERGED_MARKER}"):
        files.delete(stage)
        touched = [partition_path(table.partition_names, tuple(values)) for values in partitions]
        if not touched:
            return 0
        _merged(spark, output_dir, table, increments, touched).write.mode("overwrite").partitionBy(
            *table.partition_names
        ).parquet(stage)
        files.touch(f"{stage}/{MERGED_MARKER}")
    target = table_path(output_dir, table)
    published = 0
    for partition in list(files.partition_dirs(stage, len(table.partitions))):
        files.replace_dir(f"{stage}/{partition}", f"{target}/{partition}")
        published += 1
    return published


def _merged(
    spark: SparkSession, output_dir: str, table: Table, increments: DataFrame, touched: list[str]
) -> DataFrame:
    """The touched partitions' rows after the merge, one task (so one file) per partition.

    Old and new rows are unioned, clustered by partition, and aggregated per key with the
    table's rules: one shuffle, and the aggregation keeps the partition clustering. A table
    without rules (`batches`, a few small rows a day) just adds the new rows, in one task.
    """

    partition_values = table.partition_values()
    new = increments.select(
        *[sf.col(name).cast(kind).alias(name) for name, kind in table.keys + table.values],
        *[partition_values[name].cast(kind).alias(name) for name, kind in table.partitions],
    )
    target = table_path(output_dir, table)
    present = set(HadoopFiles(spark, output_dir).partition_dirs(target, len(table.partitions)))
    existing = [f"{target}/{path}" for path in touched if path in present]
    ordered = [name for name, _ in table.columns]
    old = None
    if existing:
        old = spark.read.schema(table.ddl()).option("basePath", target).parquet(*existing)
    if table.merge is None:  # the batch's keys are new: its rows join the old ones
        merged = (new if old is None else old.unionByName(new)).coalesce(1)
    elif old is None:
        merged = new.repartition(*table.partition_names)
    else:
        merged = (
            old.unionByName(new)
            .repartition(*table.partition_names)
            .groupBy(*table.partition_names, *table.key_names)
            .agg(*[table.merge[name](name).alias(name) for name, _ in table.values])
        )
    # sorted by time within each file: readers skip row groups outside the windows they want
    return merged.select(*ordered).sortWithinPartitions(*table.partition_names, table.keys[0][0])
