"""`SqliteStore`: the `Store` contract on one SQLite file (stdlib sqlite3, WAL journal).

Message ops (queued, in flight, acknowledged) go to the message log, one row per commit
(`store.message_log`); messages that stay long enough are compacted into `session_messages`
by `maintain()`. Retained messages and session metadata are plain rows.

Opening never writes before the file has been checked (`check_store_file`, then
`store.migrations.check_schema`): an empty (0-byte) file, a file that is not SQLite, another
program's database, or a schema newer than this code is refused with a `StoreError` and left
byte for byte as it was. Then the journal is switched to WAL and the schema migrated forward.
Only a missing file makes a new store.

Durability: `synchronous="normal"` (the default) makes every committed batch survive a kill of
the broker process (SIGKILL, OOM): the WAL is written before COMMIT returns, only its fsync is
deferred to checkpoints. A power cut or kernel crash may lose the last batches committed
before it (the file stays consistent). `synchronous="full"` fsyncs each commit, for
power-loss durability at a higher commit latency (docs/persistence.md has measured figures).

The broker runs this store in a process of its own (`store.store_process`), which applies
the batches the broker encodes (`apply_encoded`) and calls `maintain()` between them: the WAL
is checkpointed there, with its fsyncs (`wal_autocheckpoint` is off), and the log compacted.

The connection uses `locking_mode=EXCLUSIVE`: once open, no other process can read or write
the file, so two brokers cannot share a data directory.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain, groupby
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
    StoreError,
)
from store.message_log import DELETE_SESSION, MessageLog
from store.migrations import SCHEMA_VERSION, check_schema, migrate
from store.op_codec import (
    DELETES,
    MARKS,
    StoredRecord,
    decode_records,
    decode_snapshot,
    encode_snapshot,
    op_from_record,
    op_records,
    pairs,
)
from store.records import (
    DELIVERY_COLUMNS,
    MESSAGE_COLUMNS,
    META_COLUMNS,
    PUT,
    delivery_from_record,
    delivery_to_record,
    message_from_record,
    message_to_record,
    meta_from_record,
    meta_to_record,
    put_record,
)

logger = logging.getLogger(__name__)

SYNCHRONOUS_MODES = ("normal", "full")
# What a bad file or a value the schema cannot hold raises from sqlite3 and the records.
_UNSTORABLE = (sqlite3.Error, KeyError, TypeError, ValueError)
_LOCK_TIMEOUT = 1.0  # seconds to wait for a lock held by another process before failing


def _insert(table: str, columns: Sequence[str]) -> str:
    return (
        f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) "
        f"VALUES ({', '.join('?' * len(columns))})"
    )


_PUT_RETAINED = _insert("retained", MESSAGE_COLUMNS)
_PUT_SESSION = _insert("sessions", ("client_id", *META_COLUMNS))
_PUT_MESSAGE = _insert("session_messages", ("client_id", "seq", *DELIVERY_COLUMNS))
_SELECT_MESSAGE_KEYS = "SELECT client_id, seq FROM session_messages"
_SELECT_LOG = "SELECT batch, records FROM message_log ORDER BY batch"
_INSERT_LOG = "INSERT INTO message_log (batch, records) VALUES (?, ?)"
_DROP_LOG = "DELETE FROM message_log WHERE batch < ?"
# When the log holds more than this in dead batches (kept because an older live message
# pins them), maintain() compacts its oldest batches, moving up to COMPACT_MESSAGES live
# messages per transaction into session_messages.
COMPACT_BYTES = 32 * 1024 * 1024
COMPACT_MIN_AGE = 30.0  # seconds the oldest batch must have waited (see compaction_due)
COMPACT_MESSAGES = 5000
# maintain() checkpoints the WAL after about this many bytes of commits (SQLite's default
# automatic checkpoint is at 1000 pages, 4 MiB).
CHECKPOINT_BYTES = 4 * 1024 * 1024
_PAGE = 4096  # commits are counted in WAL pages: whole pages are written
_DELETE_MESSAGE = "DELETE FROM session_messages WHERE client_id = ? AND seq = ?"
_MARK_IN_FLIGHT = (
    "UPDATE session_messages SET packet_id = ?, stage = ? WHERE client_id = ? AND seq = ?"
)
_SELECT_RETAINED = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM retained ORDER BY topic"
_SELECT_SESSIONS = f"SELECT client_id, {', '.join(META_COLUMNS)} FROM sessions"
_SELECT_MESSAGES = f"SELECT client_id, seq, {', '.join(DELIVERY_COLUMNS)} FROM session_messages"
_SELECT_SESSION = f"{_SELECT_SESSIONS} WHERE client_id = ?"
_SELECT_SESSION_MESSAGES = f"{_SELECT_MESSAGES} WHERE client_id = ?"


def _message_of_row(row: Sequence[Any]) -> tuple[str, int, list[Any], bytes]:
    """A `_SELECT_MESSAGES` row as (client id, seq, put record, payload)."""
    client_id, seq = row[0], row[1]
    entry = delivery_from_record(row[2:])
    return client_id, seq, put_record(client_id, seq, entry), entry.message.payload


# SQLite's side files of a store: its WAL, or a rollback journal (the -shm is only an index).
_SIDE_FILE_SUFFIXES = ("-wal", "-journal")


def check_store_file(path: Path) -> None:
    """Refuse, before SQLite opens it, a `path` that exists but cannot be a store: not a
    regular file, or empty. SQLite would take an empty file for a new database (and delete
    a WAL next to it on close), so a truncated store would silently start empty and be
    overwritten. Only a missing file makes a new store."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise StoreError(
            f"cannot open the store {path}: {error}; check the path and its permissions"
        ) from error
    if not stat.S_ISREG(status.st_mode):
        raise StoreError(f"{path} is not a regular file; give the store a file path")
    if status.st_size == 0:
        raise StoreError(_empty_file_message(path))


