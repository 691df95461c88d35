"""`python -m spark.stream`: Structured Streaming over the event sink's files into Parquet tables.

Three queries read the same input directory, each with its own checkpoint:

- `topic_traffic`: per tumbling event-time window and topic: messages published and delivered,
  bytes published, distinct publishers (exact: the set of publishers is kept in the window's
  state until the watermark closes the window).
- `client_sessions`: per window and client: connects, disconnects (total and by reason),
  messages in (published) and out (delivered to it).
- `corrupt_records`: per micro-batch, lines read and lines that did not match the schema.

Output design (docs/events.md explains it at length): the aggregations run in *update* mode, so
every micro-batch emits the **running totals** of the (window, key) rows it changed; the batch
is written by `foreachBatch` into its own directory `TABLE/batch_id=N`, overwritten if Spark
replays batch N after a crash. The current value of a row is the one from its highest batch id
(`read_table`). Running totals make a replay harmless, and update mode (unlike Parquet append
with a watermark) also emits windows the watermark has not closed, so `--once` reports every
event in the input. The watermark bounds the state: a window's state is dropped once the
watermark passes its end, and events older than the watermark are ignored.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from core.reasons import DisconnectReason
from spark.event_schema import CORRUPT_RECORD_COLUMN, SPARK_TIMESTAMP_FORMAT, spark_schema
from spark.session import build_session

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

logger = logging.getLogger(__name__)

TOPIC_TRAFFIC: Final = "topic_traffic"
CLIENT_SESSIONS: Final = "client_sessions"
CORRUPT_RECORDS: Final = "corrupt_records"
TABLE_KEYS: Final[dict[str, tuple[str, ...]]] = {
    TOPIC_TRAFFIC: ("window_start", "window_end", "topic"),
    CLIENT_SESSIONS: ("window_start", "window_end", "client_id"),
}
BATCH_COLUMN: Final = "batch_id"


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """What the job reads and writes, and how often (the command-line flags)."""

    input_dir: str
    output_dir: str
    checkpoint_dir: str | None = None  # default: OUTPUT/_checkpoints
    once: bool = False  # availableNow: process everything present, then return
    trigger_seconds: float = 10.0
    window: str = "1 minute"
    watermark: str = "10 minutes"
    max_files_per_trigger: int = 1000

    @property
    def checkpoint_root(self) -> str:
        return self.checkpoint_dir or f"{self.output_dir.rstrip('/')}/_checkpoints"


def read_events(spark: SparkSession, options: StreamOptions) -> DataFrame:
    """The input directory as a streaming DataFrame with the event schema + corrupt column."""
    schema = spark_schema().add(CORRUPT_RECORD_COLUMN, "string")
    return (
        spark.readStream.format("json")
        .schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_RECORD_COLUMN)
        .option("timestampFormat", SPARK_TIMESTAMP_FORMAT)
        .option("maxFilesPerTrigger", options.max_files_per_trigger)
        .load(options.input_dir)
    )


def _is_event(name: str) -> Column:
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    return F.col("event") == F.lit(name)


def _count_where(condition: Column) -> Column:
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def _windowed(events: DataFrame, options: StreamOptions, key: str) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    valid = events.filter(
        F.col(CORRUPT_RECORD_COLUMN).isNull() & F.col("ts").isNotNull() & F.col(key).isNotNull()
    )
    return valid.withWatermark("ts", options.watermark).withColumn(
        "window", F.window("ts", options.window)
    )


def _flatten_window(aggregated: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    return aggregated.select(
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "*"
    ).drop("window")


def topic_traffic(events: DataFrame, options: StreamOptions) -> DataFrame:
    """Running totals per (window, topic) of publish and delivery events."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    published = _is_event("message.publish")
    messages = _windowed(events, options, "topic").filter(
        published | _is_event("message.delivered")
    )
    aggregated = messages.groupBy("window", "topic").agg(
        _count_where(published).alias("published"),
        _count_where(_is_event("message.delivered")).alias("delivered"),
        F.sum(F.when(published, F.col("payload_bytes")).otherwise(0)).cast("long").alias("bytes"),
        F.size(F.collect_set(F.when(published, F.col("publisher")))).alias("distinct_publishers"),
    )
    return _flatten_window(aggregated)


