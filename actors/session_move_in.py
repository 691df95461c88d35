"""A session's side of moving in from another worker of a pool (docs/pool.md, "Deliveries
during a move").

While a session moves in, what reaches it comes three ways: directly (this worker's
routes), forwarded by the previous owner, and kept for it while its old worker was dead.
`core.move_in.MoveIn` decides, purely, which of them are fresh and which duplicate what the
store had; `MovingIn` carries that out for the session actor: it stores forwarded deliveries
this worker must keep, forgets the stored copies of duplicates, and hands the rest to the
session to deliver, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from actors.persistence import Persistence
from core.move_in import MoveIn
from core.session_state import Delivery
from session.protocol import SessionProtocol

logger = logging.getLogger(__name__)


class MovingIn:
    __slots__ = ("_deliver", "_persistence", "_protocol", "move")

    def __init__(
        self,
        move: MoveIn,
        protocol: SessionProtocol,
        persistence: Persistence,
        deliver: Callable[[list[Delivery]], None],
    ) -> None:
        self.move = move
        self._protocol = protocol
        self._persistence = persistence
        self._deliver = deliver  # the session's: what its client may read, delivered now

    def direct(self, deliveries: list[Delivery]) -> list[Delivery]:
        """Deliveries routed here directly: those to deliver now (the others are held or
        duplicates)."""
        deliveries, duplicates = self.move.direct(deliveries)
        self._protocol.forget(duplicates)
        return deliveries

    def forwarded(self, deliveries: list[Delivery]) -> None:
        """Deliveries the previous owner forwarded: after what the store had, in order."""
        fresh = self.move.forwarded(deliveries)
        if self._protocol.stored:
            fresh = [self._stored_here(delivery) for delivery in fresh]
        self._deliver(fresh)

    def orphans(self, deliveries: list[Delivery]) -> None:
        """Messages kept for this session while its worker was dead (it was adopted from
        there): after what the store had, less what it has already (`MoveIn.orphaned`)."""
        deliveries, duplicates = self.move.orphaned(deliveries)
        self._protocol.forget(duplicates)
        self._deliver(deliveries)

    def forwarding_ended(self, source: int) -> None:
        """The previous owner (worker `source`) forwards nothing more: the deliveries held
        meanwhile go now, but for the duplicates of forwarded ones."""
        deliveries, duplicates = self.move.end()
        self._protocol.forget(duplicates)
        logger.info(
            "session %r moved in from worker %d: %d deliveries forwarded, %d held meanwhile, "
            "%d duplicates dropped",
            self._protocol.state.client_id,
            source,
            self.move.forwarded_count,
            len(deliveries) + len(duplicates),
            len(duplicates),
        )
        if deliveries:
            self._deliver(deliveries)

    def _stored_here(self, delivery: Delivery) -> Delivery:
        """A forwarded delivery as this session stores it: one the previous owner stored
        keeps its seq (its put is committed), so new ones order after it; a QoS 1/2 one it
        did not store gets a seq and a put here."""
        persistence = self._persistence
        if delivery.seq:
            persistence.advance_past(delivery.seq)
            return delivery
        if not delivery.qos:
            return delivery
        return self._protocol.store_delivery(delivery, persistence.next_seq())
