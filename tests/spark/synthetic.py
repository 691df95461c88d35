"""Synthetic event records (spark.event_schema, as the sink writes them) and the tables they make.

`expected_topic_traffic` and `expected_client_sessions` compute, in plain Python, what the job's
tables must hold for a list of records, in the shape tests.spark.readers returns.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from core.reasons import DisconnectReason
from spark.event_schema import event_record
from tests.spark.readers import Rows

START = 1_700_000_040.0  # 2023-11-14 22:14:00 UTC, a whole minute
TOPICS = ("sensors/a", "sensors/b", "cmd/x", "$SYS/load")
CLIENTS = ("c1", "c2", "c3", "c4", "c5")
REASONS = tuple(reason.value for reason in DisconnectReason)
Record = dict[str, Any]


def synthetic_events(seed: int, count: int, start: float, span: float) -> list[Record]:
    """`count` random events of 5 clients on 4 topics, evenly likely anywhere in the span."""
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


def publish(ts: float, topic: str, client: str, size: int = 10) -> Record:
    """One message.publish record."""
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


def window_of(record: Record) -> int:
    epoch = datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()
    return int(epoch // 60 * 60)


def expected_topic_traffic(records: list[Record]) -> Rows:
    totals: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    publishers: dict[tuple[int, str], set[str]] = defaultdict(set)
    for record in records:
        key = (window_of(record), record["topic"])
        if record["event"] == "message.publish":
            totals[key][0] += 1
            totals[key][2] += record["payload_bytes"]
            publishers[key].add(record["publisher"])
        elif record["event"] == "message.delivered":
            totals[key][1] += 1
    return {
        key: (*values, len(publishers[key]), sorted(publishers[key]))
        for key, values in totals.items()
    }


def expected_client_sessions(records: list[Record]) -> Rows:
    counts: dict[tuple[int, str], Counter[str]] = defaultdict(Counter)
    for record in records:
        key = (window_of(record), record["client_id"])
        counts[key][record["event"]] += 1  # every event of the client makes its row
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
