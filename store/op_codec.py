"""Op batches and snapshots as bytes: what the broker and its store process send each other.

`store.process_store` runs the SQLite store in a process of its own, so the broker's loop
only has to turn a batch of ops into bytes. Pickling the op dataclasses cost about 10 µs per
stored message; this format costs about 1 µs. It is the message log's batch format
(`store.message_log`): a JSON list of records followed by the payloads of the records that
carry one, with the log's put record for PutMessage and these for the others:

    ["marks", client_id, stage, [seq, packet_id, seq, packet_id, ...]]  # MarkInFlight
    ["deletes", client_id, [seq, ...]]           # DeleteMessage
    ["retain", topic, payload_length, msg_qos, msg_retain, publisher, username, timestamp,
     properties, message_id]     # PutRetained: the columns of retained (store.records)
    ["unretain", topic]                          # DeleteRetained
    ["session", client_id, protocol_version, expiry_interval (null: never), disconnected_at,
     next_packet_id, subscriptions, awaiting_rel]  # PutSession, the columns of sessions
    ["delete_session", client_id]                # DeleteSession

A MarkInFlight or DeleteMessage holds a run of messages (a session's sends or
acknowledgements of one drain): two numbers per message cost far less to encode and decode
than a record each.

A snapshot travels as the ops that would store it: PutRetained for each retained message,
then PutSession and the PutMessage ops of each session in seq order.

Pure: no I/O.
"""

from __future__ import annotations

import gc
import math
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain
from operator import itemgetter
from typing import Any

from core.message import Message
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
    StoredSession,
)
from store.message_log import DELETE_SESSION, PAYLOAD_LENGTH_AT, decode_batch, encode_batch
from store.records import (
    PUT,
    delivery_from_put,
    message_from_record,
    message_to_record,
    meta_from_record,
    meta_to_record,
    put_record,
)

RETAIN, UNRETAIN, SESSION, MARKS, DELETES = "retain", "unretain", "session", "marks", "deletes"
_RETAIN_PAYLOAD_LENGTH = 2  # index of payload_length in a retain record

_Encoded = tuple[list[Any], Any]  # a record and its payload (None when it has none)
StoredRecord = tuple[int, list[Any], bytes]  # a stored message: seq, put record, payload


def _retain_record(message: Message) -> list[Any]:
    topic, payload, *rest = message_to_record(message)
    return [RETAIN, topic, len(payload), *rest]


def _message_from_retain(record: list[Any], payload: bytes) -> Message:
    return message_from_record([record[1], payload, *record[3:]])


def _session_record(op: PutSession) -> list[Any]:
    protocol_version, expiry, *rest = meta_to_record(op.meta)
    return [SESSION, op.client_id, protocol_version, None if math.isinf(expiry) else expiry, *rest]


_ENCODERS: dict[type, Callable[[Any], _Encoded]] = {
    PutMessage: lambda op: (put_record(op.client_id, op.seq, op.entry), op.entry.message.payload),
    MarkInFlight: lambda op: (
        [MARKS, op.client_id, op.stage, list(chain.from_iterable(op.marks))],
        None,
    ),
    DeleteMessage: lambda op: ([DELETES, op.client_id, op.seqs], None),
    PutRetained: lambda op: (_retain_record(op.message), op.message.payload),
    DeleteRetained: lambda op: ([UNRETAIN, op.topic], None),
    PutSession: lambda op: (_session_record(op), None),
    DeleteSession: lambda op: ([DELETE_SESSION, op.client_id], None),
}

_DECODERS: dict[str, Callable[[list[Any], Any], Op]] = {
    PUT: lambda r, payload: PutMessage(r[1], r[2], delivery_from_put(r, payload)),
    MARKS: lambda r, _payload: MarkInFlight(r[1], r[2], list(pairs(r[3]))),
    DELETES: lambda r, _payload: DeleteMessage(r[1], r[2]),
    RETAIN: lambda r, payload: PutRetained(_message_from_retain(r, payload)),
    UNRETAIN: lambda r, _payload: DeleteRetained(r[1]),
    SESSION: lambda r, _payload: PutSession(
        r[1], meta_from_record([r[2], math.inf if r[3] is None else r[3], *r[4:]])
    ),
    DELETE_SESSION: lambda r, _payload: DeleteSession(r[1]),
}


def pairs(flat: list[int]) -> Iterator[tuple[int, int]]:
    """(seq, packet_id) pairs of a marks record's flat list."""
    numbers = iter(flat)
    return zip(numbers, numbers, strict=True)


_PAYLOAD_LENGTH_AT = {**PAYLOAD_LENGTH_AT, RETAIN: _RETAIN_PAYLOAD_LENGTH}


def op_records(ops: Sequence[Op]) -> list[_Encoded]:
    """Each op as its record and payload (None for records without one)."""
    encoders = _ENCODERS
    return [encoders[type(op)](op) for op in ops]


def encode_ops(ops: Sequence[Op]) -> bytes:
    records: list[list[Any]] = []
    payloads: list[Any] = []
    for record, payload in op_records(ops):
        records.append(record)
        if payload is not None:
            payloads.append(payload)
    return encode_batch(records, payloads)


def decode_records(data: bytes | bytearray) -> list[tuple[list[Any], bytes | None]]:
    """The records and payloads of an `encode_ops` batch; ValueError if `data` is not one.
    Only the framing is checked: `op_from_record` checks each record."""
    try:
        return decode_batch(data, _PAYLOAD_LENGTH_AT)
    except (IndexError, KeyError, TypeError, struct.error) as error:
        raise ValueError(f"not an op batch: {type(error).__name__}: {error}") from error


def op_from_record(record: list[Any], payload: bytes | None) -> Op:
    try:
        return _DECODERS[record[0]](record, payload)
    except (IndexError, KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"not an op record: {record!r:.200} ({type(error).__name__}: {error})"
        ) from error


def decode_ops(data: bytes | bytearray) -> list[Op]:
    """The ops `encode_ops` was given; ValueError if `data` is not such a batch."""
    return [op_from_record(record, payload) for record, payload in decode_records(data)]


def encode_snapshot(
    retained: Iterable[Message],
    sessions: Mapping[str, SessionMeta],
    messages: Mapping[str, list[StoredRecord]],
) -> bytes:
    """A snapshot as bytes, built from stored records: `messages` maps a client id to its
    messages as (seq, put record, payload), in any order (they go out in seq order)."""
    records = op_records([PutRetained(message) for message in retained])
    for client_id, meta in sessions.items():
        records.extend(op_records([PutSession(client_id, meta)]))
        queued = sorted(messages.get(client_id, ()), key=itemgetter(0))
        records.extend((record, payload) for _seq, record, payload in queued)
    return encode_batch([record for record, _ in records], [p for _, p in records if p is not None])


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a snapshot is built or decoded: a million new
    objects that all stay alive made it run over and over (4.1 s instead of 1.8 s to decode
    200,000 queued messages)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def decode_snapshot(data: bytes | bytearray) -> Snapshot:
    snapshot = Snapshot(retained=[], sessions={})
    with gc_paused():
        for op in decode_ops(data):
            if type(op) is PutRetained:
                snapshot.retained.append(op.message)
            elif type(op) is PutSession:
                snapshot.sessions[op.client_id] = StoredSession(op.meta, [])
            elif type(op) is PutMessage:
                snapshot.sessions[op.client_id].messages.append((op.seq, op.entry))
            else:
                raise ValueError(f"a snapshot holds only puts, not {type(op).__name__}")
    return snapshot
