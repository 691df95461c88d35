"""Both stores: op semantics, round trips, reopen, schema checks and migrations of SqliteStore."""

from __future__ import annotations

import math
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.message import Message
from store import (
    SQLITE_FILE_NAME,
    DeleteMessage,
    DeleteRetained,
    DeleteSession,
    MarkInFlight,
    MemoryStore,
    Op,
    ProcessStore,
    PutMessage,
    PutRetained,
    PutSession,
    SessionMeta,
    SqliteStore,
    Store,
    StoredDelivery,
    StoredSession,
    StoredSubscription,
    StoreError,
    open_store,
    sqlite_store,
)
from store.migrations import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, migrate
from tests.unit.test_store_records import deliveries, messages, metas

V5_MESSAGE = Message(
    topic="sensors/1/temp",
    payload=b"\x00\xff\x80binary",
    qos=2,
    retain=True,
    publisher="pub-1",
    username="alice",
    timestamp=1_700_000_000.25,
    properties={
        1: 0,
        2: 3600,
        3: "application/octet-stream",
        8: "replies/1",
        9: b"\x00\xfe correlation",  # Correlation Data: binary
        38: [("unit", "C"), ("unit", "K")],  # User Property: repeated names, order kept
    },
    message_id=42,
)
META = SessionMeta(
    protocol_version=5,
    expiry_interval=math.inf,
    disconnected_at=1_700_000_100.5,
    next_packet_id=65535,
    subscriptions={
        "sensors/+/temp": StoredSubscription(2, True, True, 2, 17),
        "$share/g/a": StoredSubscription(0),
    },
    awaiting_rel=frozenset({1, 65535}),
)
QUEUED = StoredDelivery(message=V5_MESSAGE, qos=1, retain=False, subscription_ids=(17, 3))
IN_FLIGHT = StoredDelivery(
    message=V5_MESSAGE, qos=2, retain=True, packet_id=9, stage="await_pubcomp"
)


class Stores:
    """Opens a store of one kind; `reopen` gives what a restarted broker would see."""

    def __init__(self, kind: str, data_dir: Path) -> None:
        self.kind = kind
        self.data_dir = data_dir
        self.store = open_store(kind, data_dir)

    def reopen(self) -> Store:
        if self.kind == "memory":
            return self.store  # nothing to reopen: the same state must still be there
        self.store.close()
        self.store = open_store(self.kind, self.data_dir)
        return self.store