def _empty_file_message(path: Path) -> str:
    side_files = []
    for suffix in _SIDE_FILE_SUFFIXES:
        side = path.with_name(path.name + suffix)
        try:
            size = os.stat(side).st_size
        except OSError:
            continue
        if size:
            side_files.append(f"{side} ({size} bytes)")
    if not side_files:
        return (
            f"{path} is empty (0 bytes), so it holds no store; it was left untouched. To "
            "start with an empty store, move or delete it, or point the broker at a new "
            "data directory (--data-dir)"
        )
    return (
        f"{path} is empty (0 bytes), so it holds no store, but {' and '.join(side_files)} "
        "next to it may hold the data of one; all were left untouched. To start with an "
        "empty store, move them away together (keep them to recover that data), or point "
        "the broker at a new data directory (--data-dir)"
    )


# For each op type, the statements that apply a run of such ops, and each statement's rows
# for one op.
_Statement = tuple[str, Callable[[Any], list[Sequence[Any]]]]
_STATEMENTS: dict[type, tuple[_Statement, ...]] = {
    PutMessage: (
        (_PUT_MESSAGE, lambda op: [(op.client_id, op.seq, *delivery_to_record(op.entry))]),
    ),
    MarkInFlight: (
        (
            _MARK_IN_FLIGHT,
            lambda op: [(packet_id, op.stage, op.client_id, seq) for seq, packet_id in op.marks],
        ),
    ),
    DeleteMessage: ((_DELETE_MESSAGE, lambda op: [(op.client_id, seq) for seq in op.seqs]),),
    PutRetained: ((_PUT_RETAINED, lambda op: [message_to_record(op.message)]),),
    DeleteRetained: (("DELETE FROM retained WHERE topic = ?", lambda op: [(op.topic,)]),),
    PutSession: ((_PUT_SESSION, lambda op: [(op.client_id, *meta_to_record(op.meta))]),),
    DeleteSession: (
        ("DELETE FROM sessions WHERE client_id = ?", lambda op: [(op.client_id,)]),
        ("DELETE FROM session_messages WHERE client_id = ?", lambda op: [(op.client_id,)]),
    ),
}


