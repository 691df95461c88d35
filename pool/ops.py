"""The pool's operations surface: what the admin API, `/metrics` and `$SYS` of the worker
that serves them ask the other workers, and the bans every worker keeps (docs/pool.md).

- `gather(op, args)`: an `OpsRequest` to every other worker, whose `OpsReply` carries its
  rows (its clients, sessions, figures, or whether it kicked a client); the caller merges
  them with its own. A worker that is not linked, or does not answer within
  `GATHER_TIMEOUT`, is left out: the caller is told which (and a warning is logged), so an
  answer never hangs on a dead or stuck worker.
- answering: an `OpsRequest` from a peer runs `answer(op, args)` (set by the pool worker:
  `admin.tables.local_rows`) in a greenlet of its own, as a reload waits on the sessions;
  `answer_request` is that step, which the cluster's answer to another node uses too.
- bans: a ban added or lifted on this worker (the admin API, flapping detection) is
  broadcast (`BanSet`, `BanLifted`) and applied by every worker; a peer whose link comes
  (back) up gets a `BansSnapshot` of this worker's table and adds what it lacks. Only
  worker 0 keeps `bans.json` (`actors.admission`), from what it holds: the pool-wide table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gevent
import gevent.event

from actors.admission import Admission
from core.bans import Ban, BanError, BanKind, ban_from_dict
from pool.frames.codec import Frame
from pool.frames.operations import BanLifted, BanSet, BansSnapshot, OpsReply, OpsRequest

logger = logging.getLogger(__name__)

GATHER_TIMEOUT = 2.0  # seconds the admin API waits for the other workers' parts

Answer = Callable[[str, dict[str, Any]], list[dict[str, Any]]]


def answer_request(
    answer: Answer | None,
    request: OpsRequest,
    reply: Callable[[OpsReply], object],
    *,
    scope: str,
    asker: str,
    refusal: str | None = None,
) -> None:
    """Reply to `request` from `asker` (`worker 1`, `peer 3`) with the rows of `answer(op,
    args)`; with no rows if `refusal` says why `asker` may not ask this (the cluster's check,
    `cluster.ops`), if this worker has no `answer` yet, or if it fails (a broker bug). Each
    of those is logged, prefixed with `scope` (`pool`, `cluster`). The caller spawns it in a
    greenlet of its own, so a slow answer holds up no frame."""
    rows: list[dict[str, Any]] = []
    if refusal is not None:
        logger.warning("%s: %s asked %r, %s", scope, asker, request.op, refusal)
    elif answer is None:
        logger.warning("%s: %s asked %r before this worker could answer", scope, asker, request.op)
    else:
        try:
            rows = answer(request.op, request.args)
        except Exception:
            logger.exception(
                "%s: answering %r for %s failed (a broker bug)", scope, request.op, asker
            )
    reply(OpsReply(request.token, tuple(rows)))


class Gathering:
    """One gathering: the workers still to answer, and what the others answered (the
    pool's `gather`, and the cluster's over its peers, `cluster.ops`)."""

    __slots__ = ("done", "remaining", "rows")

    def __init__(self, remaining: set[int]) -> None:
        self.remaining = remaining
        self.rows: dict[int, list[dict[str, Any]]] = {}
        self.done = gevent.event.Event()
        if not remaining:
            self.done.set()

    def answered(self, worker: int, rows: list[dict[str, Any]] | None) -> None:
        """`worker` answered `rows` (None: it went down, it is left out)."""
        if worker not in self.remaining:
            return
        self.remaining.discard(worker)
        if rows is not None:
            self.rows[worker] = rows
        if not self.remaining:
            self.done.set()


class PoolOps:
    """This worker's side of the operations surface; see the module docstring."""

    def __init__(
        self,
        worker: int,
        workers: int,
        send: Callable[[int, Frame], bool],
        broadcast: Callable[[Frame], None],
    ) -> None:
        self.worker = worker
        self.workers = workers
        self._send = send
        self._broadcast = broadcast
        self._token = 0
        self._gatherings: dict[int, Gathering] = {}
        self.answer: Answer | None = None  # set by the pool worker
        self.admission: Admission | None = None  # set by the pool worker, replicated here

    # ----- asking the other workers ---------------------------------------------------------

    def gather(
        self, op: str, args: dict[str, Any], timeout: float = GATHER_TIMEOUT
    ) -> tuple[dict[int, list[dict[str, Any]]], list[int]]:
        """Every other worker's rows for `op`, by worker, and the workers left out (not
        linked, down meanwhile, or silent for `timeout` seconds). Blocks the calling
        greenlet only."""
        self._token += 1
        token = self._token
        others = [w for w in range(self.workers) if w != self.worker]
        asked = {w for w in others if self._send(w, OpsRequest(token, op, args))}
        gathering = Gathering(asked)
        self._gatherings[token] = gathering
        try:
            gathering.done.wait(timeout)
        finally:
            del self._gatherings[token]
        missing = sorted(set(others) - set(gathering.rows))
        if missing:
            logger.warning(
                "pool: workers %s gave no answer to %r within %.0f s; the answer leaves them out",
                missing,
                op,
                timeout,
            )
        return gathering.rows, missing

    def peer_down(self, worker: int) -> None:
        for gathering in self._gatherings.values():
            gathering.answered(worker, None)

    def peer_up(self, worker: int) -> None:
        admission = self.admission
        if admission is not None:
            bans = tuple(ban.as_dict() for ban in admission.table.bans(time.time()))
            self._send(worker, BansSnapshot(bans))

    # ----- frames from the other workers -----------------------------------------------------

    def frame_received(self, worker: int, frame: Frame) -> None:
        if isinstance(frame, OpsRequest):
            reply = partial(self._send, worker)
            asker = f"worker {worker}"
            gevent.spawn(answer_request, self.answer, frame, reply, scope="pool", asker=asker)
        elif isinstance(frame, OpsReply):
            gathering = self._gatherings.get(frame.token)
            if gathering is not None:
                gathering.answered(worker, list(frame.rows))
        elif isinstance(frame, BanSet | BansSnapshot):
            for entry in (frame.ban,) if isinstance(frame, BanSet) else frame.bans:
                self._ban_from_peer(worker, entry)
        elif isinstance(frame, BanLifted) and self.admission is not None:
            try:
                self.admission.remove(BanKind(frame.kind), frame.value, replicate=False)
            except (ValueError, BanError) as error:
                logger.warning(
                    "pool: worker %d lifted a ban this worker cannot read: %s", worker, error
                )

    def _ban_from_peer(self, worker: int, entry: dict[str, Any]) -> None:
        admission = self.admission
        if admission is None:
            return
        try:
            ban = ban_from_dict(entry)
        except (BanError, TypeError) as error:
            logger.warning("pool: worker %d sent a ban that does not parse: %s", worker, error)
            return
        if admission.table.get(ban.kind, ban.value) != ban:
            admission.add(ban, replicate=False)

    # ----- bans made here --------------------------------------------------------------------

    def ban_added(self, ban: Ban) -> None:
        self._broadcast(BanSet(ban.as_dict()))

    def ban_removed(self, kind: BanKind, value: str) -> None:
        self._broadcast(BanLifted(kind.value, value))

    def settle(self) -> None:
        """Nothing to wait for here: the admin API's `sync` round waits for the workers."""