@pytest.fixture(params=["memory", "sqlite"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    opened = Stores(request.param, tmp_path / "data")
    yield opened
    opened.store.close()


def test_every_record_type_round_trips(stores: Stores) -> None:
    stores.store.apply(
        [
            PutRetained(V5_MESSAGE),
            PutSession("c1", META),
            PutMessage("c1", 2, IN_FLIGHT),
            PutMessage("c1", 1, QUEUED),
        ]
    )
    snapshot = stores.reopen().load()
    assert snapshot.retained == [V5_MESSAGE]
    assert snapshot.sessions == {"c1": StoredSession(META, [(1, QUEUED), (2, IN_FLIGHT)])}
    assert snapshot.sessions["c1"].meta.expiry_interval == math.inf


def test_put_message_replaces_the_same_seq(stores: Stores) -> None:
    """A queued message goes in flight: the broker puts it again with packet id and stage."""
    stores.store.apply([PutSession("c", META), PutMessage("c", 7, QUEUED)])
    stores.store.apply([PutMessage("c", 7, IN_FLIGHT)])
    assert stores.reopen().load().sessions["c"].messages == [(7, IN_FLIGHT)]


def test_mark_in_flight_sets_packet_id_and_stage_and_keeps_the_message(stores: Stores) -> None:
    """What the broker writes when a stored delivery is sent or its QoS 2 stage moves on."""
    stores.store.apply([PutSession("c", META), PutMessage("c", 7, QUEUED)])
    stores.store.apply([MarkInFlight("c", "await_pubrec", [(7, 300)])])
    stores.store.apply([MarkInFlight("c", "await_pubcomp", [(7, 300), (8, 1)])])
    [(seq, entry)] = stores.reopen().load().sessions["c"].messages
    assert (seq, entry.packet_id, entry.stage) == (7, 300, "await_pubcomp")
    assert (entry.message, entry.qos, entry.subscription_ids) == (V5_MESSAGE, 1, (17, 3))


def test_delete_session_deletes_its_messages_and_put_session_keeps_them(stores: Stores) -> None:
    stores.store.apply(
        [
            PutSession("gone", META),
            PutMessage("gone", 1, QUEUED),
            PutSession("kept", META),
            PutMessage("kept", 1, QUEUED),
        ]
    )
    new_meta = SessionMeta(protocol_version=4, expiry_interval=0.0)
    stores.store.apply([DeleteSession("gone"), PutSession("kept", new_meta)])
    stores.store.apply([PutSession("gone", META)])  # same client id, new session: no old queue
    sessions = stores.reopen().load().sessions
    assert sessions["kept"] == StoredSession(new_meta, [(1, QUEUED)])
    assert sessions["gone"] == StoredSession(META, [])


def test_deletes_of_unknown_keys_are_no_ops(stores: Stores) -> None:
    stores.store.apply([PutRetained(V5_MESSAGE)])
    stores.store.apply([DeleteRetained("nope"), DeleteMessage("x", [1]), DeleteSession("x")])
    snapshot = stores.reopen().load()
    assert snapshot.retained == [V5_MESSAGE]
    assert snapshot.sessions == {}


def test_ops_apply_in_order_within_a_batch(stores: Stores) -> None:
    retained = Message(topic="r", payload=b"1", retain=True)
    stores.store.apply(
        [
            PutRetained(retained),
            DeleteRetained("r"),
            PutSession("c", META),
            PutMessage("c", 1, QUEUED),
            DeleteMessage("c", [1]),
            PutMessage("c", 1, IN_FLIGHT),
        ]
    )
    snapshot = stores.reopen().load()
    assert snapshot.retained == []
    assert snapshot.sessions["c"].messages == [(1, IN_FLIGHT)]


def test_messages_of_a_session_without_metadata_are_not_loaded(stores: Stores) -> None:
    stores.store.apply([PutMessage("orphan", 1, QUEUED)])
    assert stores.reopen().load().sessions == {}


def test_a_failing_batch_changes_nothing(stores: Stores) -> None:
    stores.store.apply([PutRetained(V5_MESSAGE)])
    unstorable = Message(topic="bad", payload=b"", properties={38: {"not": "a list"}})
    # MemoryStore keeps objects as given, so only a non-op makes its batch fail.
    bad_op, error = {
        "sqlite": (PutRetained(unstorable), "could not apply a batch of 2 operations"),
        "memory": ("not an op", "not a store operation"),
    }[stores.kind]
    with pytest.raises(StoreError, match=error):
        stores.store.apply([DeleteRetained(V5_MESSAGE.topic), bad_op])  # type: ignore[list-item]
    assert stores.reopen().load().retained == [V5_MESSAGE]


def test_a_closed_store_refuses_calls(stores: Stores) -> None:
    stores.store.close()
    with pytest.raises(StoreError, match="closed"):
        stores.store.apply([DeleteRetained("t")])
    with pytest.raises(StoreError, match="closed"):
        stores.store.load()


clients = st.sampled_from(["c1", "c2"])
seqs = st.integers(0, 4)
ops = st.one_of(
    st.builds(PutRetained, messages),
    st.builds(DeleteRetained, st.sampled_from(["a", "b"])),
    st.builds(PutSession, clients, metas),
    st.builds(DeleteSession, clients),
    st.builds(PutMessage, clients, seqs, deliveries()),
    st.builds(
        MarkInFlight,
        clients,
        st.sampled_from(["await_puback", "await_pubrec", "await_pubcomp"]),
        st.lists(st.tuples(seqs, st.integers(1, 65535)), max_size=3),
    ),
    st.builds(DeleteMessage, clients, st.lists(seqs, max_size=3)),
)
# After a batch: nothing, maintain() with compaction forced, or a restart of the store.
between_batches = st.sampled_from(["nothing", "compact", "reopen"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(ops, max_size=6), between_batches), max_size=6))
def test_sqlite_store_after_reopen_loads_what_the_memory_store_holds(
    batches: list[tuple[list[Op], str]],
) -> None:
    oracle = MemoryStore()
    with tempfile.TemporaryDirectory() as data_dir:
        path = Path(data_dir) / "s.sqlite3"
        store = SqliteStore(path)
        for batch, then in batches:
            oracle.apply(batch)
            store.apply(batch)
            if then == "compact":
                with (
                    mock.patch.object(sqlite_store, "COMPACT_BYTES", -1),
                    mock.patch.object(sqlite_store, "COMPACT_MIN_AGE", 0.0),
                ):
                    store.maintain()
            elif then == "reopen":
                store.close()
                store = SqliteStore(path)
        store.close()
        reopened = SqliteStore(path)
        snapshot = reopened.load()
        reopened.close()
    expected = oracle.load()
    assert snapshot.sessions == expected.sessions
    assert sorted(snapshot.retained, key=lambda m: m.topic) == sorted(
        expected.retained, key=lambda m: m.topic
    )


# ----- the message log inside the SQLite file ---------------------------------------------


def _rows(path: Path, table: str) -> int:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        count: int = connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        connection.close()
    return count


def test_the_message_ops_of_one_commit_are_one_log_row(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path)
    store.apply([PutSession("c", META), *(PutMessage("c", seq, QUEUED) for seq in range(50))])
    store.apply([MarkInFlight("c", "await_puback", [(seq, seq + 1) for seq in range(50)])])
    store.apply([DeleteMessage("c", list(range(49)))])
    store.close()
    # Three commits, three log rows (the acknowledged messages do not free the first two
    # while seq 49 lives); session_messages is only written by compaction.
    assert (_rows(path, "message_log"), _rows(path, "session_messages")) == (3, 0)
    store = SqliteStore(path)
    [(seq, entry)] = store.load().sessions["c"].messages
    assert (seq, entry.packet_id, entry.stage) == (49, 50, "await_puback")
    store.apply([DeleteMessage("c", [49])])
    store.close()
    assert _rows(path, "message_log") == 0  # every batch held only dead messages: dropped


def test_maintain_compacts_dead_batches_pinned_by_an_offline_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path)
    store.apply([PutSession("offline", META), PutMessage("offline", 1, QUEUED)])
    store.apply([PutMessage("offline", 2, IN_FLIGHT)])
    for seq in range(10, 20):  # a client online meanwhile: its messages come and go
        store.apply([PutMessage("online", seq, QUEUED)])
        store.apply([DeleteMessage("online", [seq])])
    monkeypatch.setattr(sqlite_store, "COMPACT_BYTES", 1000)
    assert not store.needs_maintenance()  # the offline queue is still young
    monkeypatch.setattr(sqlite_store, "COMPACT_MIN_AGE", 0.0)
    assert store.needs_maintenance()  # 20 dead batches stay behind the offline queue
    store.maintain()
    assert not store.needs_maintenance()
    # Both offline messages are table rows now; changes to them go to the table.
    store.apply([MarkInFlight("offline", "await_puback", [(1, 77)]), DeleteMessage("offline", [2])])
    store.close()
    assert (_rows(path, "message_log"), _rows(path, "session_messages")) == (0, 1)
    store = SqliteStore(path)
    [(seq, entry)] = store.load().sessions["offline"].messages
    store.close()
    assert (seq, entry.packet_id, entry.stage, entry.message) == (
        1,
        77,
        "await_puback",
        V5_MESSAGE,
    )