def client_sessions(events: DataFrame, options: StreamOptions) -> DataFrame:
    """Running totals per (window, client) of connects, disconnects and messages in/out."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    disconnected = _is_event("client.disconnected")
    reasons = [reason.value for reason in DisconnectReason]
    aggregated = (
        _windowed(events, options, "client_id")
        .groupBy("window", "client_id")
        .agg(
            _count_where(_is_event("client.connected")).alias("connects"),
            _count_where(disconnected).alias("disconnects"),
            *[
                _count_where(disconnected & (F.col("reason") == reason)).alias(f"_r_{reason}")
                for reason in reasons
            ],
            _count_where(_is_event("message.publish")).alias("messages_in"),
            _count_where(_is_event("message.delivered")).alias("messages_out"),
        )
    )
    by_reason = F.map_filter(
        F.create_map(*[part for r in reasons for part in (F.lit(r), F.col(f"_r_{r}"))]),
        lambda _reason, count: count > 0,
    )
    return _flatten_window(aggregated).select(
        "window_start",
        "window_end",
        "client_id",
        "connects",
        "disconnects",
        by_reason.alias("disconnects_by_reason"),
        "messages_in",
        "messages_out",
    )


def _batch_path(options: StreamOptions, table: str, batch_id: int) -> str:
    return f"{options.output_dir.rstrip('/')}/{table}/{BATCH_COLUMN}={batch_id}"


def _table_writer(options: StreamOptions, table: str) -> Callable[[DataFrame, int], None]:
    def write_batch(rows: DataFrame, batch_id: int) -> None:
        if rows.isEmpty():
            return
        rows.coalesce(1).write.mode("overwrite").parquet(_batch_path(options, table, batch_id))

    return write_batch


def _corrupt_counter(options: StreamOptions) -> Callable[[DataFrame, int], None]:
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    def count_batch(lines: DataFrame, batch_id: int) -> None:
        # Cached with every column, so each line is parsed against the whole schema (a query
        # reading only the corrupt column fails: QUERY_ONLY_CORRUPT_RECORD_COLUMN).
        lines.persist()
        try:
            totals = lines.agg(
                F.count(F.lit(1)).alias("lines"),
                F.count(F.col(CORRUPT_RECORD_COLUMN)).alias("corrupt_lines"),
            )
            row = totals.first()
            if row is None or row["lines"] == 0:
                return
            if row["corrupt_lines"]:
                logger.warning(
                    "batch %d: %d of %d event lines do not match the event schema and were "
                    "skipped; see %s for the counts",
                    batch_id,
                    row["corrupt_lines"],
                    row["lines"],
                    CORRUPT_RECORDS,
                )
            totals.coalesce(1).write.mode("overwrite").parquet(
                _batch_path(options, CORRUPT_RECORDS, batch_id)
            )
        finally:
            lines.unpersist()

    return count_batch


def start_queries(spark: SparkSession, options: StreamOptions) -> list[StreamingQuery]:
    """Start the three queries (topic_traffic, client_sessions, corrupt_records)."""
    events = read_events(spark, options)
    outputs: list[tuple[str, DataFrame, str, Callable[[DataFrame, int], None]]] = [
        (
            TOPIC_TRAFFIC,
            topic_traffic(events, options),
            "update",
            _table_writer(options, TOPIC_TRAFFIC),
        ),
        (
            CLIENT_SESSIONS,
            client_sessions(events, options),
            "update",
            _table_writer(options, CLIENT_SESSIONS),
        ),
        (CORRUPT_RECORDS, events, "append", _corrupt_counter(options)),
    ]
    queries = []
    for name, frame, mode, writer in outputs:
        stream = (
            frame.writeStream.queryName(name)
            .outputMode(mode)
            .foreachBatch(writer)
            .option("checkpointLocation", f"{options.checkpoint_root.rstrip('/')}/{name}")
        )
        if options.once:
            stream = stream.trigger(availableNow=True)
        else:
            stream = stream.trigger(processingTime=f"{options.trigger_seconds} seconds")
        queries.append(stream.start())
    return queries


def run(spark: SparkSession, options: StreamOptions) -> None:
    """Run the job: with `once`, until all input present at start is processed; else forever.

    Raises the first query's failure (pyspark's StreamingQueryException) after stopping the rest.
    """
    queries = start_queries(spark, options)
    try:
        if options.once:
            for query in queries:
                query.awaitTermination()
        else:
            spark.streams.awaitAnyTermination()
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    for query in queries:
        failure = query.exception()
        if failure is not None:
            raise failure


def read_table(spark: SparkSession, output_dir: str, table: str) -> DataFrame:
    """A table's current rows: for each (window, key), the row of the latest batch."""
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    rows = spark.read.parquet(f"{output_dir.rstrip('/')}/{table}")
    newest_first = Window.partitionBy(*TABLE_KEYS[table]).orderBy(F.col(BATCH_COLUMN).desc())
    return (
        rows.withColumn("_rank", F.row_number().over(newest_first))
        .filter(F.col("_rank") == 1)
        .drop("_rank", BATCH_COLUMN)
    )


def corrupt_line_count(spark: SparkSession, output_dir: str) -> tuple[int, int]:
    """(lines read, corrupt lines) over all batches so far."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    counts = (
        spark.read.parquet(f"{output_dir.rstrip('/')}/{CORRUPT_RECORDS}")
        .agg(F.sum("lines"), F.sum("corrupt_lines"))
        .first()
    )
    if counts is None or counts[0] is None:
        return (0, 0)
    return (int(counts[0]), int(counts[1]))


def parse_args(argv: Sequence[str] | None) -> tuple[StreamOptions, str | None]:
    parser = argparse.ArgumentParser(
        prog="python -m spark.stream", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--input", required=True, help="the event sink's directory")
    parser.add_argument("--output", required=True, help="where the Parquet tables go")
    parser.add_argument("--checkpoint", help="checkpoint directory (default OUTPUT/_checkpoints)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--trigger-seconds", type=float, default=10.0, help="micro-batch interval")
    when.add_argument("--once", action="store_true", help="process what is there, then exit")
    parser.add_argument("--window", default="1 minute", help='tumbling window, e.g. "5 minutes"')
    parser.add_argument("--watermark", default="10 minutes", help="how late an event may be")
    parser.add_argument("--max-files-per-trigger", type=int, default=1000)
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    args = parser.parse_args(argv)
    options = StreamOptions(
        input_dir=args.input,
        output_dir=args.output,
        checkpoint_dir=args.checkpoint,
        once=args.once,
        trigger_seconds=args.trigger_seconds,
        window=args.window,
        watermark=args.watermark,
        max_files_per_trigger=args.max_files_per_trigger,
    )
    return options, args.master


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options, master = parse_args(argv)
    spark = build_session("mqtt-broker-events", master=master)
    try:
        run(spark, options)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
