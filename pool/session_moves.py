"""Moving a session between pool workers without losing what arrives meanwhile: the
per-client-id state of both ends (docs/pool.md "Deliveries during a move").

The previous owner (A), asked by the claimant (B) to hand a stored session over, keeps the
session's routes and an `_Outgoing` entry for its client id: the session, moved away,
forwards each delivery that still reaches it (`MovedDeliveries`, once its put is
committed) to B. A says `MovingOut` first, before `HandedOver`, with what the store does not
hold (the last username, the queued QoS 0 deliveries).

B keeps an `_Incoming` entry: forwarded deliveries wait there until B has loaded the
session from the store and started it (`started`), then go to the session (`MovedIn`),
which holds what it gets directly meanwhile (`core.move_in`). Once B's routes for the
session are known to every worker, B says `MoveRoutesKnown`; A then runs a `RoutesSync`
round (everything any worker sent A before it knew B's routes has arrived), leaves the
routes, forwards what reached the session until then, and says `MoveEnded`. B's session
then delivers what it held, less the duplicates; after one more round (every direct copy
of a forwarded message has arrived) it stops checking for them (`MoveSettled`).

A HandOver that reaches B while the session is still moving in waits for the move to end.
A peer that goes down ends the moves with it; a move that does not end within
`MOVE_TIMEOUT` is ended with a warning. Everything runs on the worker's gevent loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gevent

from actors.messages import EndForwarding, ForwardingEnded, MovedIn, MoveSettled
from actors.runtime import tell_if_alive
from core.session_state import Delivery
from pool.frames.codec import Frame
from pool.frames.moves import MovedDeliveries, MoveEnded, MoveRoutesKnown, MovingOut
from pool.frames.ownership import HandOver

logger = logging.getLogger(__name__)

MOVE_TIMEOUT = 5.0  # seconds A forwards at most without B's `MoveRoutesKnown`

Send = Callable[[int, Frame], object]
WhenRoutesKnown = Callable[[Callable[[], object]], None]


class _Outgoing:
    """A's side of one move: the `MoveOut` its session forwards through."""

    __slots__ = ("_moves", "claimant", "client_id", "ending", "forwarded", "session", "timer")

    def __init__(self, moves: SessionMoves, client_id: str, claimant: int, session: Any) -> None:
        self._moves = moves
        self.client_id = client_id
        self.claimant = claimant
        self.session = session
        self.forwarded = 0
        self.ending = False
        self.timer: gevent.Greenlet[..., Any] | None = None

    def begin(
        self, username: str | None, user_known: bool, qos0: list[Delivery], after: list[int]
    ) -> None:
        moves = self._moves
        moves.outgoing[self.client_id] = self
        frame = MovingOut(self.client_id, username, int(user_known), tuple(qos0), tuple(after))
        moves.send(self.claimant, frame)
        self.timer = gevent.spawn_later(moves.timeout, self._timed_out)

    def forward(self, deliveries: list[Delivery]) -> None:
        self.forwarded += len(deliveries)
        self._moves.send(self.claimant, MovedDeliveries(self.client_id, tuple(deliveries)))

    def end(self) -> None:
        moves = self._moves
        moves.send(self.claimant, MoveEnded(self.client_id))
        if moves.outgoing.get(self.client_id) is self:
            del moves.outgoing[self.client_id]
        if self.timer is not None:
            self.timer.kill(block=False)
        logger.info(
            "session %r moved to worker %d: %d deliveries that reached it during the move "
            "forwarded",
            self.client_id,
            self.claimant,
            self.forwarded,
        )

    def finish(self) -> None:
        """Every worker routes the session's messages to its new owner: stop forwarding
        once what was on its way here has been forwarded."""
        if not self.ending:
            self.ending = True
            if not tell_if_alive(self.session, EndForwarding()):
                self.end()

    def _timed_out(self) -> None:
        self.timer = None
        if not self.ending:
            logger.warning(
                "session %r: worker %d did not confirm its routes within %.0f s; ending the "
                "forwarding of what reaches the session here",
                self.client_id,
                self.claimant,
                self._moves.timeout,
            )
            self.finish()


class _Incoming:
    """B's side of one move, from `MovingOut` to `MoveEnded`."""

    __slots__ = ("buffered", "deferred", "moving", "routes_known", "session", "source", "timer")

    def __init__(self, source: int, moving: MovingOut) -> None:
        self.source = source
        self.moving = moving
        self.buffered: list[Delivery] = []  # forwarded before the session started here
        self.session: Any = None
        self.routes_known = False
        self.deferred: list[HandOver] = []  # hand-overs of the id asked meanwhile
        self.timer: gevent.Greenlet[..., Any] | None = None