def test_a_failed_commit_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path)
    store.apply([PutSession("c", META), PutMessage("c", 1, QUEUED)])
    unstorable = Message(topic="bad", payload=b"", properties={38: {"not": "a list"}})
    with pytest.raises(StoreError, match="nothing of it was written"):
        store.apply([PutMessage("c", 2, QUEUED), DeleteMessage("c", [1]), PutRetained(unstorable)])
    store.apply([MarkInFlight("c", "await_puback", [(1, 5)])])  # 1 is still there, 2 never was
    messages = store.load().sessions["c"].messages
    store.close()
    assert [(seq, entry.packet_id) for seq, entry in messages] == [(1, 5)]


def test_a_corrupt_message_log_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = _sqlite_path(tmp_path)
    store = SqliteStore(path)
    store.apply([PutSession("c", META), PutMessage("c", 1, QUEUED)])
    store.close()
    connection = sqlite3.connect(path)
    connection.execute("UPDATE message_log SET records = x'00ff00ff7b'")
    connection.commit()
    connection.close()
    _refused_and_untouched(path, "cannot read the message log")


# ----- opening, schema checks, migrations ------------------------------------------------


def _sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / SQLITE_FILE_NAME


def test_open_store_kinds(tmp_path: Path) -> None:
    assert isinstance(open_store("memory", tmp_path), MemoryStore)
    store = open_store("sqlite", tmp_path / "new" / "dir")
    assert isinstance(store, ProcessStore)
    assert store.path == tmp_path / "new" / "dir" / SQLITE_FILE_NAME
    store.close()
    assert (tmp_path / "new" / "dir" / SQLITE_FILE_NAME).is_file()
    with pytest.raises(StoreError, match="unknown store kind 'redis'"):
        open_store("redis", tmp_path)
    with pytest.raises(StoreError, match="synchronous"):
        SqliteStore(tmp_path / "x.sqlite3", synchronous="off")


