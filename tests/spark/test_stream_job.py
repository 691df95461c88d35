"""spark.stream over synthetic event files written with spark.event_schema (as the sink does)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from core.reasons import DisconnectReason
from spark.event_schema import event_record
from spark.stream import (
    CLIENT_SESSIONS,
    TOPIC_TRAFFIC,
    StreamOptions,
    corrupt_line_count,
    read_table,
    run,
)
from tests.spark.conftest import EventWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

START = 1_700_000_040.0  # a whole minute
TOPICS = ("sensors/a", "sensors/b", "cmd/x", "$SYS/load")
CLIENTS = ("c1", "c2", "c3", "c4", "c5")
REASONS = tuple(reason.value for reason in DisconnectReason)
Record = dict[str, Any]


def synthetic_events(seed: int, count: int, start: float, span: float) -> list[Record]:
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        ts = start + rng.uniform(0, span)
        kind = rng.choice(
            ["message.publish"] * 4
            + ["message.delivered"] * 3
            + ["client.connected", "client.disconnected", "session.subscribed"]
        )
        client = rng.choice(CLIENTS)
        fields: Record = {"client_id": client}
        if kind.startswith("message."):
            publisher = client if kind == "message.publish" else rng.choice(CLIENTS)
            fields |= {
                "topic": rng.choice(TOPICS),
                "publisher": publisher,
                "payload_bytes": rng.randint(0, 500),
                "qos": rng.randint(0, 2),
                "message_id": rng.randint(1, 10**9),
            }
        elif kind == "client.disconnected":
            fields["reason"] = rng.choice(REASONS)
        elif kind == "session.subscribed":
            fields |= {"topic": "sensors/#", "qos": 1}
        records.append(event_record(kind, ts, node="n1", worker=0, **fields))
    return records


def _window(record: Record) -> int:
    from datetime import datetime  # noqa: PLC0415

    epoch = datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()
    return int(epoch // 60 * 60)


def expected_topic_traffic(records: list[Record]) -> dict[tuple[int, str], tuple[int, ...]]:
    totals: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    publishers: dict[tuple[int, str], set[str]] = defaultdict(set)
    for record in records:
        key = (_window(record), record["topic"])
        if record["event"] == "message.publish":
            totals[key][0] += 1
            totals[key][2] += record["payload_bytes"]
            publishers[key].add(record["publisher"])
        elif record["event"] == "message.delivered":
            totals[key][1] += 1
    return {key: (*values, len(publishers[key])) for key, values in totals.items()}


def expected_client_sessions(records: list[Record]) -> dict[tuple[int, str], tuple[Any, ...]]:
    counts: dict[tuple[int, str], Counter[str]] = defaultdict(Counter)
    for record in records:
        key = (_window(record), record["client_id"])
        counts[key][record["event"]] += 0  # every event of the client makes its row
        counts[key][record["event"]] += 1
        if record["event"] == "client.disconnected":
            counts[key]["reason:" + record["reason"]] += 1
    return {
        key: (
            c["client.connected"],
            c["client.disconnected"],
            {k.removeprefix("reason:"): v for k, v in c.items() if k.startswith("reason:")},
            c["message.publish"],
            c["message.delivered"],
        )
        for key, c in counts.items()
    }


def actual_topic_traffic(
    spark: SparkSession, output: Path
) -> dict[tuple[int, str], tuple[int, ...]]:
    rows = read_table(spark, str(output), TOPIC_TRAFFIC).selectExpr(
        "CAST(window_start AS LONG) AS w",
        "CAST(window_end AS LONG) - CAST(window_start AS LONG) AS length",
        "topic",
        "published",
        "delivered",
        "bytes",
        "distinct_publishers",
    )
    result = {}
    for row in rows.collect():
        assert row["length"] == 60
        result[(row["w"], row["topic"])] = (
            row["published"],
            row["delivered"],
            row["bytes"],
            row["distinct_publishers"],
        )
    return result


def actual_client_sessions(
    spark: SparkSession, output: Path
) -> dict[tuple[int, str], tuple[Any, ...]]:
    rows = read_table(spark, str(output), CLIENT_SESSIONS).selectExpr(
        "CAST(window_start AS LONG) AS w", "*"
    )
    return {
        (row["w"], row["client_id"]): (
            row["connects"],
            row["disconnects"],
            dict(row["disconnects_by_reason"]),
            row["messages_in"],
            row["messages_out"],
        )
        for row in rows.collect()
    }


def _batches(output: Path, table: str) -> set[str]:
    return {path.name for path in (output / table).glob("batch_id=*")}


def test_once_counts_everything_and_a_rerun_adds_only_new_files(
    spark: SparkSession, tmp_path: Path, write_events: EventWriter
) -> None:
    events, output = tmp_path / "events", tmp_path / "out"
    first = synthetic_events(1, 600, START, 300)
    write_events(events, "events-1.json", first)
    options = StreamOptions(input_dir=str(events), output_dir=str(output), once=True)

    run(spark, options)
    # --once reports every window, including those the watermark has not closed
    assert actual_topic_traffic(spark, output) == expected_topic_traffic(first)
    assert actual_client_sessions(spark, output) == expected_client_sessions(first)

    # more files, some events in windows already reported: merged, the first file not re-read
    second = synthetic_events(2, 300, START + 240, 200)
    third = synthetic_events(3, 300, START + 400, 100)
    write_events(events, "events-2.json", second)
    write_events(events, "events-3.json", third)
    batches_before = _batches(output, TOPIC_TRAFFIC)
    run(
        spark,
        StreamOptions(
            input_dir=str(events), output_dir=str(output), once=True, max_files_per_trigger=1
        ),
    )
    everything = first + second + third
    assert actual_topic_traffic(spark, output) == expected_topic_traffic(everything)
    assert actual_client_sessions(spark, output) == expected_client_sessions(everything)
    assert len(_batches(output, TOPIC_TRAFFIC) - batches_before) == 2  # one per new file
    assert corrupt_line_count(spark, str(output)) == (len(everything), 0)

    # nothing new: nothing written, nothing counted twice
    batches_before = _batches(output, TOPIC_TRAFFIC)
    run(spark, options)
    assert _batches(output, TOPIC_TRAFFIC) == batches_before
    assert actual_topic_traffic(spark, output) == expected_topic_traffic(everything)
    assert corrupt_line_count(spark, str(output)) == (len(everything), 0)


def test_corrupt_lines_are_counted_and_skipped_not_fatal(
    spark: SparkSession, tmp_path: Path, write_events: EventWriter
) -> None:
    events, output = tmp_path / "events", tmp_path / "out"
    good = synthetic_events(4, 50, START, 120)
    path = write_events(events, "events-1.json", good)
    with path.open("ab") as stream:
        stream.write(b"this is not json\n")
        stream.write(
            b'{"event": "message.publish", "ts": "2023-11-14T22:14:00.000000Z", "qos": "high"}\n'
        )
    run(spark, StreamOptions(input_dir=str(events), output_dir=str(output), once=True))
    assert corrupt_line_count(spark, str(output)) == (len(good) + 2, 2)
    assert actual_topic_traffic(spark, output) == expected_topic_traffic(good)
    assert actual_client_sessions(spark, output) == expected_client_sessions(good)


@pytest.mark.slow
def test_cli_once_entry_point(tmp_path: Path, write_events: EventWriter) -> None:
    events, output = tmp_path / "events", tmp_path / "out"
    records = synthetic_events(5, 100, START, 60)
    write_events(events, "events-1.json", records)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark.stream",
            "--input",
            str(events),
            "--output",
            str(output),
            "--once",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (output / TOPIC_TRAFFIC / "batch_id=0").is_dir()
    assert (output / "_checkpoints" / TOPIC_TRAFFIC / "commits" / "0").is_file()
    assert (output / CLIENT_SESSIONS / "batch_id=0").is_dir()