class SqliteStore:
    """A `Store` in one SQLite file; see the module docstring for durability and locking."""

    def __init__(self, path: Path, *, synchronous: str = "normal") -> None:
        if synchronous not in SYNCHRONOUS_MODES:
            raise StoreError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
        self.path = Path(path)
        check_store_file(self.path)  # before sqlite3 creates or reads anything
        try:
            connection = sqlite3.connect(self.path, timeout=_LOCK_TIMEOUT, isolation_level=None)
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the store {self.path}: {error}") from error
        try:
            connection.execute("PRAGMA locking_mode = EXCLUSIVE")
            version = check_schema(connection, self.path, SCHEMA_VERSION)
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            connection.execute("PRAGMA wal_autocheckpoint = 0")  # maintain() checkpoints
            migrate(connection, self.path, version)
            connection.execute("BEGIN EXCLUSIVE")  # take the lock now, not at the first write
            connection.execute("COMMIT")
            self._log = self._replay_log(connection)
        except BaseException as error:
            connection.close()
            if isinstance(error, sqlite3.Error):
                raise StoreError(f"cannot open the store {self.path}: {error}") from error
            raise
        self._connection: sqlite3.Connection | None = connection
        self._stored_head = self._log.head  # the oldest batch that may still be stored
        self._wal_bytes = 0  # written since the last checkpoint (estimated)
        logger.info("opened store %s (schema version %d)", self.path, SCHEMA_VERSION)

    def __repr__(self) -> str:
        return f"SqliteStore('{self.path}')"

    def apply(self, ops: Sequence[Op]) -> None:
        try:
            records = op_records(ops)
        except (KeyError, TypeError, ValueError) as error:
            raise StoreError(
                f"{self!r}: could not apply a batch of {len(ops)} operations, nothing of it "
                f"was written: {type(error).__name__}: {error}"
            ) from error
        self._apply_records(records)

    def apply_encoded(self, batch: bytes | bytearray) -> None:
        """`apply(decode_ops(batch))` for a batch from `store.op_codec.encode_ops`, without
        building the ops: the store process applies what the broker sends this way."""
        try:
            records = decode_records(batch)
        except ValueError as error:
            raise StoreError(f"{self!r}: {error}; nothing of it was written") from error
        self._apply_records(records)

    def _apply_records(self, records: list[tuple[list[Any], Any]]) -> None:
        if not records:
            return
        connection = self._open_connection()
        failure = f"could not apply a batch of {len(records)} operations, nothing of it was written"
        with self._writing(connection, failure):
            table_ops = self._log_message_records(records)
            written = self._write_log_batch(connection)
            for op_type, run in groupby(table_ops, type):
                same_type_ops = list(run)
                for sql, rows in _STATEMENTS[op_type]:
                    connection.executemany(sql, chain.from_iterable(map(rows, same_type_ops)))
            self._drop_dead_batches(connection)
        self._wal_bytes += written + _PAGE * (2 + len(table_ops))

    def _log_message_records(self, records: list[tuple[list[Any], Any]]) -> list[Op]:
        """Hand the message ops to the log; return, in order, the ops for the tables: all
        others, and message ops about messages compacted into session_messages."""
        log = self._log
        put, mark, delete = log.put, log.mark, log.delete  # bound once: the per-message path
        table_ops: list[Op] = []
        for record, payload in records:
            kind = record[0]
            if kind == PUT:
                if not put(record[1], record[2], record, payload):
                    table_ops.append(op_from_record(record, payload))
            elif kind == MARKS:
                client_id, stage = record[1], record[2]
                marks_in_table = [
                    (seq, packet_id)
                    for seq, packet_id in pairs(record[3])
                    if not mark(client_id, seq, packet_id, stage)
                ]
                if marks_in_table:
                    table_ops.append(MarkInFlight(client_id, stage, marks_in_table))
            elif kind == DELETES:
                client_id = record[1]
                in_table = [seq for seq in record[2] if not delete(client_id, seq)]
                for seq in in_table:
                    log.table_deleted(client_id, seq)
                if in_table:
                    table_ops.append(DeleteMessage(client_id, in_table))
            else:
                if kind == DELETE_SESSION:
                    log.delete_session(record[1])
                table_ops.append(op_from_record(record, payload))
        return table_ops

    def _write_log_batch(self, connection: sqlite3.Connection) -> int:
        batch = self._log.take_batch()
        if batch is None:
            return 0
        connection.execute(_INSERT_LOG, batch)
        return len(batch[1])

    def _drop_dead_batches(self, connection: sqlite3.Connection) -> None:
        head = self._log.droppable_head()
        if head > self._stored_head:
            connection.execute(_DROP_LOG, (head,))
            self._stored_head = head

    def _roll_back(self, connection: sqlite3.Connection) -> None:
        """Undo the transaction and rebuild the log index from what is stored."""
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        self._log = self._replay_log(connection)
        self._stored_head = self._log.head

    def needs_maintenance(self) -> bool:
        return self._wal_bytes > CHECKPOINT_BYTES or self._log.compaction_due(
            COMPACT_BYTES, COMPACT_MIN_AGE
        )

    def maintain(self) -> None:
        """Compact the log if it is due, then checkpoint the WAL (this may fsync: the store
        process runs it between batches)."""
        connection = self._open_connection()
        if self._log.compaction_due(COMPACT_BYTES, COMPACT_MIN_AGE):
            with self._writing(connection, "compaction failed, nothing was lost"):
                moved = self._log.compact_head(COMPACT_MESSAGES)
                rows = [(client, seq, *delivery_to_record(entry)) for client, seq, entry in moved]
                connection.executemany(_PUT_MESSAGE, rows)
                self._drop_dead_batches(connection)
            logger.debug("%r: compacted %d messages out of the message log", self, len(moved))
        try:
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as error:
            raise StoreError(
                f"{self!r}: WAL checkpoint failed, nothing was lost: {error}"
            ) from error
        self._wal_bytes = 0

    @contextmanager
    def _writing(self, connection: sqlite3.Connection, failure: str) -> Iterator[None]:
        """One write transaction. If the body fails, roll back (the log index is rebuilt
        from what is stored) and raise StoreError saying `failure` and why."""
        try:
            connection.execute("BEGIN IMMEDIATE")
            yield
            connection.execute("COMMIT")
        except _UNSTORABLE as error:
            self._roll_back(connection)
            raise StoreError(f"{self!r}: {failure}: {type(error).__name__}: {error}") from error

    def load(self) -> Snapshot:
        return decode_snapshot(self.load_encoded())

    def load_encoded(self) -> bytes:
        """Everything stored, as `store.op_codec.encode_snapshot` bytes (what the store
        process answers to LOAD), made from the stored records without building objects of
        the messages: a restart with a deep offline queue spent seconds on that."""
        connection = self._open_connection()
        try:
            retained = [message_from_record(row) for row in connection.execute(_SELECT_RETAINED)]
            sessions = {
                row[0]: meta_from_record(row[1:]) for row in connection.execute(_SELECT_SESSIONS)
            }
            messages: dict[str, list[StoredRecord]] = {client_id: [] for client_id in sessions}
            table_rows = (_message_of_row(row) for row in connection.execute(_SELECT_MESSAGES))
            orphans = 0
            for client_id, seq, record, payload in chain(table_rows, self._log.messages()):
                queue = messages.get(client_id)
                if queue is None:
                    orphans += 1
                else:
                    queue.append((seq, record, payload))
        except _UNSTORABLE as error:
            raise StoreError(
                f"{self!r}: cannot read the stored state ({type(error).__name__}: {error}); "
                "restore the file from a backup or move it away to start empty"
            ) from error
        if orphans:
            logger.warning("%r: skipped %d messages of unknown sessions", self, orphans)
        return encode_snapshot(retained, sessions, messages)

    def load_session_encoded(self, client_id: str) -> bytes:
        """One client id's stored session (none: an empty snapshot), as `load_encoded` bytes
        without retained messages: what a pool worker that takes the session over resumes
        (docs/pool.md)."""
        connection = self._open_connection()
        try:
            sessions = {
                row[0]: meta_from_record(row[1:])
                for row in connection.execute(_SELECT_SESSION, (client_id,))
            }
            queue: list[StoredRecord] = []
            if sessions:
                rows = connection.execute(_SELECT_SESSION_MESSAGES, (client_id,))
                for owner, seq, record, payload in chain(
                    (_message_of_row(row) for row in rows), self._log.messages()
                ):
                    if owner == client_id:
                        queue.append((seq, record, payload))
        except _UNSTORABLE as error:
            raise StoreError(
                f"{self!r}: cannot read the session of {client_id!r} ({type(error).__name__}: "
                f"{error}); restore the file from a backup or move it away to start empty"
            ) from error
        return encode_snapshot([], sessions, {client_id: queue})

    def _replay_log(self, connection: sqlite3.Connection) -> MessageLog:
        try:
            return MessageLog.replay(
                connection.execute(_SELECT_LOG), connection.execute(_SELECT_MESSAGE_KEYS)
            )
        except (*_UNSTORABLE, struct.error) as error:
            raise StoreError(
                f"{self!r}: cannot read the message log ({type(error).__name__}: {error}); "
                "restore the file from a backup or move it away to start empty"
            ) from error

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _open_connection(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StoreError(f"{self!r} is closed")
        return self._connection
