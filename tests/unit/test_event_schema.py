"""The event line schema shared by the event sink and the Spark jobs."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from spark.event_schema import (
    EVENT_FIELDS,
    FIELD_NAMES,
    SCHEMA_VERSION,
    event_record,
    format_ts,
    spark_schema,
)
from spark.json_lines import to_json_line

# 2001-09-09 .. 2286: epoch floats whose microseconds a double still holds exactly enough
epochs = st.floats(min_value=1e9, max_value=9.9e9, allow_nan=False, allow_infinity=False)


def test_record_has_every_field_in_schema_order() -> None:
    record = event_record("client.connected", 1.5, node="n", worker=2, client_id="c")
    assert tuple(record) == FIELD_NAMES
    assert record["schema"] == SCHEMA_VERSION
    assert record["client_id"] == "c"
    assert record["topic"] is None


def test_timestamp_is_utc_iso_with_microseconds_even_when_whole() -> None:
    assert format_ts(1_700_000_000.0) == "2023-11-14T22:13:20.000000Z"
    assert format_ts(1_700_000_000.25) == "2023-11-14T22:13:20.250000Z"


@settings(max_examples=200)
@given(epochs)
def test_timestamp_round_trips_to_the_microsecond(epoch: float) -> None:
    text = format_ts(epoch)
    assert len(text) == len("2023-11-14T22:13:20.000000Z")
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert text.endswith("Z")
    assert parsed.utcoffset() == UTC.utcoffset(None)
    assert abs(parsed.timestamp() - epoch) <= 1e-6 + abs(epoch) * 1e-15


@settings(max_examples=100)
@given(
    topic=st.text(), client_id=st.text(), payload_bytes=st.integers(0, 2**40), retain=st.booleans()
)
def test_json_line_is_one_line_that_parses_back(
    topic: str, client_id: str, payload_bytes: int, retain: bool
) -> None:
    record = event_record(
        "message.publish",
        1_700_000_000.123456,
        node="node",
        worker=0,
        client_id=client_id,
        topic=topic,
        payload_bytes=payload_bytes,
        retain=retain,
        publisher=client_id,
    )
    line = to_json_line(record)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1  # newlines inside strings are escaped
    assert orjson.loads(line) == record


def test_spark_schema_matches_the_field_list() -> None:
    schema = spark_schema()
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        (name, {"long": "bigint"}.get(kind, kind)) for name, kind in EVENT_FIELDS
    ]
