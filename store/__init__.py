"""Durable storage of retained messages and persistent sessions (docs/persistence.md).

`open_store` picks a backend; `StoreWriter` (store.writer) applies op batches with group
commit on gevent. The records and ops are in `store.base`. The SQLite store runs in a process
of its own (`store.process_store`).
"""

from __future__ import annotations

from pathlib import Path

from store.base import (
    DeleteMessage,
    DeleteRetained,
    DeleteSession,
    MarkInFlight,
    Op,
    PutMessage,
    PutRetained,
    PutSession,
    SessionMeta,
    Snapshot,
    Store,
    StoredDelivery,
    StoredSession,
    StoredSubscription,
    StoreError,
    StoreUnavailableError,
)
from store.memory_store import MemoryStore
from store.process_store import ProcessStore
from store.sqlite_store import SqliteStore

STORE_KINDS = ("memory", "sqlite")
SQLITE_FILE_NAME = "broker-store.sqlite3"


def open_store(kind: str, data_dir: Path, *, synchronous: str = "normal") -> Store:
    """Open the store of `kind`: "memory", or "sqlite" (its file lives in `data_dir`; the
    store runs in a process of its own, see `store.process_store`)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the data directory {data_dir}: {error}") from error
        return ProcessStore(data_dir / SQLITE_FILE_NAME, synchronous=synchronous)
    raise StoreError(f"unknown store kind {kind!r}; use one of {', '.join(STORE_KINDS)}")


__all__ = [
    "STORE_KINDS",
    "DeleteMessage",
    "DeleteRetained",
    "DeleteSession",
    "MarkInFlight",
    "MemoryStore",
    "Op",
    "ProcessStore",
    "PutMessage",
    "PutRetained",
    "PutSession",
    "SessionMeta",
    "Snapshot",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "StoredDelivery",
    "StoredSession",
    "StoredSubscription",
    "open_store",
]