def test_a_new_store_has_the_current_schema_version_and_wal(tmp_path: Path) -> None:
    SqliteStore(_sqlite_path(tmp_path)).close()
    connection = sqlite3.connect(_sqlite_path(tmp_path))
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert connection.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    connection.close()


def _refused_and_untouched(path: Path, match: str) -> None:
    before = path.read_bytes()
    with pytest.raises(StoreError, match=match) as raised:
        SqliteStore(path)
    assert str(path) in str(raised.value)
    assert path.read_bytes() == before


def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = _sqlite_path(tmp_path)
    path.write_bytes(b"retained messages, but not a database\n" * 200)
    _refused_and_untouched(path, "not an SQLite database")


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = _sqlite_path(tmp_path)
    store = SqliteStore(path)
    store.apply([PutRetained(V5_MESSAGE)])
    store.close()
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    _refused_and_untouched(path, f"schema version {SCHEMA_VERSION + 1}, newer")


def test_another_programs_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = _sqlite_path(tmp_path)
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE accounts (name TEXT)")
    connection.commit()
    connection.close()
    _refused_and_untouched(path, "another program")


def _side_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.glob(path.name + "-*"))


def test_an_empty_file_is_refused_before_sqlite_touches_it(tmp_path: Path) -> None:
    # SQLite takes a 0-byte file for a new database: a truncated store would start empty.
    path = _sqlite_path(tmp_path)
    path.write_bytes(b"")
    _refused_and_untouched(path, r"is empty \(0 bytes\), so it holds no store")
    with pytest.raises(StoreError, match="move or delete it") as raised:
        open_store("sqlite", tmp_path)  # through the store process, as the broker opens it
    assert str(path) in str(raised.value)
    assert "--data-dir" in str(raised.value)
    assert path.stat().st_size == 0
    assert _side_files(path) == []  # no -wal, -shm or -journal: SQLite never opened it


def test_an_empty_file_next_to_a_wal_is_refused_and_the_wal_kept(tmp_path: Path) -> None:
    # The WAL of an open store (checkpoints are off) holds its data; SQLite would delete it
    # when it took the empty main file for a new database.
    live = SqliteStore(tmp_path / "live.sqlite3")
    live.apply([PutRetained(V5_MESSAGE)])
    wal = (tmp_path / "live.sqlite3-wal").read_bytes()
    live.close()
    path = _sqlite_path(tmp_path)
    path.write_bytes(b"")
    wal_path = path.with_name(path.name + "-wal")
    wal_path.write_bytes(wal)
    with pytest.raises(StoreError, match="is empty") as raised:
        SqliteStore(path)
    assert f"{wal_path} ({len(wal)} bytes)" in str(raised.value)
    assert "move them away together" in str(raised.value)
    assert path.stat().st_size == 0
    assert wal_path.read_bytes() == wal
    assert _side_files(path) == [wal_path.name]


