"""A persistent session moving from one node to another (docs/cluster.md "One session per
client id").

Nodes share no store, so a session taken over on another node travels in the claim's
answer: its stored form (the `PutSession` and `PutMessage` ops of the store's snapshot,
encoded by `store.op_codec`, base64 in the `SessionHandedOver` frame). `NodeMoves` makes
that form from this node's store (`move_out`) and, on the claimant's side, stores the
session under this node's own delivery numbers and starts it (`move_in`), moving in with
what the old node carried (`cluster.move_forwarding` forwards what reaches the session
meanwhile).
"""

from __future__ import annotations

import base64
import logging
from typing import Any, Protocol

from actors.persistence import Persistence
from pool.frames.moves import MovingOut
from store.base import Op, PutMessage, PutSession, StoredSession, StoreError
from store.op_codec import decode_ops, encode_ops

logger = logging.getLogger(__name__)


class StoredSessions(Protocol):
    """What a worker offers for moves: its store's sessions, and starting one (the broker:
    `actors.broker.Broker`, a pool worker's `pool.worker.PoolBroker`)."""

    @property
    def stores_sessions(self) -> bool:
        """Whether sessions are kept in a store (not `[store] kind = "none"`)."""
        ...

    def stored_session(self, client_id: str) -> StoredSession | None:
        """The stored session of `client_id` (waits for the store; StoreError if it fails)."""
        ...

    def start_stored_session(
        self, client_id: str, stored: StoredSession, moving: MovingOut | None = None
    ) -> Any:
        """Start `stored` as the detached session of `client_id`, its routes added; its
        actor reference (None: it had expired). `moving`: what its previous node carried,
        whose forwarding it then awaits (`cluster.move_forwarding`)."""
        ...


class NodeMoves:
    def __init__(self, sessions: StoredSessions, persistence: Persistence) -> None:
        self._sessions = sessions
        self._persistence = persistence

    @property
    def can_move(self) -> bool:
        return self._sessions.stores_sessions

    def move_out(self, client_id: str) -> str | None:
        """The stored form of `client_id`'s session (committed before this is called), or
        None if none is stored or the store fails (logged: the client starts afresh)."""
        try:
            stored = self._sessions.stored_session(client_id)
        except StoreError as error:
            logger.warning(
                "cluster: the session of %r could not be read to move it to another node: "
                "%s; its client starts afresh there",
                client_id,
                error,
            )
            return None
        if stored is None:
            return None
        ops: list[Op] = [PutSession(client_id, stored.meta)]
        ops.extend(PutMessage(client_id, seq, entry) for seq, entry in stored.messages)
        return base64.b64encode(encode_ops(ops)).decode("ascii")

    def move_in(self, client_id: str, encoded: str, moving: MovingOut | None = None) -> Any:
        """Store and start the session `encoded` carries: its actor reference, or None if it
        does not decode (the other node runs another version) or had expired."""
        try:
            ops = decode_ops(base64.b64decode(encoded))
            stored = moved_session(client_id, ops)
        except ValueError as error:
            logger.error(
                "cluster: a session of %r from another node does not decode (%s): its "
                "client starts afresh; do all nodes run the same broker version?",
                client_id,
                error,
            )
            return None
        renumbered = StoredSession(
            stored.meta,
            [(self._persistence.next_seq(), entry) for _seq, entry in stored.messages],
        )
        puts: list[Op] = [PutSession(client_id, renumbered.meta)]
        puts.extend(PutMessage(client_id, seq, entry) for seq, entry in renumbered.messages)
        self._persistence.submit(puts)
        session = self._sessions.start_stored_session(client_id, renumbered, moving)
        if session is None:
            return None
        logger.info(
            "cluster: session of %r moved in from another node (%d subscriptions, %d messages)",
            client_id,
            len(renumbered.meta.subscriptions),
            len(renumbered.messages),
        )
        return session


def moved_session(client_id: str, ops: list[Op]) -> StoredSession:
    """The session of `client_id` that `ops` (one `PutSession`, then its `PutMessage`s in
    order) describe; ValueError for anything else."""
    if not ops or type(ops[0]) is not PutSession or ops[0].client_id != client_id:
        raise ValueError(f"the ops do not begin with the session of {client_id!r}")
    messages = []
    for op in ops[1:]:
        if type(op) is not PutMessage or op.client_id != client_id:
            raise ValueError(f"a moved session holds only its own messages, not {op!r}")
        messages.append((op.seq, op.entry))
    return StoredSession(ops[0].meta, messages)
