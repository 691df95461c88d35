"""Persistent sessions this worker adopted from a dead worker, until every other worker has
given it what it kept for them (docs/pool.md "A worker dies").

When a worker dies, its persistent sessions are hosted again: each home re-hosts the ones
homed at it, the restarted worker restores its own, and a CONNECT that was waiting for the
dead worker to hand its session over loads it from the store (`pool.worker`,
`pool.registry`); each of these is a round of adoption. Each such
session starts as a session moving in (`core.move_in.MoveIn`): it delivers what the store
had, holds what reaches it directly, and waits. Once the adopted sessions' routes are known
everywhere, this worker says `Adopted(dead, round)`; every worker answers `Orphans` with the
QoS 1/2 messages it acknowledged for the dead worker's sessions and could not tell were
stored (`pool.orphans`), and this worker's dispatcher gives them to the adopted sessions
whose subscriptions match (stored first, then told as `OrphansIn`, duplicates dropped by
message id). When every worker has answered (or gone down), the sessions deliver what they
held, less duplicates (`ForwardingEnded`), and one routes round later stop checking for
them (`MoveSettled`), exactly as after a move.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import gevent

from actors.messages import ForwardingEnded, MoveSettled
from actors.runtime import tell_if_alive
from core.message import Message
from core.session_state import SubscriptionOptions
from pool.frames.moves import Orphans
from pool.frames.ownership import HandOver
from router.fan_out import FanOut, Route
from router.route_table import RouteTable
from router.shared import is_shared

logger = logging.getLogger(__name__)

ADOPTION_TIMEOUT = 10.0  # seconds an adoption waits at most for the other workers' answers

WhenRoutesKnown = Callable[[Callable[[], object]], None]
DeliverOrphans = Callable[[tuple[Message, ...], FanOut], None]


class _Adoption:
    __slots__ = (
        "announced",
        "client_ids",
        "dead",
        "deferred",
        "kept",
        "plans",
        "routes",
        "sessions",
        "timer",
        "waiting",
    )

    def __init__(self, dead: int) -> None:
        self.dead = dead
        self.sessions: list[Any] = []
        self.client_ids: set[str] = set()
        self.deferred: list[HandOver] = []  # hand-overs of adopted ids asked meanwhile
        self.routes: RouteTable[str, Route] = RouteTable()
        self.plans = FanOut(self.routes)
        self.waiting: set[int] = set()  # workers whose `Orphans` has not come yet
        self.kept = 0  # messages the others kept, as given to the sessions
        self.announced = False
        self.timer: gevent.Greenlet[..., Any] | None = None


class SessionAdoptions:
    """This worker's adoptions (rounds), each of sessions of one dead worker; see the module
    docstring."""

    def __init__(
        self,
        worker: int,
        ask: Callable[[int, int], object],
        when_routes_known: WhenRoutesKnown,
        deliver: DeliverOrphans,
        hand_over: Callable[[HandOver], None],
    ) -> None:
        """`ask(dead, round)` asks every worker, this one too, for what it kept for `dead`;
        `hand_over` answers a hand-over deferred until the adoption ended."""
        self.worker = worker
        self._ask = ask
        self._when_routes_known = when_routes_known
        self._deliver = deliver
        self._hand_over = hand_over
        self._rounds: dict[int, _Adoption] = {}
        self._last_round = 0

    def begin(self, dead: int) -> int:
        """A new round of adopting sessions of `dead`: its number."""
        self._last_round += 1
        self._rounds[self._last_round] = _Adoption(dead)
        return self._last_round

    def add(
        self,
        round_: int,
        client_id: str,
        session: Any,
        subscriptions: Mapping[str, SubscriptionOptions],
    ) -> None:
        """`session` (already moving in: `SessionActor.moving_in`) was adopted in `round_`."""
        adoption = self._rounds[round_]
        adoption.sessions.append(session)
        adoption.client_ids.add(client_id)
        for topic_filter, options in subscriptions.items():
            if not is_shared(topic_filter):  # share groups are not in the durable replica
                adoption.routes.add(topic_filter, client_id, Route(session, options, True))

    def announce(self, round_: int, peers: Iterable[int]) -> None:
        """Every session of `round_` runs here: once their routes are known to every worker,
        ask `peers` (the linked workers) and this one for what they kept. With no adopted
        session the others are told all the same: each waits for every worker's part."""
        adoption = self._rounds[round_]
        adoption.waiting.update(peers)
        adoption.waiting.add(self.worker)

        def ask() -> None:
            if self._rounds.get(round_) is not adoption:
                return
            adoption.announced = True
            adoption.timer = gevent.spawn_later(ADOPTION_TIMEOUT, self._timed_out, round_)
            self._ask(adoption.dead, round_)

        self._when_routes_known(ask)

    def orphans(self, worker: int, frame: Orphans) -> None:
        """`worker`'s answer to `Adopted`: what it kept, to the round's sessions."""
        adoption = self._rounds.get(frame.round)
        if adoption is None or worker not in adoption.waiting:
            if frame.messages:
                logger.warning(
                    "pool: worker %d sent %d messages kept for the sessions of worker %d "
                    "after this worker stopped waiting for them; dropped",
                    worker,
                    len(frame.messages),
                    frame.dead,
                )
            return
        if frame.messages and adoption.sessions:
            adoption.kept += len(frame.messages)
            self._deliver(frame.messages, adoption.plans)
        adoption.waiting.discard(worker)
        if not adoption.waiting:
            self._end(frame.round)

    def defer_hand_over(self, frame: HandOver) -> bool:
        """Hold a hand-over of an adopted session until what the others kept for it has
        come (it then moves with all of it)."""
        for adoption in self._rounds.values():
            if frame.client_id in adoption.client_ids:
                adoption.deferred.append(frame)
                return True
        return False

    def peer_down(self, worker: int) -> None:
        """`worker` went down: its answer will not come."""
        for round_, adoption in list(self._rounds.items()):
            if adoption.announced and worker in adoption.waiting:
                adoption.waiting.discard(worker)
                if not adoption.waiting:
                    self._end(round_)

    def _timed_out(self, round_: int) -> None:
        adoption = self._rounds.get(round_)
        if adoption is not None:
            adoption.timer = None
            logger.warning(
                "pool: workers %s did not answer for the sessions adopted from worker %d "
                "within %.0f s; the sessions go on with what they have",
                sorted(adoption.waiting),
                adoption.dead,
                ADOPTION_TIMEOUT,
            )
            self._end(round_)

    def _end(self, round_: int) -> None:
        adoption = self._rounds.pop(round_)
        if adoption.timer is not None:
            adoption.timer.kill(block=False)
        if adoption.sessions:
            logger.info(
                "pool: %d sessions adopted from worker %d are complete: %d messages the "
                "other workers kept for them handed over",
                len(adoption.sessions),
                adoption.dead,
                adoption.kept,
            )
        dead = adoption.dead
        settled = [s for s in adoption.sessions if tell_if_alive(s, ForwardingEnded(dead))]
        if settled:
            self._when_routes_known(
                lambda: [tell_if_alive(session, MoveSettled()) for session in settled]
            )
        for frame in adoption.deferred:
            self._hand_over(frame)
