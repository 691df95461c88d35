"""`python -m loadtest.generate_events DIR`: synthetic event-sink files to benchmark `spark.stream`.

Writes `--events` lines in the documented schema (spark.event_schema, docs/events.md), the way
the sink publishes them: files of about `--file-bytes` (the sink's `rotate_bytes`), written
aside and renamed in, named `events-<utc>-<node>-<worker>-<seq>.json`. Event time runs evenly
from `--start` over `--duration` seconds, so the input covers `duration / 60` one-minute
windows. The mix per step: a message.publish by a random client to a random topic followed by
0-2 message.delivered to random subscribers, and every `SESSION_EVERY` steps a reconnect
(client.disconnected then client.connected) of a random client. The default sizes are the
issue-18 benchmark's: 2,000,000 events, 1,000 topics, 10,000 clients, about 590 MB.

The totals (events, published, delivered, connects, disconnects, files, bytes) are logged and
written to `DIR/_summary.json` (Spark's file source skips names starting with `_`), so a run of
`spark.stream` over DIR can be checked against them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from spark.event_schema import event_record
from spark.json_lines import to_json_line

logger = logging.getLogger("loadtest.generate_events")

SESSION_EVERY: Final = 40  # steps between two reconnects
DISCONNECT_REASONS: Final = ("socket_closed", "client_disconnect", "keepalive_timeout")
SUMMARY_FILE: Final = "_summary.json"


@dataclass(slots=True)
class Totals:
    """What was generated: compare with the Spark tables' sums."""

    events: int = 0
    published: int = 0
    delivered: int = 0
    connects: int = 0
    disconnects: int = 0
    files: int = 0
    bytes: int = 0


class _Files:
    """Lines into files of about `file_bytes`, each written aside and renamed in."""

    def __init__(self, directory: Path, node: str, file_bytes: int, totals: Totals) -> None:
        self._directory = directory
        self._node = node
        self._file_bytes = file_bytes
        self._totals = totals
        self._lines: list[bytes] = []
        self._size = 0
        self._first_ts = ""

    def add(self, line: bytes, ts: str) -> None:
        if not self._lines:
            self._first_ts = ts
        self._lines.append(line)
        self._size += len(line)
        if self._size >= self._file_bytes:
            self.flush()

    def flush(self) -> None:
        if not self._lines:
            return
        self._totals.files += 1
        stamp = self._first_ts.replace("-", "").replace(":", "").replace(".", "")
        name = f"events-{stamp}-{self._node}-0-{self._totals.files:06d}.json"
        aside = self._directory / f"_{name}"
        aside.write_bytes(b"".join(self._lines))
        os.replace(aside, self._directory / name)
        self._totals.bytes += self._size
        self._lines = []
        self._size = 0


def generate(
    directory: Path,
    *,
    events: int,
    topics: int,
    clients: int,
    start: float,
    duration: float,
    seed: int = 1,
    file_bytes: int = 64 * 1024 * 1024,
    node: str = "gen",
) -> Totals:
    """Write the files into `directory` (created if missing) and return the totals."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    client_ids = [f"dev-{index:05d}" for index in range(clients)]
    topic_names = [f"sensors/{index:04d}" for index in range(topics)]
    totals = Totals()
    files = _Files(directory, node, file_bytes, totals)
    step_seconds = duration / events
    message_id = 0

    def emit(kind: str, **fields: Any) -> None:
        ts = start + totals.events * step_seconds
        record = event_record(kind, ts, node=node, worker=0, **fields)
        files.add(to_json_line(record), str(record["ts"]))
        totals.events += 1

    step = 0
    while totals.events < events:
        step += 1
        if step % SESSION_EVERY == 0:
            client = rng.choice(client_ids)
            peer = f"127.0.0.1:{rng.randint(1024, 65535)}"
            emit(
                "client.disconnected",
                client_id=client,
                username=client,
                peer=peer,
                reason=rng.choice(DISCONNECT_REASONS),
            )
            totals.disconnects += 1
            if totals.events < events:
                emit("client.connected", client_id=client, username=client, peer=peer)
                totals.connects += 1
            continue
        message_id += 1
        publisher = rng.choice(client_ids)
        message = {
            "topic": rng.choice(topic_names),
            "qos": rng.randint(0, 1),
            "retain": False,
            "payload_bytes": rng.randint(8, 512),
            "message_id": message_id,
            "publisher": publisher,
        }
        emit("message.publish", client_id=publisher, username=publisher, **message)
        totals.published += 1
        for _ in range(rng.randint(0, 2)):
            if totals.events >= events:
                break
            subscriber = rng.choice(client_ids)
            emit("message.delivered", client_id=subscriber, username=subscriber, **message)
            totals.delivered += 1
    files.flush()
    (directory / SUMMARY_FILE).write_text(json.dumps(asdict(totals), indent=2) + "\n")
    return totals


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.generate_events", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("directory", type=Path, help="where the event files go")
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--topics", type=int, default=1_000)
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--start", default="2025-01-01T00:00:00Z", help="first event time, UTC")
    parser.add_argument("--duration", type=float, default=3600.0, help="event-time span, s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--file-bytes", type=int, default=64 * 1024 * 1024)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    totals = generate(
        args.directory,
        events=args.events,
        topics=args.topics,
        clients=args.clients,
        start=_epoch(args.start),
        duration=args.duration,
        seed=args.seed,
        file_bytes=args.file_bytes,
    )
    logger.info("wrote %s into %s", asdict(totals), args.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
