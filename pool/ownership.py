"""Which worker owns each client id: the arbiter every client id's home worker runs.

Pure state, no I/O: frames in (`Claim`, `Settled`, `Release`, `Declined`, a worker down or
back), frames out (`Granted`, to send to the claimant). docs/pool.md tells the whole hand-over.

Each client id has one home worker, `home_of(client_id, workers)`, whose arbiter keeps the
record for it. A worker that accepted a CONNECT claims the id; the arbiter grants one claim
at a time per id, naming the previous owner so the claimant can have the session handed
over (or discarded, for a clean start). Until the claimant says `Settled` (it has the
session) further claims for the id wait, in arrival order: however many connections with
one client id arrive at once on however many workers, each id ends with exactly one owner,
and every claimant's turn comes.

Invariants, per client id:
- at most one grant is in transit (granted, not yet settled);
- a claimant waits in the queue at most once (a worker that claims again while waiting
  keeps its place: its newest connection is the one that will take the session);
- the owner is the last granted claimant, until it releases the id or its worker is down;
  a claimant that declines the grant (its CONNECT refused before it took anything from the
  previous owner) gives the id back to that owner, unless it released the id meanwhile or
  its worker went down.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass

from pool.frames.ownership import Granted

logger = logging.getLogger(__name__)


def home_of(client_id: str, workers: int) -> int:
    """The worker whose arbiter decides who owns `client_id` (stable across restarts)."""
    return zlib.crc32(client_id.encode("utf-8", "surrogatepass")) % workers


@dataclass(slots=True)
class _Record:
    owner: int | None = None
    in_transit: bool = False  # the owner was granted the id and has not settled yet
    # While in transit: the owner before the grant, which keeps the id if the claimant
    # declines (None: nobody, or it released the id or went down since).
    previous: int | None = None
    # The workers whose claims wait, in arrival order: at most one entry per worker, so a
    # tuple; an empty deque would be 0.6 KB for every client id homed here.
    waiting: tuple[int, ...] = ()


class ClientIdArbiter:
    """The ownership records of the client ids whose home is this worker."""

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: dict[str, _Record] = {}

    def owner(self, client_id: str) -> int | None:
        record = self._records.get(client_id)
        return None if record is None else record.owner

    def granting(self, client_id: str) -> bool:
        """Whether a grant of the id is in transit: a claim now would wait its turn."""
        record = self._records.get(client_id)
        return record is not None and record.in_transit

    def owned_by(self, worker: int) -> list[str]:
        """The ids `worker` owns (granted or settled)."""
        return [client_id for client_id, record in self._records.items() if record.owner == worker]

    def claim(self, client_id: str, claimant: int) -> list[Granted]:
        """`claimant` wants the id: granted now, or once the grants before it settle."""
        record = self._records.get(client_id)
        if record is None:
            record = self._records[client_id] = _Record()
        if record.in_transit:
            if claimant not in record.waiting:
                record.waiting += (claimant,)
            return []
        return [self._grant(client_id, record, claimant)]

    def settled(self, client_id: str, owner: int) -> list[Granted]:
        """`owner` holds the session now: the next waiting claim, if any, is granted."""
        record = self._records.get(client_id)
        if record is None or record.owner != owner or not record.in_transit:
            logger.debug("stale settle of %r by worker %d: ignored", client_id, owner)
            return []
        record.in_transit = False
        record.previous = None
        return self._next(client_id, record)

    def release(self, client_id: str, owner: int) -> list[Granted]:
        """`owner`'s session for the id ended (or its connection failed before settling)."""
        record = self._records.get(client_id)
        if record is None:
            return []
        if record.owner != owner:
            # A previous owner releasing after the id moved on: nothing to do, but a grant
            # in transit declined later does not give the id back to it.
            if record.previous == owner:
                record.previous = None
            return []
        record.owner = None
        record.in_transit = False
        record.previous = None
        return self._next(client_id, record)

    def declined(self, client_id: str, claimant: int) -> list[Granted]:
        """`claimant`, granted the id, refused its CONNECT without taking the session from
        the previous owner: the id is that owner's again."""
        record = self._records.get(client_id)
        if record is None or record.owner != claimant or not record.in_transit:
            logger.debug("stale decline of %r by worker %d: ignored", client_id, claimant)
            return []
        record.owner, record.previous = record.previous, None
        record.in_transit = False
        return self._next(client_id, record)

    def worker_down(self, worker: int) -> list[Granted]:
        """A worker died: it owns nothing any more, and its waiting claims are void. Its
        persistent sessions are resumed from the store by whoever claims them next."""
        granted: list[Granted] = []
        for client_id, record in list(self._records.items()):
            if worker in record.waiting:
                record.waiting = tuple(w for w in record.waiting if w != worker)
            if record.previous == worker:
                record.previous = None
            if record.owner == worker:
                record.owner = None
                record.in_transit = False
                granted += self._next(client_id, record)
            elif record.owner is None and not record.waiting:
                del self._records[client_id]
        return granted

    def adopt(self, client_id: str, owner: int) -> bool:
        """This arbiter's worker restarted: a live worker tells it that it owns `client_id`.
        False (and logged) if another owner is already recorded; the first one stays."""
        record = self._records.get(client_id)
        if record is None:
            self._records[client_id] = _Record(owner=owner)
            return True
        if record.owner in (None, owner):
            record.owner = owner
            return True
        logger.warning(
            "workers %d and %d both say they own client id %r; keeping %d: restart worker %d "
            "if its session for that id is stuck",
            record.owner,
            owner,
            client_id,
            record.owner,
            owner,
        )
        return False

    def _grant(self, client_id: str, record: _Record, claimant: int) -> Granted:
        previous = record.previous = record.owner
        record.owner = claimant
        record.in_transit = True
        return Granted(client_id, claimant, previous)

    def _next(self, client_id: str, record: _Record) -> list[Granted]:
        if record.waiting:
            first, record.waiting = record.waiting[0], record.waiting[1:]
            return [self._grant(client_id, record, first)]
        if record.owner is None:
            del self._records[client_id]
        return []
