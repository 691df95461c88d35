"""The SQLite schema as a list of forward migrations, and the checks made before any write.

The schema version lives in `PRAGMA user_version` (0 = empty file); `PRAGMA application_id`
marks the file as this broker's store, so another program's SQLite file is never taken over.
Migration N (1-based) turns a version N-1 database into version N in one transaction. To
change the schema, append a step; never edit a released one (tests/unit/test_sqlite_store.py
keeps a version 1 database to prove old stores still open).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from store.base import StoreError

APPLICATION_ID = 0x4D515454  # "MQTT"

Migration = Callable[[sqlite3.Connection], None]


def _create_v1(connection: sqlite3.Connection) -> None:
    connection.execute(
        """CREATE TABLE retained (
            topic TEXT PRIMARY KEY,
            payload BLOB NOT NULL,
            msg_qos INTEGER NOT NULL,
            msg_retain INTEGER NOT NULL,
            publisher TEXT,
            username TEXT,
            timestamp REAL NOT NULL,
            properties TEXT,
            message_id INTEGER NOT NULL
        )"""
    )
    connection.execute(
        """CREATE TABLE sessions (
            client_id TEXT PRIMARY KEY,
            protocol_version INTEGER NOT NULL,
            expiry_interval REAL NOT NULL,
            disconnected_at REAL,
            next_packet_id INTEGER NOT NULL,
            subscriptions TEXT NOT NULL,
            awaiting_rel TEXT NOT NULL
        )"""
    )
    connection.execute(
        """CREATE TABLE session_messages (
            client_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            topic TEXT NOT NULL,
            payload BLOB NOT NULL,
            msg_qos INTEGER NOT NULL,
            msg_retain INTEGER NOT NULL,
            publisher TEXT,
            username TEXT,
            timestamp REAL NOT NULL,
            properties TEXT,
            message_id INTEGER NOT NULL,
            qos INTEGER NOT NULL,
            retain INTEGER NOT NULL,
            subscription_ids TEXT,
            packet_id INTEGER,
            stage TEXT,
            PRIMARY KEY (client_id, seq)
        )"""
    )
    connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def _add_message_log_v2(connection: sqlite3.Connection) -> None:
    # One row per commit holding that commit's message ops (store/message_log.py).
    connection.execute(
        """CREATE TABLE message_log (
            batch INTEGER PRIMARY KEY,
            records BLOB NOT NULL
        )"""
    )


MIGRATIONS: tuple[Migration, ...] = (_create_v1, _add_message_log_v2)
SCHEMA_VERSION = len(MIGRATIONS)


def check_schema(connection: sqlite3.Connection, path: Path, known_version: int) -> int:
    """Read (only) the file's header and return its schema version, or raise StoreError."""
    try:
        version: int = connection.execute("PRAGMA user_version").fetchone()[0]
        application_id = connection.execute("PRAGMA application_id").fetchone()[0]
        tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.OperationalError as error:
        raise StoreError(
            f"cannot read the store {path}: {error}; if another broker uses this data "
            "directory, stop it or give this broker another data directory"
        ) from error
    except sqlite3.DatabaseError as error:
        raise StoreError(
            f"{path} is not an SQLite database ({error}); it was left untouched: move it away "
            "or point the broker at another data directory"
        ) from error
    if version == 0 and tables == 0:
        return 0
    if application_id != APPLICATION_ID:
        raise StoreError(
            f"{path} is an SQLite database of another program (application_id "
            f"{application_id:#x}, expected {APPLICATION_ID:#x}); it was left untouched: "
            "move it away or point the broker at another data directory"
        )
    if version > known_version:
        raise StoreError(
            f"{path} has schema version {version}, newer than this broker knows "
            f"({known_version}); it was left untouched: run a broker release that knows "
            "this version, or move the file away to start with an empty store"
        )
    return version


def migrate(
    connection: sqlite3.Connection,
    path: Path,
    from_version: int,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> None:
    """Apply migrations from_version+1 .. len(migrations), each in its own transaction."""
    for target in range(from_version + 1, len(migrations) + 1):
        connection.execute("BEGIN IMMEDIATE")
        try:
            migrations[target - 1](connection)
            connection.execute(f"PRAGMA user_version = {target}")
            connection.execute("COMMIT")
        except sqlite3.Error as error:
            connection.execute("ROLLBACK")
            raise StoreError(
                f"migrating {path} from schema version {target - 1} to {target} failed: "
                f"{error}; the file is still at version {target - 1}"
            ) from error