def test_a_store_in_use_by_another_broker_is_refused(tmp_path: Path) -> None:
    first = SqliteStore(_sqlite_path(tmp_path))
    with pytest.raises(StoreError, match="locked"):
        SqliteStore(_sqlite_path(tmp_path))
    first.close()
    SqliteStore(_sqlite_path(tmp_path)).close()


# The version 1 schema exactly as released: never edit it, it stands for files on disk.
V1_SCHEMA = """
CREATE TABLE retained (topic TEXT PRIMARY KEY, payload BLOB NOT NULL, msg_qos INTEGER NOT NULL,
    msg_retain INTEGER NOT NULL, publisher TEXT, username TEXT, timestamp REAL NOT NULL,
    properties TEXT, message_id INTEGER NOT NULL);
CREATE TABLE sessions (client_id TEXT PRIMARY KEY, protocol_version INTEGER NOT NULL,
    expiry_interval REAL NOT NULL, disconnected_at REAL, next_packet_id INTEGER NOT NULL,
    subscriptions TEXT NOT NULL, awaiting_rel TEXT NOT NULL);
CREATE TABLE session_messages (client_id TEXT NOT NULL, seq INTEGER NOT NULL,
    topic TEXT NOT NULL, payload BLOB NOT NULL, msg_qos INTEGER NOT NULL,
    msg_retain INTEGER NOT NULL, publisher TEXT, username TEXT, timestamp REAL NOT NULL,
    properties TEXT, message_id INTEGER NOT NULL, qos INTEGER NOT NULL, retain INTEGER NOT NULL,
    subscription_ids TEXT, packet_id INTEGER, stage TEXT, PRIMARY KEY (client_id, seq));
INSERT INTO retained VALUES ('r/1', X'00FF', 1, 1, 'p', NULL, 1700000000.5,
    '[[9,{"b":"AP8="}],[38,[{"t":["k","v"]}]]]', 5);
INSERT INTO sessions VALUES ('c1', 4, 7200.0, 1700000001.0, 12,
    '{"a/+":{"qos":1,"no_local":false,"retain_as_published":false,"retain_handling":0,
      "subscription_id":null}}', '[3]');
INSERT INTO session_messages VALUES ('c1', 1, 'a/b', X'6869', 1, 0, 'p', 'u', 1700000000.0,
    NULL, 6, 1, 0, NULL, 11, 'await_puback');
INSERT INTO session_messages VALUES ('c1', 2, 'a/c', X'', 2, 0, NULL, NULL, 1700000000.0,
    NULL, 7, 1, 0, '[4]', NULL, NULL);
PRAGMA application_id = 1297175636;  -- 0x4D515454, "MQTT"
PRAGMA user_version = 1;
"""


def test_a_version_1_store_opens_with_the_current_code(tmp_path: Path) -> None:
    path = _sqlite_path(tmp_path)
    connection = sqlite3.connect(path)
    connection.executescript(V1_SCHEMA)
    connection.close()
    store = SqliteStore(path)
    snapshot = store.load()
    store.close()
    assert snapshot.retained == [
        Message(
            topic="r/1",
            payload=b"\x00\xff",
            qos=1,
            retain=True,
            publisher="p",
            timestamp=1_700_000_000.5,
            properties={9: b"\x00\xff", 38: [("k", "v")]},
            message_id=5,
        )
    ]
    session = snapshot.sessions["c1"]
    assert session.meta == SessionMeta(
        protocol_version=4,
        expiry_interval=7200.0,
        disconnected_at=1_700_000_001.0,
        next_packet_id=12,
        subscriptions={"a/+": StoredSubscription(1)},
        awaiting_rel=frozenset({3}),
    )
    assert [
        (seq, entry.message.topic, entry.packet_id, entry.stage) for seq, entry in session.messages
    ] == [(1, "a/b", 11, "await_puback"), (2, "a/c", None, None)]
    assert session.messages[1][1].subscription_ids == (4,)


