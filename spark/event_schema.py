"""The event file schema: the one contract between the broker's event sink and the Spark jobs.

Each line of an event file is one JSON object with every field of `EVENT_FIELDS` (absent values
are `null`). The sink builds lines with `event_record` + `to_json_line`; the Spark jobs read them
with `spark_schema()`; tests write synthetic files with the same two functions. Bump
`SCHEMA_VERSION` whenever a field is added, removed or changes meaning, and update
docs/events.md.

This module is on the Spark job's import path, which must need nothing but pyspark and the
standard library (the job travels to a cluster in a zip, and compiled extensions cannot). So
pyspark is imported only inside `spark_schema()` (the broker never needs it), and `to_json_line`,
which needs orjson, lives in `spark.json_lines`, which the job never imports.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

SCHEMA_VERSION: Final = 1

# The sink's own event: how many hook events it could not write, and why (`reason`).
SINK_DROPPED: Final = "sink.dropped"

# (field name, Spark SQL type name), in file order.
EVENT_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("event", "string"),  # hook point name ("message.publish", ...) or "sink.dropped"
    ("ts", "timestamp"),  # ISO-8601 UTC with microseconds, e.g. 2025-01-31T12:00:00.000001Z
    ("node", "string"),  # broker node name
    ("worker", "int"),  # broker worker id within the node
    ("client_id", "string"),  # the client concerned; the subscriber for delivered/acked
    ("username", "string"),
    ("peer", "string"),  # "host:port" of the client's connection (connect events)
    ("topic", "string"),  # topic name, or topic filter for session.(un)subscribed
    ("qos", "int"),  # message QoS; the granted/delivered QoS where it differs
    ("retain", "boolean"),
    ("payload_bytes", "long"),
    ("payload", "string"),  # base64 or UTF-8 text, only when the sink is told to keep payloads
    ("reason", "string"),  # disconnect reason, drop reason, or sink.dropped cause
    ("message_id", "long"),  # the broker's message id: joins publish, delivered, acked, dropped
    ("publisher", "string"),  # client id of the message's publisher (message events)
    ("dropped", "long"),  # sink.dropped only: events lost since the previous sink.dropped
    ("schema", "int"),  # SCHEMA_VERSION of the writer
)

FIELD_NAMES: Final = tuple(name for name, _ in EVENT_FIELDS)

# Name of the column Spark fills with lines that do not match the schema (PERMISSIVE mode).
CORRUPT_RECORD_COLUMN: Final = "_corrupt_record"


def format_ts(epoch_seconds: float) -> str:
    """Epoch seconds as ISO-8601 UTC with exactly six fractional digits and a `Z`."""
    moment = datetime.fromtimestamp(epoch_seconds, UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="microseconds") + "Z"


def event_record(
    event: str,
    ts: float,
    *,
    node: str,
    worker: int,
    client_id: str | None = None,
    username: str | None = None,
    peer: str | None = None,
    topic: str | None = None,
    qos: int | None = None,
    retain: bool | None = None,
    payload_bytes: int | None = None,
    payload: str | None = None,
    reason: str | None = None,
    message_id: int | None = None,
    publisher: str | None = None,
    dropped: int | None = None,
) -> dict[str, object]:
    """One event as a dict with every schema field, in `EVENT_FIELDS` order; `ts` in epoch s."""
    return {
        "event": event,
        "ts": format_ts(ts),
        "node": node,
        "worker": worker,
        "client_id": client_id,
        "username": username,
        "peer": peer,
        "topic": topic,
        "qos": qos,
        "retain": retain,
        "payload_bytes": payload_bytes,
        "payload": payload,
        "reason": reason,
        "message_id": message_id,
        "publisher": publisher,
        "dropped": dropped,
        "schema": SCHEMA_VERSION,
    }


def spark_schema() -> StructType:
    """The Spark StructType of an event line (imports pyspark on first call)."""
    from pyspark.sql.types import (  # noqa: PLC0415 - the broker must not need pyspark
        BooleanType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    spark_types = {
        "string": StringType(),
        "timestamp": TimestampType(),
        "int": IntegerType(),
        "long": LongType(),
        "boolean": BooleanType(),
    }
    return StructType([StructField(name, spark_types[kind], True) for name, kind in EVENT_FIELDS])
