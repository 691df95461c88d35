"""Cost of the store's hot path per message op, without the broker, in its two halves.

Each round makes one transaction of N `PutMessage` (queued), one `MarkInFlight` and one
`DeleteMessage` of the same N messages, as a persistent subscriber's traffic produces them,
and times separately what the broker's event loop does with each (`encode_ops`) and what
the store process does with the bytes (`SqliteStore.apply_encoded`). The deletes also drop
the log rows that hold nothing live any more.

    python -m loadtest.bench_store [--rounds 300] [--batch 300] [--payload 64]

Prints microseconds per message for each kind and half. Uses a temporary directory, no
network.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from core.message import Message
from store import DeleteMessage, MarkInFlight, PutMessage, PutSession, SessionMeta, SqliteStore
from store.base import Op, StoredDelivery
from store.op_codec import encode_ops

logger = logging.getLogger("loadtest.bench_store")

KINDS = ("put", "mark", "delete")
HALVES = {
    "encode": "broker loop, encode_ops",
    "apply": "store process, SqliteStore.apply_encoded",
}


def run(rounds: int, batch: int, payload_size: int) -> dict[tuple[str, str], float]:
    """Microseconds per op of each kind, over `rounds` rounds of `batch` messages."""
    message = Message(topic="bench/store", payload=b"x" * payload_size, qos=1)
    seconds: dict[tuple[str, str], float] = {(kind, half): 0.0 for kind in KINDS for half in HALVES}
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(Path(directory) / "bench.sqlite3")
        store.apply([PutSession("sub", SessionMeta(protocol_version=4, expiry_interval=60.0))])
        for round_number in range(rounds):
            seqs = range(round_number * batch, (round_number + 1) * batch)
            transactions: dict[str, list[Op]] = {
                "put": [
                    PutMessage("sub", seq, StoredDelivery(message=message, qos=1, retain=False))
                    for seq in seqs
                ],
                "mark": [
                    MarkInFlight("sub", "await_puback", [(seq, 1 + seq % 65535) for seq in seqs])
                ],
                "delete": [DeleteMessage("sub", list(seqs))],
            }
            for kind, ops in transactions.items():
                started = time.perf_counter()
                encoded = encode_ops(ops)
                encoded_at = time.perf_counter()
                store.apply_encoded(encoded)
                seconds[(kind, "encode")] += encoded_at - started
                seconds[(kind, "apply")] += time.perf_counter() - encoded_at
        store.close()
    return {key: total / (rounds * batch) * 1e6 for key, total in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--batch", type=int, default=300, help="messages per transaction")
    parser.add_argument("--payload", type=int, default=64, help="payload bytes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    costs = run(args.rounds, args.batch, args.payload)
    logger.info("%d messages per transaction, %d-byte payloads:", args.batch, args.payload)
    for half, where in HALVES.items():
        logger.info(
            "  %s: %s",
            where,
            ", ".join(f"{kind} {costs[(kind, half)]:.2f} us/message" for kind in KINDS),
        )


if __name__ == "__main__":
    main()