# A version 2 message log batch exactly as the released code wrote it (store/message_log.py
# before the stored fields were declared in store.records): never edit it. Two put records
# (an MQTT 5 message with properties and subscription ids, a 3.1.1 one) and a mark.
V2_LOG_BATCH = (
    b"\x03\x01\x00\x00"
    b'[["put","c1",1,2,"a/b",2,true,"p","u",1700000000.25,'
    b'"[[9,{\\"b\\":\\"AP8=\\"}],[38,[{\\"t\\":[\\"k\\",\\"v\\"]}]],[11,[3]]]",41,1,true,[3,4],null,null],'
    b'["put","c1",2,0,"a/c",1,false,null,null,1700000001.0,null,42,1,false,[],null,null],'
    b'["mark","c1",1,17,"await_puback"]]hi'
)


def test_a_version_2_message_log_loads_with_the_current_code(tmp_path: Path) -> None:
    path = _sqlite_path(tmp_path)
    SqliteStore(path).close()  # an empty store at the current schema
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("INSERT INTO sessions VALUES ('c1', 5, 60.0, NULL, 18, '{}', '[]')")
    connection.execute("INSERT INTO message_log VALUES (1, ?)", (V2_LOG_BATCH,))
    connection.close()
    store = SqliteStore(path)
    messages = store.load().sessions["c1"].messages
    store.close()
    assert messages == [
        (
            1,
            StoredDelivery(
                Message(
                    topic="a/b",
                    payload=b"hi",
                    qos=2,
                    retain=True,
                    publisher="p",
                    username="u",
                    timestamp=1_700_000_000.25,
                    properties={9: b"\x00\xff", 38: [("k", "v")], 11: [3]},
                    message_id=41,
                ),
                qos=1,
                retain=True,
                subscription_ids=(3, 4),
                packet_id=17,
                stage="await_puback",
            ),
        ),
        (
            2,
            StoredDelivery(
                Message(topic="a/c", payload=b"", qos=1, timestamp=1_700_000_001.0, message_id=42),
                qos=1,
                retain=False,
            ),
        ),
    ]


def _add_expires_at(connection: sqlite3.Connection) -> None:
    connection.execute("ALTER TABLE retained ADD COLUMN expires_at REAL")


def _broken_step(connection: sqlite3.Connection) -> None:
    connection.execute("ALTER TABLE retained ADD COLUMN half_done REAL")
    connection.execute("ALTER TABLE no_such_table ADD COLUMN x REAL")


def _open_migrated_v1(path: Path) -> sqlite3.Connection:
    SqliteStore(path).close()
    return sqlite3.connect(path, isolation_level=None)


def test_migrate_applies_later_steps_and_keeps_data(tmp_path: Path) -> None:
    path = _sqlite_path(tmp_path)
    store = SqliteStore(path)
    store.apply([PutRetained(V5_MESSAGE)])
    store.close()
    connection = sqlite3.connect(path, isolation_level=None)
    migrate(connection, path, SCHEMA_VERSION, [*MIGRATIONS, _add_expires_at])
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    columns = [row[1] for row in connection.execute("PRAGMA table_info(retained)")]
    assert columns[-1] == "expires_at"
    assert connection.execute("SELECT topic FROM retained").fetchall() == [(V5_MESSAGE.topic,)]
    connection.close()


def test_a_failing_migration_step_is_rolled_back_whole(tmp_path: Path) -> None:
    path = _sqlite_path(tmp_path)
    connection = _open_migrated_v1(path)
    with pytest.raises(StoreError, match=f"from schema version {SCHEMA_VERSION} to"):
        migrate(connection, path, SCHEMA_VERSION, [*MIGRATIONS, _broken_step])
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    columns = [row[1] for row in connection.execute("PRAGMA table_info(retained)")]
    assert "half_done" not in columns
    connection.close()


def test_open_fails_cleanly_on_a_directory(tmp_path: Path) -> None:
    _sqlite_path(tmp_path).mkdir()
    with pytest.raises(StoreError, match="not a regular file"):
        SqliteStore(_sqlite_path(tmp_path))
