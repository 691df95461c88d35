"""`SqliteStore`: the `Store` contract on one SQLite file (stdlib sqlite3, WAL journal).

Opening never writes before the file has been checked (`store.migrations.check_schema`): a
file that is not SQLite, another program's database, or a schema newer than this code is
refused with a `StoreError` and left byte for byte as it was. Then the journal is switched to
WAL and the schema migrated forward.

Durability: `synchronous="normal"` (the default) makes every committed batch survive a kill of
the broker process (SIGKILL, OOM): the WAL is written before COMMIT returns, only its fsync is
deferred to checkpoints. A power cut or kernel crash may lose the last batches committed
before it (the file stays consistent). `synchronous="full"` fsyncs each commit, for
power-loss durability at a higher commit latency (docs/persistence.md has measured figures).

The connection uses `locking_mode=EXCLUSIVE`: once open, no other process can read or write
the file, so two brokers cannot share a data directory. The connection is made with
`check_same_thread=False` because the `StoreWriter` runs `apply` in gevent's thread pool; it
must be used by one thread at a time.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from store.base import (
    DeleteMessage,
    DeleteRetained,
    DeleteSession,
    MarkInFlight,
    Op,
    PutMessage,
    PutRetained,
    PutSession,
    Snapshot,
    StoredDelivery,
    StoredSession,
    StoreError,
)
from store.migrations import SCHEMA_VERSION, check_schema, migrate
from store.records import (
    DELIVERY_COLUMNS,
    MESSAGE_COLUMNS,
    META_COLUMNS,
    delivery_from_record,
    delivery_to_record,
    message_from_record,
    message_to_record,
    meta_from_record,
    meta_to_record,
)

logger = logging.getLogger(__name__)

SYNCHRONOUS_MODES = ("normal", "full")
_LOCK_TIMEOUT = 1.0  # seconds to wait for a lock held by another process before failing


def _insert(table: str, columns: Sequence[str]) -> str:
    return (
        f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) "
        f"VALUES ({', '.join('?' * len(columns))})"
    )


_PUT_RETAINED = _insert("retained", MESSAGE_COLUMNS)
_PUT_SESSION = _insert("sessions", ("client_id", *META_COLUMNS))
_PUT_MESSAGE = _insert("session_messages", ("client_id", "seq", *DELIVERY_COLUMNS))
_DELETE_MESSAGE = "DELETE FROM session_messages WHERE client_id = ? AND seq = ?"
_MARK_IN_FLIGHT = (
    "UPDATE session_messages SET packet_id = ?, stage = ? WHERE client_id = ? AND seq = ?"
)
_SELECT_RETAINED = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM retained ORDER BY topic"
_SELECT_SESSIONS = f"SELECT client_id, {', '.join(META_COLUMNS)} FROM sessions"
_SELECT_MESSAGES = (
    f"SELECT client_id, seq, {', '.join(DELIVERY_COLUMNS)} FROM session_messages "
    "ORDER BY client_id, seq"
)

# For each op type, the statements that apply a run of such ops, and each statement's rows.
_Statement = tuple[str, Callable[[Any], tuple[Any, ...]]]
_STATEMENTS: dict[type, tuple[_Statement, ...]] = {
    PutMessage: ((_PUT_MESSAGE, lambda op: (op.client_id, op.seq, *delivery_to_record(op.entry))),),
    MarkInFlight: ((_MARK_IN_FLIGHT, lambda op: (op.packet_id, op.stage, op.client_id, op.seq)),),
    DeleteMessage: ((_DELETE_MESSAGE, lambda op: (op.client_id, op.seq)),),
    PutRetained: ((_PUT_RETAINED, lambda op: message_to_record(op.message)),),
    DeleteRetained: (("DELETE FROM retained WHERE topic = ?", lambda op: (op.topic,)),),
    PutSession: ((_PUT_SESSION, lambda op: (op.client_id, *meta_to_record(op.meta))),),
    DeleteSession: (
        ("DELETE FROM sessions WHERE client_id = ?", lambda op: (op.client_id,)),
        ("DELETE FROM session_messages WHERE client_id = ?", lambda op: (op.client_id,)),
    ),
}


class SqliteStore:
    """A `Store` in one SQLite file; see the module docstring for durability and locking."""

    def __init__(self, path: Path, *, synchronous: str = "normal") -> None:
        if synchronous not in SYNCHRONOUS_MODES:
            raise StoreError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise StoreError(f"{self.path} is not a regular file; give the store a file path")
        try:
            connection = sqlite3.connect(
                self.path, timeout=_LOCK_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the store {self.path}: {error}") from error
        try:
            connection.execute("PRAGMA locking_mode = EXCLUSIVE")
            version = check_schema(connection, self.path, SCHEMA_VERSION)
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            migrate(connection, self.path, version)
            connection.execute("BEGIN EXCLUSIVE")  # take the lock now, not at the first write
            connection.execute("COMMIT")
        except BaseException as error:
            connection.close()
            if isinstance(error, sqlite3.Error):
                raise StoreError(f"cannot open the store {self.path}: {error}") from error
            raise
        self._connection: sqlite3.Connection | None = connection
        logger.info("opened store %s (schema version %d)", self.path, SCHEMA_VERSION)

    def __repr__(self) -> str:
        return f"SqliteStore('{self.path}')"

    def apply(self, ops: Sequence[Op]) -> None:
        if not ops:
            return
        connection = self._open_connection()
        try:
            connection.execute("BEGIN IMMEDIATE")
            for op_type, run in groupby(ops, type):
                same_type_ops = list(run)
                for sql, row in _STATEMENTS[op_type]:
                    connection.executemany(sql, map(row, same_type_ops))
            connection.execute("COMMIT")
        except (sqlite3.Error, KeyError, TypeError, ValueError) as error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise StoreError(
                f"{self!r}: could not apply a batch of {len(ops)} operations, nothing of it was "
                f"written: {type(error).__name__}: {error}"
            ) from error

    def load(self) -> Snapshot:
        connection = self._open_connection()
        try:
            retained = [message_from_record(row) for row in connection.execute(_SELECT_RETAINED)]
            sessions = {
                row[0]: StoredSession(meta_from_record(row[1:]), [])
                for row in connection.execute(_SELECT_SESSIONS)
            }
            orphans = self._attach_messages(connection.execute(_SELECT_MESSAGES), sessions)
        except (sqlite3.Error, KeyError, TypeError, ValueError) as error:
            raise StoreError(
                f"{self!r}: cannot read the stored state ({type(error).__name__}: {error}); "
                "restore the file from a backup or move it away to start empty"
            ) from error
        if orphans:
            logger.warning("%r: skipped %d messages of unknown sessions", self, orphans)
        return Snapshot(retained=retained, sessions=sessions)

    @staticmethod
    def _attach_messages(rows: Iterable[Any], sessions: dict[str, StoredSession]) -> int:
        """Append each message row to its session; return how many had no session."""
        orphans = 0
        for row in rows:
            session = sessions.get(row[0])
            if session is None:
                orphans += 1
                continue
            entry: StoredDelivery = delivery_from_record(row[2:])
            session.messages.append((row[1], entry))
        return orphans

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _open_connection(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StoreError(f"{self!r} is closed")
        return self._connection
