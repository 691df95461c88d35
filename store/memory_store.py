"""`MemoryStore`: the `Store` contract in plain dicts, for tests and `--store memory`.

Nothing survives the process. Objects are kept as given (they are frozen dataclasses; the
broker treats a Message's properties dict as immutable too), so no serialisation cost is
paid. A batch is validated as a whole before any of it is applied, so a failing batch
changes nothing, as in `SqliteStore`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

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
    StoredDelivery,
    StoredSession,
    StoreError,
)

logger = logging.getLogger(__name__)

_OP_TYPES = (
    PutRetained,
    DeleteRetained,
    PutSession,
    DeleteSession,
    PutMessage,
    MarkInFlight,
    DeleteMessage,
)


class MemoryStore:
    """A `Store` in dicts: retained by topic, session metadata and messages by client id."""

    def __init__(self) -> None:
        self._retained: dict[str, Message] = {}
        self._sessions: dict[str, SessionMeta] = {}
        self._messages: dict[str, dict[int, StoredDelivery]] = {}
        self._closed = False

    def __repr__(self) -> str:
        return "MemoryStore()"

    def apply(self, ops: Sequence[Op]) -> None:
        self._check_open()
        for op in ops:
            if not isinstance(op, _OP_TYPES):
                raise StoreError(f"{self!r}: cannot apply {op!r}: not a store operation")
        for op in ops:
            self._apply_one(op)

    def _apply_one(self, op: Op) -> None:
        match op:
            case PutMessage(client_id, seq, entry):
                self._messages.setdefault(client_id, {})[seq] = entry
            case MarkInFlight(client_id, stage, marks):
                messages = self._messages.get(client_id, {})
                for seq, packet_id in marks:
                    marked = messages.get(seq)
                    if marked is not None:
                        messages[seq] = replace(marked, packet_id=packet_id, stage=stage)
            case DeleteMessage(client_id, seqs):
                messages = self._messages.get(client_id, {})
                for seq in seqs:
                    messages.pop(seq, None)
            case PutRetained(message):
                self._retained[message.topic] = message
            case DeleteRetained(topic):
                self._retained.pop(topic, None)
            case PutSession(client_id, meta):
                self._sessions[client_id] = meta
            case DeleteSession(client_id):
                self._sessions.pop(client_id, None)
                self._messages.pop(client_id, None)

    def load(self) -> Snapshot:
        self._check_open()
        sessions = {
            client_id: StoredSession(
                meta, sorted(self._messages.get(client_id, {}).items(), key=lambda m: m[0])
            )
            for client_id, meta in self._sessions.items()
        }
        orphans = [
            client_id
            for client_id, messages in self._messages.items()
            if messages and client_id not in self._sessions
        ]
        if orphans:
            logger.warning("%r: skipped the messages of %d unknown sessions", self, len(orphans))
        return Snapshot(retained=list(self._retained.values()), sessions=sessions)

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
