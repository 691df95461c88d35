"""The message log: how `SqliteStore` keeps per-message ops cheap (one row per commit).

Every QoS 1/2 message to a persistent session costs three ops (queued, in flight,
acknowledged). Written as rows of `session_messages` that is three B-tree updates per
message, and the store spent more time on them than the broker spent routing. Instead, the
message ops of one commit are appended as ONE row of the `message_log` table (a "batch");
the session_messages table only holds messages that stayed long enough to be compacted.

A batch blob is a 4-byte little-endian length, that many bytes of JSON (orjson), then the
payloads of its put records, concatenated in record order. The JSON is a list of records:

    ["put", client_id, seq, payload_length, topic, msg_qos, msg_retain, publisher,
     username, timestamp, properties, message_id, qos, retain, subscription_ids,
     packet_id, stage]    # the fields of store.records.DELIVERY_FIELDS but the payload
    ["mark", client_id, seq, packet_id, stage]    # went in flight / moved on
    ["delete", client_id, seq]                    # acknowledged
    ["delete_session", client_id]                 # every message of the client so far

(`properties` is the JSON text of `store.records.encode_properties`, `subscription_ids` a
list; `store.records.put_record` makes the record.) Replaying the batches in
order gives the messages that live in the log; a record about a message that is not in
the log (it was compacted into the table) is ignored on replay, because the store writes
changes to table messages into the table directly.

`MessageLog` is the in-memory index that makes this work, kept by the store as it applies
ops: which messages live in the log (with their latest state) and which batch holds each
one's put record. A batch whose put records are all dead (acknowledged, superseded or
deleted with their session) is never needed again, but batches are only ever dropped from
the head (the oldest), so that a delete record never outlives the put it cancels. A
message that stays (an offline client's queue) would pin the head forever, with the dead
batches behind it; once those outweigh the live ones and `compact_bytes`, and the oldest
batch is `min_age` old, the store compacts: it copies the live messages of the oldest
batches into `session_messages` and drops those batches.

This module is pure: no SQL, no I/O. `store.sqlite_store` does the reading and writing.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson

from store.base import StoredDelivery
from store.records import LOG_RECORD_HEAD, PUT, delivery_from_put

_HEADER_LENGTH = struct.Struct("<I")
# What the index keeps of a live message: the batch holding its put record, that record (with
# the packet id and stage of its latest mark: marks update it in place) and payload, and
# while that batch is being built, the record's position in it.
_Live = tuple[int, list[Any], bytes, int]
_NONE_LIVE: dict[int, _Live] = {}  # for lookups of unknown clients
MARK, DELETE, DELETE_SESSION = "mark", "delete", "delete_session"  # and PUT (store.records)
_PUT_PAYLOAD_LENGTH = LOG_RECORD_HEAD.index("payload_length")


def encode_batch(records: Iterable[list[Any]], payloads: Iterable[Any]) -> bytes:
    header = orjson.dumps(list(records))
    return b"".join((_HEADER_LENGTH.pack(len(header)), header, *payloads))


PAYLOAD_LENGTH_AT = {PUT: _PUT_PAYLOAD_LENGTH}  # record kind -> index of its payload length


def decode_batch(
    blob: bytes | bytearray, payload_length_at: Mapping[str, int] = PAYLOAD_LENGTH_AT
) -> list[tuple[list[Any], bytes | None]]:
    """The records of a batch blob, each with its payload (None for records of a kind that
    `payload_length_at` does not list)."""
    (header_length,) = _HEADER_LENGTH.unpack_from(blob)
    offset = _HEADER_LENGTH.size + header_length
    records = orjson.loads(blob[_HEADER_LENGTH.size : offset])
    size = len(blob)
    decoded: list[tuple[list[Any], bytes | None]] = []
    append = decoded.append  # bound once: this runs per record in the store process
    length_at = payload_length_at.get
    for record in records:
        at = length_at(record[0])
        if at is None:
            append((record, None))
        else:
            end = offset + record[at]
            if end > size:
                raise ValueError("a log batch ends inside a payload")
            append((record, bytes(blob[offset:end])))
            offset = end
    if offset != size:
        raise ValueError(f"a log batch has {size - offset} bytes after its last payload")
    return decoded


class MessageLog:
    """Which messages live in the log and which batches can be dropped (module docstring)."""

    def __init__(self, next_batch: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.live: dict[str, dict[int, _Live]] = {}  # client id -> seq -> see _Live
        self.table: dict[str, set[int]] = {}  # seqs stored as session_messages rows
        self._members: dict[int, int] = {}  # batch -> how many live messages it holds
        # batch -> the keys of its put records; some may be dead or put again later
        self._keys: dict[int, list[tuple[str, int]]] = {}
        self._sizes: dict[int, int] = {}  # batch -> blob size, for batches still stored
        self._puts: dict[int, int] = {}  # batch -> how many put records it holds
        self._written_at: dict[int, float] = {}  # batch -> clock() when written or replayed
        self.head = next_batch  # oldest batch still stored (or next_batch when none)
        self.next_batch = next_batch
        self.log_bytes = 0
        # Bytes of stored batches that replay no live message (estimated: a dead put counts
        # as its batch's size over its number of puts). Compaction is due when they pile up.
        self.dead_bytes = 0.0
        # The batch being built: (record, payload) pairs, None where a put was cancelled or
        # superseded within the batch.
        self._pending: list[tuple[list[Any], Any] | None] = []

    # Replay at start-up -----------------------------------------------------------------

    @classmethod
    def replay(
        cls, batches: Iterable[tuple[int, bytes]], table_keys: Iterable[tuple[str, int]]
    ) -> MessageLog:
        """Rebuild the index from the stored batches (in batch order) and table keys."""
        log = cls()
        for client_id, seq in table_keys:
            log.table.setdefault(client_id, set()).add(seq)
        for batch, blob in batches:
            if not log._sizes:
                log.head = batch
            log.next_batch = batch + 1
            records = decode_batch(blob)
            keys = [(record[1], record[2]) for record, _ in records if record[0] == PUT]
            log._written(batch, len(blob), keys)
            for record, payload in records:
                log._replay_record(batch, record, payload)
        return log

    def _replay_record(self, batch: int, record: list[Any], payload: bytes | None) -> None:
        kind, client_id = record[0], record[1]
        if kind == PUT:
            assert payload is not None
            messages = self.live.setdefault(client_id, {})
            seq = record[2]
            old = messages.get(seq)
            if old is not None:
                self._forget(client_id, seq, old[0])
            messages[seq] = (batch, record, payload, -1)
            self._members[batch] = self._members.get(batch, 0) + 1
        elif kind == MARK:
            live = self.live.get(client_id, _NONE_LIVE).get(record[2])
            if live is not None:
                live[1][-2:] = record[3:5]
        elif kind == DELETE:
            self._remove(client_id, record[2])
        elif kind == DELETE_SESSION:
            for seq, live in self.live.pop(client_id, {}).items():
                self._forget(client_id, seq, live[0])
        else:
            raise ValueError(f"unknown log record kind {kind!r}")

    # Applying ops -------------------------------------------------------------------------
    # Each returns True when the log took the op; False means: apply it to the table.

    def put(self, client_id: str, seq: int, record: list[Any], payload: bytes) -> bool:
        """`record` is the message's put record (`put_record`); the log keeps it, and marks
        it in place while its batch is being built."""
        if self.table and seq in self.table.get(client_id, ()):
            return False  # replacing a compacted message: it stays in the table
        messages = self.live.get(client_id)
        if messages is None:
            messages = self.live[client_id] = {}
        else:
            old = messages.get(seq)
            if old is not None:  # put again: the newer record wins
                if old[0] == self.next_batch:
                    self._pending[old[3]] = None
                else:  # the older put is stored: cancel it there, whatever becomes of this one
                    self._pending.append(([DELETE, client_id, seq], None))
                self._forget(client_id, seq, old[0])
        messages[seq] = (self.next_batch, record, payload, len(self._pending))
        self._pending.append((record, payload))
        return True

    def mark(self, client_id: str, seq: int, packet_id: int, stage: str) -> bool:
        live = self.live.get(client_id, _NONE_LIVE).get(seq)
        if live is None:
            return False
        live[1][-2:] = [packet_id, stage]  # in this batch, the put is written as marked
        if live[0] != self.next_batch:
            self._pending.append(([MARK, client_id, seq, packet_id, stage], None))
        return True

    def delete(self, client_id: str, seq: int) -> bool:
        live = self._pop_live(client_id, seq)
        if live is None:
            return False
        if live[0] == self.next_batch:  # put in this batch: neither record needs writing
            self._pending[live[3]] = None
        else:
            self._pending.append(([DELETE, client_id, seq], None))
        self._forget(client_id, seq, live[0])
        return True

    def delete_session(self, client_id: str) -> None:
        """Forget the client's messages (the store deletes its table rows itself)."""
        self.table.pop(client_id, None)
        messages = self.live.pop(client_id, None)
        if not messages:
            return
        for seq, live in messages.items():
            if live[0] == self.next_batch:
                self._pending[live[3]] = None
            self._forget(client_id, seq, live[0])
        self._pending.append(([DELETE_SESSION, client_id], None))

    def take_batch(self) -> tuple[int, bytes] | None:
        """The batch built since the last call, encoded, or None when it has no records."""
        records: list[list[Any]] = []
        payloads: list[Any] = []
        keys: list[tuple[str, int]] = []  # of the live puts: the others were set to None
        for pending in self._pending:
            if pending is not None:
                record, payload = pending
                records.append(record)
                if payload is not None:
                    payloads.append(payload)
                    keys.append((record[1], record[2]))
        self._pending = []
        batch = self.next_batch
        self.next_batch += 1
        if not records:
            return None
        blob = encode_batch(records, payloads)
        self._written(batch, len(blob), keys)
        if keys:
            self._members[batch] = len(keys)
        return batch, blob

    def _written(self, batch: int, size: int, keys: list[tuple[str, int]]) -> None:
        self._written_at[batch] = self._clock()
        self._sizes[batch] = size
        self._puts[batch] = len(keys)
        self._keys[batch] = keys
        self.log_bytes += size
        if not keys:
            self.dead_bytes += size  # only marks and deletes: nothing to replay from it

    # Dropping batches -------------------------------------------------------------------

    def droppable_head(self) -> int:
        """Advance `head` past leading batches with no live message; return the new head
        (every stored batch below it can be deleted)."""
        while self.head < self.next_batch and not self._members.get(self.head):
            self._members.pop(self.head, None)
            self._puts.pop(self.head, None)
            self._keys.pop(self.head, None)
            self._written_at.pop(self.head, None)
            size = self._sizes.pop(self.head, 0)
            self.log_bytes -= size
            self.dead_bytes = max(0.0, self.dead_bytes - size)
            self.head += 1
        if not self._sizes:
            self.dead_bytes = 0.0  # no rounding residue once the log is empty
        return self.head

    def compaction_due(self, compact_bytes: int, min_age: float) -> bool:
        """Whether to compact: the dead bytes kept behind live messages exceed `compact_bytes`
        and the live bytes (so compaction writes less than it frees), and the oldest batch
        has waited `min_age` seconds. A backlog that a subscriber is working through is left
        alone: compacting it would copy messages into the table just before they are
        acknowledged, and turn their acknowledgements into table updates."""
        if self.dead_bytes <= compact_bytes or 2 * self.dead_bytes <= self.log_bytes:
            return False
        written_at = self._written_at.get(self.head)
        return written_at is not None and self._clock() - written_at >= min_age

    def compact_head(self, max_messages: int) -> list[tuple[str, int, StoredDelivery]]:
        """Move the live messages of the oldest batches (whole batches, until at least
        `max_messages` or the end of the log) to the table side of the index and return them
        for the store to write as table rows; `droppable_head` then passes those batches."""
        moving: list[tuple[str, int, StoredDelivery]] = []
        batch = self.droppable_head()
        while batch < self.next_batch and len(moving) < max_messages:
            for client_id, seq in self._keys.get(batch, ()):
                live = self.live.get(client_id, {}).get(seq)
                if live is not None and live[0] == batch:
                    moving.append((client_id, seq, delivery_from_put(live[1], live[2])))
            batch += 1
        for client_id, seq, _entry in moving:
            self._remove(client_id, seq)
            self.table.setdefault(client_id, set()).add(seq)
        return moving

    def messages(self) -> Iterator[tuple[str, int, list[Any], bytes]]:
        """Every message living in the log: client id, seq, put record (with its latest
        mark) and payload (`delivery_from_put` makes a `StoredDelivery` of the last two)."""
        for client_id, messages in self.live.items():
            for seq, live in messages.items():
                yield client_id, seq, live[1], live[2]

    def table_deleted(self, client_id: str, seq: int) -> None:
        seqs = self.table.get(client_id)
        if seqs is not None:
            seqs.discard(seq)

    def _pop_live(self, client_id: str, seq: int) -> _Live | None:
        messages = self.live.get(client_id)
        if messages is None:
            return None
        live = messages.pop(seq, None)
        if not messages:
            del self.live[client_id]
        return live

    def _remove(self, client_id: str, seq: int) -> None:
        live = self._pop_live(client_id, seq)
        if live is not None:
            self._forget(client_id, seq, live[0])

    def _forget(self, client_id: str, seq: int, batch: int) -> None:
        """Account for a message that left the log (its entry is already out of `live`)."""
        if batch == self.next_batch:
            return  # not written yet: take_batch counts the puts that are left
        self._members[batch] -= 1
        puts = self._puts.get(batch)
        if puts:  # its put record is now dead weight
            self.dead_bytes += self._sizes[batch] / puts
