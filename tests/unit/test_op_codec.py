"""The op codec: every op and every snapshot comes back from its bytes as it was sent."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.base import Op, SessionMeta, Snapshot, StoredSession
from store.op_codec import decode_ops, decode_snapshot, encode_ops, encode_snapshot
from store.records import put_record
from tests.unit.test_sqlite_store import META, QUEUED, V5_MESSAGE, ops
from tests.unit.test_store_records import deliveries, messages, metas


def _encoded(snapshot: Snapshot) -> bytes:
    """`snapshot` as the store encodes it: from put records, messages in any order."""
    messages = {
        client_id: [
            (seq, put_record(client_id, seq, entry), entry.message.payload)
            for seq, entry in reversed(session.messages)
        ]
        for client_id, session in snapshot.sessions.items()
    }
    metas = {client_id: session.meta for client_id, session in snapshot.sessions.items()}
    return encode_snapshot(snapshot.retained, metas, messages)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=12))
def test_op_batches_round_trip(batch: list[Op]) -> None:
    assert decode_ops(encode_ops(batch)) == batch


@settings(max_examples=100, deadline=None)
@given(
    st.lists(messages, max_size=4),
    st.dictionaries(
        st.sampled_from(["c1", "c2", "c3"]),
        st.tuples(metas, st.lists(deliveries(), max_size=4)),
        max_size=3,
    ),
)
def test_snapshots_round_trip(
    retained: list, sessions: dict[str, tuple[SessionMeta, list]]
) -> None:
    snapshot = Snapshot(
        retained=retained,
        sessions={
            client_id: StoredSession(meta, list(enumerate(entries, start=1)))
            for client_id, (meta, entries) in sessions.items()
        },
    )
    assert decode_snapshot(_encoded(snapshot)) == snapshot


def test_an_infinite_session_expiry_survives_json() -> None:
    snapshot = Snapshot(retained=[V5_MESSAGE], sessions={"c": StoredSession(META, [(7, QUEUED)])})
    decoded = decode_snapshot(_encoded(snapshot))
    assert decoded.sessions["c"].meta.expiry_interval == META.expiry_interval == float("inf")
    assert decoded.sessions["c"].messages == [(7, QUEUED)]


def _framed(header: bytes, payloads: bytes = b"") -> bytes:
    return struct.pack("<I", len(header)) + header + payloads


@pytest.mark.parametrize(
    "data",
    [
        b"",  # no header
        _framed(b"[1,2]"),  # records that are not lists
        _framed(b'[["what"]]'),  # an unknown kind
        _framed(b'[["put","c"]]'),  # a put record cut short
        _framed(b'[["delete","c",1]]', b"extra"),  # bytes after the last payload
        _framed(b'[["retain","t",10]]', b"short"),  # a payload cut short
    ],
)
def test_bytes_that_are_not_an_op_batch_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match=r"not an op|after its last payload|inside a payload"):
        decode_ops(data)
