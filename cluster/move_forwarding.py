"""What reaches a persistent session during its move to another node: forwarded to the new
node, held there and taken once (docs/cluster.md "Deliveries during a move").

It is the pool's move (`pool.session_moves.SessionMoves`, docs/pool.md "Deliveries during a
move") between peers of the NATS fabric: the old node's session keeps its routes as a
forwarder (`MovingOut`, `MovedDeliveries`, `MoveEnded`), the new node's session holds what
its own routes bring until the forwarding ends (`core.move_in.MoveIn`), and the end waits
for `MoveRoutesKnown` and one `RoutesSync` round over the node's pool and the other nodes.
Two things differ across nodes:

- the session may end on the old node before the claimant's `GiveUp` names the claimant
  worker (the bucket's watch fences it first): `NodeMoveOut` keeps what reaches the session
  until `claimed` names it, and if none does within the move's timeout the forwarding ends
  (what was kept is in this node's store, as the session's is);
- the nodes' stores number deliveries apart: forwarded deliveries lose the old node's seq,
  and the new node knows those it loaded by their message ids and stores the others
  under its own numbers (`actors.session_move_in.MovingIn`).

Every wait is bounded by the move's timeout (`claim_timeout` + `peer_timeout`), and a
peer that goes down ends its moves at once. Everything runs on the worker's gevent loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gevent

from actors.messages import EndForwarding
from actors.runtime import tell_if_alive
from core.session_state import Delivery
from pool.frames.codec import Frame
from pool.frames.moves import MovedDeliveries, MoveEnded, MoveRoutesKnown, MovingOut
from pool.session_moves import Send, SessionMoves, WhenRoutesKnown

logger = logging.getLogger(__name__)

MOVE_FRAMES = frozenset((MovingOut, MovedDeliveries, MoveRoutesKnown, MoveEnded))


class NodeMoveOut:
    """The old node's side of one move (the session's `MoveOut`): forwards through the
    pool's move once the claimant is known, keeps what comes before."""

    __slots__ = ("_begun", "_forwarding", "_kept", "_out", "client_id", "session")

    def __init__(self, forwarding: MoveForwarding, client_id: str, session: Any) -> None:
        self._forwarding = forwarding
        self.client_id = client_id
        self.session = session
        self._begun: tuple[str | None, bool, list[Delivery], list[int]] | None = None
        self._kept: list[list[Delivery]] = []
        self._out: Any = None  # the pool's `_Outgoing`, once the claimant is known

    def begin(
        self, username: str | None, user_known: bool, qos0: list[Delivery], after: list[int]
    ) -> None:
        self._begun = (username, user_known, qos0, after)
        self._forwarding.outgoing[self.client_id] = self
        gevent.spawn_later(self._forwarding.moves.timeout, self._unclaimed)

    def forward(self, deliveries: list[Delivery]) -> None:
        if self._out is not None:
            self._out.forward(deliveries)
        else:
            self._kept.append(deliveries)

    def end(self) -> None:
        forwarding = self._forwarding
        if forwarding.outgoing.get(self.client_id) is self:
            del forwarding.outgoing[self.client_id]
        if self._out is not None:
            self._out.end()
        forwarding.ended(self.client_id)

    def claim(self, worker: int) -> None:
        """The claimant is `worker`: it gets the move's start and what was kept."""
        if self._begun is None or self._out is not None:
            return
        self._out = self._forwarding.moves.move_out(self.client_id, worker, self.session)
        self._out.begin(*self._begun)
        for deliveries in self._kept:
            self._out.forward(deliveries)
        self._kept = []

    def _unclaimed(self) -> None:
        pending = self._out is None and self._forwarding.outgoing.get(self.client_id) is self
        if pending and not tell_if_alive(self.session, EndForwarding()):
            self.end()

    def cancel(self) -> None:
        """No claimant will take this session (a clean start, or it could not be sent)."""
        self._unclaimed()


class MoveForwarding:
    """This worker's moves of sessions to and from other nodes; see the module docstring."""

    def __init__(
        self,
        send: Send,
        when_routes_known: WhenRoutesKnown,
        timeout: float,
        ended: Callable[[str], object],
    ) -> None:
        # A `HandOver` is the pool's frame: no claim across nodes is deferred to a move.
        self.moves = SessionMoves(send, when_routes_known, lambda _frame: None, timeout)
        self.outgoing: dict[str, NodeMoveOut] = {}
        self._ended = ended  # told the client id when a move out ends

    # ----- the old node -------------------------------------------------------------------

    def move_out(self, client_id: str, session: Any) -> NodeMoveOut:
        return NodeMoveOut(self, client_id, session)

    def claim(self, client_id: str, worker: int) -> None:
        """Before the session's stored form goes to `worker`: forwarding to it starts."""
        out = self.outgoing.get(client_id)
        if out is not None:
            out.claim(worker)

    def cancel(self, client_id: str) -> None:
        out = self.outgoing.get(client_id)
        if out is not None:
            out.cancel()

    def forwarding(self, client_id: str) -> bool:
        return client_id in self.outgoing

    def ended(self, client_id: str) -> None:
        self._ended(client_id)

    # ----- the new node -------------------------------------------------------------------

    def arriving(self, client_id: str, worker: int) -> MovingOut | None:
        """What `worker` carried for `client_id`, if it is moving the session here."""
        entry = self.moves.incoming.get(client_id)
        return entry.moving if entry is not None and entry.source == worker else None

    def started(self, client_id: str, session: Any) -> None:
        self.moves.started(client_id, session)

    def routes_known(self, client_id: str) -> None:
        self.moves.routes_known(client_id)

    # ----- frames and peers ---------------------------------------------------------------

    def frame_received(self, worker: int, frame: Frame) -> None:
        moves = self.moves
        if isinstance(frame, MovedDeliveries):
            # The old node's seqs mean nothing in this store (`core.move_in`).
            deliveries = tuple(d._replace(seq=0) for d in frame.deliveries)
            moves.forwarded(worker, MovedDeliveries(frame.client_id, deliveries))
        elif isinstance(frame, MovingOut):
            moves.moving_in(worker, frame)
        elif isinstance(frame, MoveRoutesKnown):
            moves.claimant_routes_known(worker, frame.client_id)
        elif isinstance(frame, MoveEnded):
            moves.ended(worker, frame)

    def peer_down(self, worker: int) -> None:
        self.moves.peer_down(worker)
