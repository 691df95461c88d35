"""Cost of the store's hot path: `SqliteStore.apply` per message op, without the broker.

Each round applies one transaction of N `PutMessage` (queued), one of N `MarkInFlight` and
one of N `DeleteMessage` for the same messages, as a persistent subscriber's traffic
produces them. The deletes also drop the log rows that hold nothing live any more.

    python -m loadtest.bench_store [--rounds 300] [--batch 300] [--payload 64]

Prints microseconds per op for each kind. Uses a temporary directory, no network.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from hooks.events import Message
from store import DeleteMessage, MarkInFlight, PutMessage, PutSession, SessionMeta, SqliteStore
from store.base import StoredDelivery

logger = logging.getLogger("loadtest.bench_store")


def run(rounds: int, batch: int, payload_size: int) -> dict[str, float]:
    """Microseconds per op of each kind, over `rounds` rounds of `batch` messages."""
    message = Message(topic="bench/store", payload=b"x" * payload_size, qos=1)
    seconds = {"put": 0.0, "mark": 0.0, "delete": 0.0}
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(Path(directory) / "bench.sqlite3")
        store.apply([PutSession("sub", SessionMeta(protocol_version=4, expiry_interval=60.0))])
        for round_number in range(rounds):
            seqs = range(round_number * batch, (round_number + 1) * batch)
            transactions = {
                "put": [
                    PutMessage("sub", seq, StoredDelivery(message=message, qos=1, retain=False))
                    for seq in seqs
                ],
                "mark": [MarkInFlight("sub", seq, 1 + seq % 65535, "await_puback") for seq in seqs],
                "delete": [DeleteMessage("sub", seq) for seq in seqs],
            }
            for kind, ops in transactions.items():
                started = time.perf_counter()
                store.apply(ops)
                seconds[kind] += time.perf_counter() - started
        store.close()
    return {kind: total / (rounds * batch) * 1e6 for kind, total in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--batch", type=int, default=300, help="messages per transaction")
    parser.add_argument("--payload", type=int, default=64, help="payload bytes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    costs = run(args.rounds, args.batch, args.payload)
    logger.info(
        "SqliteStore.apply, %d ops per transaction, %d-byte payloads: %s",
        args.batch,
        args.payload,
        ", ".join(f"{kind} {micros:.2f} us/op" for kind, micros in costs.items()),
    )


if __name__ == "__main__":
    main()