class SessionMoves:
    """This worker's moves of sessions, both ways; see the module docstring."""

    def __init__(
        self,
        send: Send,
        when_routes_known: WhenRoutesKnown,
        hand_over: Callable[[HandOver], None],
        timeout: float | None = None,
    ) -> None:
        """`timeout`: seconds A forwards at most without `MoveRoutesKnown` (MOVE_TIMEOUT
        unless given); B waits twice that for `MoveEnded`."""
        self.send = send
        self.timeout = MOVE_TIMEOUT if timeout is None else timeout
        self._when_routes_known = when_routes_known
        self._hand_over = hand_over  # answers a deferred HandOver
        self.outgoing: dict[str, _Outgoing] = {}
        self.incoming: dict[str, _Incoming] = {}

    # ----- the previous owner (A) ---------------------------------------------------------

    def move_out(self, client_id: str, claimant: int, session: Any) -> _Outgoing:
        """The `MoveOut` for a HandOff of `session` to `claimant`; it takes effect only if
        the session calls `begin` (a stored session)."""
        return _Outgoing(self, client_id, claimant, session)

    def claimant_routes_known(self, worker: int, client_id: str) -> None:
        """`MoveRoutesKnown`: one round more, so that what every worker sent here before it
        knew the new routes has arrived, then the forwarding ends."""
        entry = self.outgoing.get(client_id)
        if entry is not None and entry.claimant == worker:
            self._when_routes_known(entry.finish)

    # ----- the new owner (B) --------------------------------------------------------------

    def moving_in(self, worker: int, frame: MovingOut) -> None:
        entry = _Incoming(worker, frame)
        self.incoming[frame.client_id] = entry
        entry.timer = gevent.spawn_later(2 * self.timeout, self._arrival_timed_out, entry)

    def arriving(self, client_id: str) -> MovingOut | None:
        """What the previous owner carried for `client_id`, if its session is moving in."""
        entry = self.incoming.get(client_id)
        return entry.moving if entry is not None else None

    def started(self, client_id: str, session: Any) -> None:
        """The moving session runs here now (loaded from the store): it gets what was
        forwarded so far, and from now on each forwarded batch as it comes."""
        entry = self.incoming.get(client_id)
        if entry is None:
            return
        entry.session = session
        buffered, entry.buffered = entry.buffered, []
        if buffered:
            tell_if_alive(session, MovedIn(buffered))

    def forwarded(self, worker: int, frame: MovedDeliveries) -> None:
        entry = self.incoming.get(frame.client_id)
        if entry is None or entry.source != worker:
            logger.warning(
                "session %r: %d deliveries forwarded by worker %d, which is not moving it "
                "here (or its move ended); dropped",
                frame.client_id,
                len(frame.deliveries),
                worker,
            )
            return
        if entry.session is None:
            entry.buffered += frame.deliveries
        else:
            tell_if_alive(entry.session, MovedIn(list(frame.deliveries)))

    def routes_known(self, client_id: str) -> None:
        """The session's resume here is over and its routes are known to every worker."""
        entry = self.incoming.get(client_id)
        if entry is not None and not entry.routes_known:
            entry.routes_known = True
            self.send(entry.source, MoveRoutesKnown(client_id))

    def ended(self, worker: int, frame: MoveEnded) -> None:
        entry = self.incoming.get(frame.client_id)
        if entry is not None and entry.source == worker:
            self._end(frame.client_id, entry)

    def defer_hand_over(self, frame: HandOver) -> bool:
        """Hold a HandOver of a session still moving in until its move has ended."""
        entry = self.incoming.get(frame.client_id)
        if entry is None:
            return False
        entry.deferred.append(frame)
        return True

    def _end(self, client_id: str, entry: _Incoming) -> None:
        del self.incoming[client_id]
        if entry.timer is not None:
            entry.timer.kill(block=False)
        session = entry.session
        if session is not None and tell_if_alive(session, ForwardingEnded(entry.source)):
            self._when_routes_known(lambda: tell_if_alive(session, MoveSettled()))
        elif entry.buffered:
            logger.warning(
                "session %r did not resume here: %d deliveries its previous owner forwarded "
                "are dropped",
                client_id,
                len(entry.buffered),
            )
        for frame in entry.deferred:
            self._hand_over(frame)

    def _arrival_timed_out(self, entry: _Incoming) -> None:
        client_id = entry.moving.client_id
        if self.incoming.get(client_id) is entry:
            entry.timer = None
            logger.warning(
                "session %r: worker %d did not end its forwarding within %.0f s; delivering "
                "what was held",
                client_id,
                entry.source,
                2 * self.timeout,
            )
            self._end(client_id, entry)

    # ----- peers --------------------------------------------------------------------------

    def peer_down(self, worker: int) -> None:
        """A worker went down: its moves end here (what it had not forwarded is in the
        store, for whoever hosts the session next)."""
        for entry in [e for e in self.outgoing.values() if e.claimant == worker]:
            entry.finish()
        for client_id, incoming in list(self.incoming.items()):
            if incoming.source == worker:
                self._end(client_id, incoming)
