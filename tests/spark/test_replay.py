"""A batch that fails at any step of its merge is finished, exactly once, by Spark's replay.

foreachBatch runs in this Python process, so a test can make one of the merge's file
operations fail: the query stops with the error and the batch is not committed. The next run
replays it from the checkpoint. Three crash points, one run each, on the same output:
before a stage is marked complete, between two partition moves of the publish step, and after
every table is published but before Spark commits the batch. A last run without faults must
leave the tables exactly as the events say, with one `batches` row per batch.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pytest
from pyspark.errors import StreamingQueryException

from spark import stream, tables
from spark.stream import StreamOptions, run
from tests.spark.conftest import EventWriter
from tests.spark.readers import (
    CLIENT_SESSIONS,
    TOPIC_TRAFFIC,
    Rows,
    batch_totals,
    every_reader,
)
from tests.spark.synthetic import (
    START,
    expected_client_sessions,
    expected_topic_traffic,
    synthetic_events,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

TWO_HOURS = 7200.0  # every file's events fall in several hourly partitions


def _fail_on_call(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, call_number: int, *, about: str
) -> None:
    """Make `owner.name` raise on its `call_number`-th call whose arguments mention `about`.

    The tables merge in threads of their own: counting one table's calls keeps the crash
    point the same whatever the threads' order.
    """
    original: Callable[..., Any] = getattr(owner, name)
    calls = itertools.count(1)
    lock = threading.Lock()

    def failing(*args: Any, **kwargs: Any) -> Any:
        if about not in repr(args):
            return original(*args, **kwargs)
        with lock:
            call = next(calls)
        if call == call_number:
            raise RuntimeError(f"injected crash in {name}")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)


def _at_most(actual: Rows, expected: Rows) -> bool:
    """No key the events lack, and no count above the events' (a partial table is fine)."""
    return all(
        key in expected and all(a <= e for a, e in zip(values[:2], expected[key][:2], strict=True))
        for key, values in actual.items()
    )


def test_a_crash_anywhere_in_a_batch_is_finished_by_the_replay_exactly_once(
    spark: SparkSession,
    tmp_path: Path,
    write_events: EventWriter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events, output = tmp_path / "events", tmp_path / "out"
    files = [synthetic_events(seed, 300, START, TWO_HOURS) for seed in (11, 12, 13)]
    for number, records in enumerate(files):
        write_events(events, f"events-{number}.json", records)
    everything = [record for records in files for record in records]
    expected_topics = expected_topic_traffic(everything)
    options = StreamOptions(
        input_dir=str(events),
        output_dir=str(output),
        once=True,
        max_files_per_trigger=1,
        watermark="1 day",  # the files overlap in time: nothing is late in this test
    )
    crashes: list[tuple[Any, str, int, str]] = [
        # batch 0, topic_traffic's stage written but not marked complete
        (tables.HadoopFiles, "touch", 1, TOPIC_TRAFFIC),
        # batch 0 replayed: topic_traffic merged again, one partition moved in, not the next
        (tables.HadoopFiles, "replace_dir", 2, TOPIC_TRAFFIC),
        # batch 0 replayed again: every table published, the batch not committed
        (stream, "_report_losses", 1, ""),
    ]
    for owner, name, call_number, about in crashes:
        with monkeypatch.context() as patch:
            _fail_on_call(patch, owner, name, call_number, about=about)
            with pytest.raises(StreamingQueryException, match=f"injected crash in {name}"):
                run(spark, options)
        if (output / TOPIC_TRAFFIC).exists():  # whatever is published is never too much
            assert _at_most(every_reader(spark, output, TOPIC_TRAFFIC), expected_topics)

    summary = run(spark, options)
    assert summary.batches == 3  # batch 0 (replayed once more), 1 and 2
    assert every_reader(spark, output, TOPIC_TRAFFIC) == expected_topics
    assert every_reader(spark, output, CLIENT_SESSIONS) == expected_client_sessions(everything)
    assert batch_totals(output) == (len(everything), 0, 0)
    batch_ids = duckdb.sql(
        "SELECT batch_id FROM read_parquet($path) ORDER BY 1",
        params={"path": f"{output}/batches/**/*.parquet"},
    ).fetchall()
    assert batch_ids == [(0,), (1,), (2,)]
    # the last batch's stages are kept until the next batch; every older one is gone
    assert {path.name for path in (output / "_stage").glob("*/batch_id=*")} == {"batch_id=2"}
