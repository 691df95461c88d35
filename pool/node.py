"""A pool worker's side of the fabric: what it tells the other workers and what it does with
what they tell it (docs/pool.md).

`PoolNode` is the `FabricHandler` of this worker's `Fabric` and holds the pool's shared
state as this worker sees it:
- routes: the route writer (`actors.router_actor.RouteWriter`) reports each local route
  that appears or goes (`route_changed`), a share group's members and persistent sessions'
  routes included; `routes` (pool.routes) announces them once per loop turn, replicates
  the other workers' (`shares` is the dispatcher's view of their share groups) and runs
  the `RoutesSync` rounds of `when_routes_known`.
- publishes: `add`/`add_share`/`flush` (the dispatcher's `RemoteForwarder`) send each
  publish batch once to every worker with a matching filter or picked for a share group
  (`ForwardOutbox`); a `Forward`/`ForwardShared` received is dispatched to local
  subscribers and members only, a `Retained` goes into this worker's replica of the
  retained index.
- client ids: this worker runs the `ClientIdArbiter` of the ids homed here. `claim` and
  `hand_over` are the two waits of a CONNECT (pool.registry): the home's grant (a
  callback, so a CONNECT waiting for it holds no greenlet), then the previous owner's
  `HandedOver`. A peer that goes down fails the waits on it, so a
  CONNECT never hangs on a dead worker. Flapping detection counts the CONNECTs of the ids
  homed here (`Connecting`, pool.admission), and a claim for a banned id is
  answered `ClaimRefused`.
- refused CONNECTs: the addresses homed here are counted here (`auth_failures`,
  pool.auth_failures), the others at their homes.
- store faults: this worker's store writer's failing / recovering is broadcast
  (`StoreFailing`), and the filters of its persistent sessions' subscriptions are
  replicated like routes (`DurableRoutes`, `routes.durable`), so a publisher's worker
  refuses durable publishes while any worker's commits fail, for persistent subscribers on
  any worker (docs/overload.md); the same replica names the workers whose commits a QoS
  1/2 batch's acknowledgement waits for.
- connections: each listener's open connections here are reported to the others
  (`ListenerCounts`, `connection_counts`: pool.listener_counts), so a listener's
  `max_connections` holds pool-wide.
- operations: `ops` (`pool.ops.PoolOps`) gathers the other workers' parts of the
  admin API's tables and figures, and replicates bans.
- hosting: when a peer dies, this worker re-hosts the persistent sessions homed here that
  the dead worker owned (loaded from the store), so they keep queueing while offline.
- moves: a session handed over to another worker forwards what still reaches it there,
  and one arriving here holds its direct deliveries until that forwarding ends
  (`SessionMoves`, pool.session_moves).

Everything runs on this worker's gevent loop; frames to this worker itself (a client id
homed here) are handled in a later loop callback, like a peer's, except the client-id
ownership frames: the arbiter here handles those at once, in the order they are sent, so a
CONNECT whose id is homed here is granted its id without waiting for a loop turn
(`claim_now`), and no ownership frame to itself can overtake an earlier one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from actors.context import BrokerContext
from actors.messages import HandOff, StoreRetained
from actors.runtime import tell_if_alive
from core.auth_failures import AuthFailureDelays
from core.flow import Gate
from core.message import Message
from core.session_state import Delivery
from core.share_origin import ShareOrigin
from pool.ack_waits import AckWaits
from pool.auth_failures import PoolAuthFailures
from pool.fabric import Fabric
from pool.flow_control import Publishers, RemoteGates
from pool.frames.admission import (
    AuthFailed,
    AuthFailing,
    AuthFailures,
    AuthSucceeded,
    Connecting,
    ListenerCounts,
)
from pool.frames.codec import Frame
from pool.frames.flow import FlowHold, FlowRelease
from pool.frames.forwarding import (
    CommitSync,
    Committed,
    Forward,
    ForwardShared,
    Retained,
    Unconfirmed,
)
from pool.frames.moves import (
    Adopted,
    MovedDeliveries,
    MoveEnded,
    MoveRoutesKnown,
    MovingOut,
    Orphans,
)
from pool.frames.operations import BanLifted, BanSet, BansSnapshot, OpsReply, OpsRequest
from pool.frames.ownership import (
    Claim,
    ClaimRefused,
    Declined,
    Granted,
    HandedOver,
    HandOver,
    Owned,
    Release,
    Settled,
)
from pool.frames.peers import Leaving
from pool.frames.store import StoreFailing
from pool.listener_counts import PoolConnectionCounts
from pool.ops import PoolOps
from pool.orphans import DurableSends, OrphanedMessages, Pick
from pool.outbox import ForwardOutbox
from pool.ownership import ClientIdArbiter, home_of
from pool.routes import ROUTE_FRAMES, PoolRoutes
from pool.session_adoptions import SessionAdoptions
from pool.session_moves import SessionMoves
from router.fan_out import FanOut
from router.share_replica import stand_in

if TYPE_CHECKING:  # gevent's loop and watcher types exist in its stubs only
    from gevent._types import _TimerWatcher

logger = logging.getLogger(__name__)

# Client-id ownership: handled at once when this worker sends them to itself (see above).
_OWNERSHIP_FRAMES = frozenset((Claim, Granted, ClaimRefused, Settled, Release, Declined))

CLAIM_TIMEOUT = 5.0  # seconds a CONNECT waits for its home's grant before going on alone
CLAIM_SWEEP = 1.0  # seconds between two looks for claims whose home did not answer in time

ClaimAnswer = Granted | ClaimRefused | None  # None: no answer; the claimant goes on alone
HAND_OVER_TIMEOUT = 5.0  # seconds it waits for the previous owner to give the session up


ORPHAN_TIMEOUT = 30.0  # seconds acks wait at most for a dead worker's sessions to be adopted
RESOLVED_GRACE = 10.0  # seconds what was kept serves a late adopter after that


_PEER_DOWN = object()  # a hand-over's answer when the previous owner went down


class PoolNode:
    """This worker's view of the pool; see the module docstring."""

    def __init__(self, worker: int, workers: int, context: BrokerContext) -> None:
        self.worker = worker
        self.workers = workers
        self._context = context
        self.fabric: Fabric | None = None
        self.arbiter = ClientIdArbiter()
        self._loop = gevent.get_hub().loop
        self.routes = PoolRoutes(self.send, self.broadcast, self._peers, self._loop.run_callback)
        self.shares = self.routes.shares  # the dispatcher's (actors.dispatch.RemoteForwarder)
        self._remote = self.routes.remote  # read for every message published (`add`)
        self._durable = self.routes.durable
        self._outbox = ForwardOutbox()
        # Flow control across workers (pool.flow_control): this worker's publishers that
        # others hold, and the others' publishers as the sessions here hold them.
        self.publishers = Publishers()
        self.remote_gates = RemoteGates(self.send)
        self._durable_to: set[int] = set()  # workers sent QoS 1/2 messages this batch
        self._durable_sent: dict[int, list[Message]] = {}  # those messages, per worker
        self._picks_sent: dict[int, list[Pick]] = {}  # QoS 1/2 share picks this batch
        # A dead worker's persistent sessions (docs/pool.md "A worker dies"): what was sent
        # to each worker for them until it confirms the commit, what is kept for a dead
        # worker's sessions until every worker has adopted its part, and the dead workers
        # this batch's acks wait for.
        self._sends = DurableSends()
        self.orphans = OrphanedMessages()
        self._orphan_waits: list[int] = []
        self._orphan_sweep: gevent.Greenlet[[], None] | None = None
        self.adoptions = SessionAdoptions(
            worker,
            self._ask_for_orphans,
            self.when_routes_known,
            self._deliver_orphans,
            self._on_hand_over,
        )
        self._commit_token = 0
        self._acks = AckWaits()  # publishers' acks waiting for commits and adoptions
        # This worker's claims waiting for their home's answer: client id -> (answer, when
        # it stops waiting); looked at every CLAIM_SWEEP seconds while there are any.
        self._claims: dict[str, tuple[Callable[[ClaimAnswer], object], float]] = {}
        self._claim_sweep: _TimerWatcher | None = None
        self._hand_overs: dict[tuple[str, int], gevent.event.AsyncResult[object]] = {}
        self._leaving: set[int] = set()  # peers that said they are shutting down
        self.owned_reported: set[int] = set()  # peers whose `Owned` arrived (start-up)
        self._early_claims: list[Claim] | None = []  # held until `open_for_claims`
        # Set by the pool worker: re-host the persistent sessions homed here that a dead
        # worker owned (it then adopts them: `adoptions`).
        self.rehost: Callable[[int, list[str]], None] | None = None
        # In a cluster: what another node gave a worker of this pool for the sessions the
        # node restored (`Unconfirmed`, relayed by that worker), to this worker's.
        self.unconfirmed: Callable[[tuple[Message, ...]], None] | None = None
        # Told of each peer linked (True) or lost (False; not one that said it is leaving):
        # the bridges' placement (pool.worker).
        self.peers_changed: Callable[[], None] | None = None
        # The listeners' counts against pool-wide max_connections (the pool worker gives it
        # the listeners once they exist).
        self.connection_counts = PoolConnectionCounts(self._loop, self.broadcast, self.send)
        self.ops = PoolOps(worker, workers, self.send, self.broadcast)
        overload = context.config.overload
        self.auth_failures = PoolAuthFailures(
            AuthFailureDelays(overload.auth_failure_delay, overload.max_auth_failure_delay),
            worker,
            workers,
            gevent.spawn_later,
        )
        self.auth_failures.send = self.send
        self.auth_failures.broadcast = self.broadcast
        self.moves = SessionMoves(self.send, self.when_routes_known, self._on_hand_over)
        self._handlers = self._frame_handlers()

    # ----- routes (pool.routes; the router's actors.router_actor.RouteReplication) -------

    def route_changed(self, topic_filter: str, added: bool) -> None:
        self.routes.route_changed(topic_filter, added)

    def durable_route_changed(self, topic_filter: str, added: bool) -> None:
        self.routes.durable_route_changed(topic_filter, added)

    def when_routes_known(self, then: Callable[[], object]) -> None:
        self.routes.when_routes_known(then)

    def needs_store(self, topic: str) -> bool:
        return self.routes.needs_store(topic)

    # ----- publishes (the dispatcher's RemoteForwarder) ----------------------------------

    def add(self, message: Message) -> bool:
        topic = message.topic
        kept = False
        if self.orphans.active and message.qos:  # a dead worker's sessions want it: kept
            dead = self.orphans.keep(message)
            if dead:
                self._orphan_waits += dead
                kept = True
        workers = self._remote.workers_cached(topic)
        if not workers:
            return kept
        if message.qos:
            # The acks wait for the commits of the workers that store the message: those
            # with a persistent session subscribed (a clean one's worker writes nothing).
            # What each is sent is kept until it confirms, in case it dies first.
            durable = self._durable.workers_cached(topic)
            if durable:
                self._durable_to.update(durable)
                sent = self._durable_sent
                for worker in durable:
                    messages = sent.get(worker)
                    if messages is None:
                        sent[worker] = [message]
                    else:
                        messages.append(message)
        self._outbox.add(workers, message)
        return True

    def add_share(self, worker: int, message: Message, share: ShareOrigin) -> None:
        if message.qos:
            # Kept until `worker` confirms it: if it dies first, the group picks again.
            self._durable_to.add(worker)
            picks = self._picks_sent.get(worker)
            if picks is None:
                self._picks_sent[worker] = [(message, share)]
            else:
                picks.append((message, share))
        self._outbox.add_share(worker, message, share)

    def flush(
        self,
        retained: list[Message],
        on_durable: Callable[[], object] | None,
        publisher: Gate | None = None,
    ) -> Callable[[], object] | None:
        fabric = self.fabric
        durable_to, self._durable_to = self._durable_to, set()
        sent = self._durable_sent
        if sent:
            self._durable_sent = {}
        picks = self._picks_sent
        if picks:
            self._picks_sent = {}
        waits = self._orphan_waits
        if waits:
            self._orphan_waits = []
        frames: Sequence[tuple[int, Frame]] = ()
        if self._outbox:
            flow_id = 0 if publisher is None else self.publishers.id_of(publisher)
            frames = self._outbox.frames(flow_id)
        if fabric is None:
            return None
        for worker, frame in frames:
            fabric.send(worker, frame)
        if retained:
            fabric.broadcast(Retained(tuple(retained)))
        if on_durable is None or not (durable_to or waits):
            if picks:  # picked again (no acknowledgement waits), kept all the same
                self._keep_until_committed(fabric, set(picks), {}, picks)
            return None
        # The publisher's acks wait for the receiving workers' commits of what they
        # received (docs/pool.md): write-ahead holds across workers.
        return self._wait_for_commits(
            fabric, durable_to, sent, picks, waits=waits, on_durable=on_durable
        )

    def _keep_until_committed(
        self,
        fabric: Fabric,
        workers: set[int],
        sent: dict[int, list[Message]],
        picks: dict[int, list[Pick]],
    ) -> tuple[int, list[int]]:
        """Ask each of `workers` to confirm its commit of what it got (`CommitSync`), and
        keep what it was sent (`sent`, `picks`) until it does: the token and the workers
        asked (one not linked is gone, and asked nothing)."""
        self._commit_token += 1
        token = self._commit_token
        linked: list[int] = []
        for worker in workers:
            if fabric.send(worker, CommitSync(token)):
                linked.append(worker)
                messages, its_picks = sent.get(worker, []), picks.get(worker, [])
                if messages or its_picks:
                    self._sends.sent(worker, token, messages, its_picks)
        return token, linked

    def _wait_for_commits(
        self,
        fabric: Fabric,
        durable_to: set[int],
        sent: dict[int, list[Message]],
        picks: dict[int, list[Pick]],
        *,
        waits: list[int],
        on_durable: Callable[[], object],
    ) -> Callable[[], object]:
        """`on_durable` once this worker's commit (the callback returned), the commits of
        `durable_to` (sent `sent` and `picks`) and the adoption of the dead workers `waits`
        are in."""
        token, linked = self._keep_until_committed(fabric, durable_to, sent, picks)
        orphans = dict.fromkeys(waits)  # each dead worker once, in order
        for dead in orphans:
            self.orphans.wait(dead, token)
        return self._acks.wait(token, linked, on_durable, orphans)

    def _committed(self, worker: int, token: int) -> None:
        """`worker` committed what it got before `CommitSync(token)`."""
        self._sends.confirmed(worker, token)
        self._acks.committed(worker, (token,))

    # ----- a dead worker's persistent sessions (docs/pool.md "A worker dies") -------------

    def _orphaned(self, worker: int) -> None:
        """`worker` died: keep what it may not have stored for its persistent sessions, and
        every later message for them, until every worker has adopted its part of them; the
        acks that waited on its commits wait for that instead."""
        tokens, lost, picks = self._sends.lost(worker)
        if picks:
            self._loop.run_callback(self._pick_again, worker, picks)
        filters = self._durable.filters_of(worker)
        if not filters and not lost:
            return
        waiting = self._acks.orphaned(worker, tokens)
        self.orphans.died(
            worker,
            filters,
            lost=lost,
            tokens=waiting,
            workers=range(self.workers),
            now=self._loop.now(),
        )
        logger.warning(
            "pool: worker %d died with persistent sessions subscribed to %d filters; %d "
            "messages sent to it are not known to be stored: they and what is published to "
            "those sessions are kept here, acknowledgements waiting, until every worker "
            "hosts its part of them again",
            worker,
            len(filters),
            len(lost),
        )
        if self._orphan_sweep is None:
            self._orphan_sweep = gevent.spawn_later(ORPHAN_TIMEOUT, self._sweep_orphans)

    def _pick_again(self, dead: int, picks: list[Pick]) -> None:
        """QoS 1/2 messages share groups picked members of `dead` for, which it did not
        confirm before it died (once its routes and members are dropped): to other members
        of their groups (never `dead`'s: its stand-in joins each one's `tried`), or dropped
        and logged if none is left. At least once: a pick it delivered just before it died
        reaches a second member."""
        deliveries = [
            Delivery(message, message.qos, message.retain, share=share) for message, share in picks
        ]
        left = self._context.dispatcher.share_again(deliveries, stand_in(dead))
        logger.warning(
            "pool: worker %d died with %d messages picked for its members of share groups "
            "not known to be delivered; %d picked again among the groups' other members, "
            "%d dropped (no other member left)",
            dead,
            len(picks),
            len(picks) - len(left),
            len(left),
        )

    def _ask_for_orphans(self, dead: int, round_: int) -> None:
        """This worker adopted sessions of `dead` (in `round_`): ask every worker, itself
        included, for what it kept for them."""
        if self.fabric is not None:
            self.fabric.broadcast(Adopted(dead, round_))
        self._on_adopted(self.worker, Adopted(dead, round_))

    def _on_adopted(self, adopter: int, frame: Adopted) -> None:
        """`adopter` hosts a part of `frame.dead`'s sessions: give it what was kept for
        them (always answered, if only with nothing), and once it has committed that, it is
        done here."""
        dead = frame.dead
        messages = self.orphans.adopted(dead, adopter)
        answer = Orphans(messages or (), dead, frame.round)
        if adopter == self.worker:
            self.adoptions.orphans(adopter, answer)
            if messages is not None:
                self._context.persistence.submit((), lambda: self._orphan_committed(dead, adopter))
            return
        self.send(adopter, answer)
        if messages is None:
            return
        self._commit_token += 1
        token = self._commit_token
        # Nothing to commit here: only the adopter's commit is waited for.
        self._acks.wait(token, (adopter,), lambda: self._orphan_committed(dead, adopter))()
        if not self.send(adopter, CommitSync(token)):
            self._committed(adopter, token)

    def _orphan_committed(self, dead: int, adopter: int) -> None:
        tokens = self.orphans.committed(dead, adopter, self._loop.now())
        if tokens is not None:
            logger.info(
                "pool: every worker hosts the persistent sessions of worker %d again; %d "
                "acknowledgements that waited for that go",
                dead,
                len(tokens),
            )
            self._acks.adopted(dead, tokens)

    def _sweep_orphans(self) -> None:
        """Acks wait for a dead worker's sessions `ORPHAN_TIMEOUT` at most."""
        self._orphan_sweep = None
        expired = self.orphans.expired(self._loop.now(), ORPHAN_TIMEOUT, RESOLVED_GRACE)
        for dead, orphan in expired:
            logger.error(
                "pool: the persistent sessions of worker %d were not all hosted again "
                "within %.0f s (no answer from workers %s); %d acknowledgements go and %d "
                "messages kept for those sessions may be lost: see the supervisor's log "
                "for why the workers did not start",
                dead,
                ORPHAN_TIMEOUT,
                sorted(orphan.waiting | orphan.serving),
                len(orphan.acks),
                len(orphan.messages),
            )
            self._acks.adopted(dead, orphan.acks)
        if self.orphans.active or self.orphans.resolved:
            self._orphan_sweep = gevent.spawn_later(1.0, self._sweep_orphans)

    def _deliver_orphans(self, messages: tuple[Message, ...], plans: FanOut) -> None:
        self._context.dispatcher.deliver_orphans(messages, plans)

    # ----- client ids ---------------------------------------------------------------------

    def claim_now(self, client_id: str) -> Granted | ClaimRefused | None:
        """The arbiter's answer to this worker's claim of an id homed here, when it answers
        at once: the grant, or the refusal of a banned id. None, and nothing claimed, when
        the claim has to wait (`claim`): the id's home is another worker, start-up holds
        claims back, or an earlier grant of the id has not settled."""
        if (
            self._early_claims is not None
            or home_of(client_id, self.workers) != self.worker
            or self.arbiter.granting(client_id)
        ):
            return None
        refused = self._banned(client_id)
        if refused is not None:
            return ClaimRefused(client_id, refused)
        (granted,) = self.arbiter.claim(client_id, self.worker)
        return granted

    def claim(self, client_id: str, answer: Callable[[ClaimAnswer], object]) -> None:
        """Ask the id's home for it; `answer` hears the grant, or its refusal (the id is
        banned), or None: the home did not answer within CLAIM_TIMEOUT, and the caller goes
        on as the only claimant. A home that is down (restarting) is asked again when it
        links: it restores the sessions homed at it first, so a session its earlier life
        hosted is adopted there, with what the others kept for it, and handed over
        (docs/pool.md "A worker dies"). Never blocks: `answer` is called from the frame
        that answers (at once, if the home is this worker and grants at once). One claim
        per id at a time (the registry takes turns)."""
        self._claims[client_id] = (answer, self._loop.now() + CLAIM_TIMEOUT)
        self.send(home_of(client_id, self.workers), Claim(client_id, self.worker))
        if self._claim_sweep is None and client_id in self._claims:
            self._claim_sweep = self._loop.timer(CLAIM_SWEEP, CLAIM_SWEEP)
            self._claim_sweep.start(self._sweep_claims)

    def _answer_claim(self, client_id: str, answer: ClaimAnswer) -> bool:
        """Give a claim of this worker its answer; False if none waits (it timed out)."""
        waiting = self._claims.pop(client_id, None)
        if waiting is None:
            return False
        waiting[0](answer)
        return True

    def _sweep_claims(self) -> None:
        now = self._loop.now()
        for client_id in [c for c, (_answer, until) in self._claims.items() if until <= now]:
            logger.warning(
                "client id %r: its home worker %d did not grant it within %.0f s; taking it "
                "without (two sessions for the id may exist until one ends)",
                client_id,
                home_of(client_id, self.workers),
                CLAIM_TIMEOUT,
            )
            self._answer_claim(client_id, None)
        if not self._claims and self._claim_sweep is not None:
            self._claim_sweep.stop()
            self._claim_sweep = None

    def settle(self, client_id: str, has_session: bool) -> None:
        """This worker holds the id's session now (or, without one, gives the id back)."""
        home = home_of(client_id, self.workers)
        frame = Settled(client_id, self.worker) if has_session else None
        self.send(home, frame or Release(client_id, self.worker))

    def release(self, client_id: str) -> None:
        """This worker's session for the id ended."""
        self.send(home_of(client_id, self.workers), Release(client_id, self.worker))

    def decline(self, client_id: str) -> None:
        """This worker, granted the id, refused the CONNECT before taking the session from
        the previous owner: the id goes back to that owner."""
        self.send(home_of(client_id, self.workers), Declined(client_id, self.worker))

    def hand_over(self, previous: int, client_id: str, discard: bool) -> bool:
        """Ask `previous` to give the session of `client_id` up, and wait until it has (or
        it is down or silent: then what the store has is what there is). False if
        `previous` is down (it died, or went down while this waited): the session it hosted
        is then adopted from it where it is loaded (docs/pool.md "A worker dies")."""
        key = (client_id, previous)
        result: gevent.event.AsyncResult[object] = gevent.event.AsyncResult()
        self._hand_overs[key] = result
        try:
            if not self.send(previous, HandOver(client_id, self.worker, int(discard))):
                return False
            return result.get(timeout=HAND_OVER_TIMEOUT) is not _PEER_DOWN
        except gevent.Timeout:
            logger.warning(
                "client id %r: worker %d did not hand its session over within %.0f s; "
                "resuming what the store has",
                client_id,
                previous,
                HAND_OVER_TIMEOUT,
            )
            return True
        finally:
            del self._hand_overs[key]

    def open_for_claims(self) -> None:
        """Start-up is over (the sessions homed here are restored): claims held back are
        answered now."""
        held, self._early_claims = self._early_claims or [], None
        for frame in held:
            self._on_ownership(frame.claimant, frame)

    def _on_ownership(self, _worker: int, frame: Frame) -> None:
        if self._early_claims is not None and type(frame) is Claim:
            self._early_claims.append(frame)
            return
        arbiter = self.arbiter
        if type(frame) is Claim:
            refused = self._banned(frame.client_id)
            if refused is not None:
                self.send(frame.claimant, ClaimRefused(frame.client_id, refused))
                return
            grants = arbiter.claim(frame.client_id, frame.claimant)
        elif type(frame) is Settled:
            grants = arbiter.settled(frame.client_id, frame.owner)
        elif type(frame) is Release:
            grants = arbiter.release(frame.client_id, frame.owner)
        elif type(frame) is Declined:
            grants = arbiter.declined(frame.client_id, frame.claimant)
        else:
            return
        for granted in grants:
            self.send(granted.claimant, granted)

    def _banned(self, client_id: str) -> str | None:
        """Why a claim for `client_id` is refused: the id is banned (a ban flapping
        detection here made for the CONNECT that claims it, say); None if it is not."""
        admission = self._context.admission
        if admission is None or not admission.table:
            return None
        return admission.client_id_refusal(client_id, time.time())

    def _on_connecting(self, frame: Connecting) -> None:
        """A CONNECT of an id homed here reached admission on another worker: flapping
        detection counts it here (pool.admission)."""
        admission = self._context.admission
        if admission is not None:
            admission.count(frame.client_id, time.time())

    def _on_claim_refused(self, refused: ClaimRefused) -> None:
        # If its CONNECT gave up waiting, nothing was granted: nothing to do.
        self._answer_claim(refused.client_id, refused)

    def _on_granted(self, granted: Granted) -> None:
        if not self._answer_claim(granted.client_id, granted):
            # Its CONNECT gave up waiting: give the id back, or it stays blocked.
            self.release(granted.client_id)

    def _on_hand_over(self, frame: HandOver) -> None:
        """A claimant took an id this worker owned: give the session up, then answer. A
        session still moving in here is given up once its move has ended."""
        if self.moves.defer_hand_over(frame) or self.adoptions.defer_hand_over(frame):
            return
        registry = self._context.registry
        session = registry.sessions.get(frame.client_id)

        def answer() -> None:
            self.send(frame.claimant, HandedOver(frame.client_id))

        move = self.moves.move_out(frame.client_id, frame.claimant, session)
        if session is None or not tell_if_alive(session, HandOff(bool(frame.clean), answer, move)):
            # No session here; what this worker still had to write for the id (a session
            # that ended a moment ago deleted itself) is committed before the answer.
            self._context.persistence.submit((), answer)

    # ----- FabricHandler ------------------------------------------------------------------

    def peer_up(self, worker: int, epoch: int) -> None:
        assert self.fabric is not None
        logger.info("pool: worker %d is linked (epoch %d)", worker, epoch)
        self.routes.peer_up(worker)
        if self._context.persistence.failing_here:
            self.fabric.send(worker, StoreFailing(1))
        for client_id in [c for c in self._claims if home_of(c, self.workers) == worker]:
            self.fabric.send(worker, Claim(client_id, self.worker))  # its answer was lost
        self.auth_failures.peer_up(worker)
        self.connection_counts.peer_up(worker)
        self.ops.peer_up(worker)  # bans: before `Owned`, which ends a starting peer's wait
        registry = self._context.registry
        owned = tuple(
            client_id
            for client_id in registry.sessions
            if home_of(client_id, self.workers) == worker
        )
        self.fabric.send(worker, Owned(self.worker, owned))
        if self.peers_changed is not None:
            self.peers_changed()

    def leave(self) -> None:
        """This worker is shutting down: tell the others, so they take its going as normal."""
        if self.fabric is not None:
            self.fabric.broadcast(Leaving(self.worker))

    def peer_down(self, worker: int) -> None:
        for dead, tokens in self.orphans.gone(worker, self._loop.now()):
            logger.warning(
                "pool: worker %d went down before it adopted its part of worker %d's "
                "persistent sessions; %d acknowledgements waiting for that go",
                worker,
                dead,
                len(tokens),
            )
            self._acks.adopted(dead, tokens)
        left = worker in self._leaving
        if left:
            self._leaving.discard(worker)
            logger.info("pool: worker %d stopped; dropping its routes", worker)
            self._sends.lost(worker)  # it committed everything before it left
        else:
            logger.warning("pool: lost the link to worker %d; dropping its routes", worker)
            self._orphaned(worker)
        self.adoptions.peer_down(worker)
        self.routes.peer_down(worker)
        self._context.persistence.store_failing_at(worker, False)
        self.publishers.peer_down(worker)  # a dead worker leaves no publisher paused
        self.remote_gates.peer_down(worker)
        self.owned_reported.discard(worker)
        self.ops.peer_down(worker)
        self.auth_failures.peer_down(worker, self._loop.now())
        self.connection_counts.peer_down(worker)
        self._acks.peer_gone(worker)  # what it had not committed died with it
        self.moves.peer_down(worker)
        for (_client_id, previous), result in self._hand_overs.items():
            if previous == worker and not result.ready():
                result.set(_PEER_DOWN)
        orphans = self.arbiter.owned_by(worker)
        for granted in self.arbiter.worker_down(worker):
            self.send(granted.claimant, granted)
        if self.rehost is not None:
            self.rehost(worker, [c for c in orphans if self.arbiter.owner(c) is None])
        if self.peers_changed is not None and not left:
            self.peers_changed()

    def frames_received(self, worker: int, frames: list[Frame]) -> None:
        for frame in frames:
            self._on_frame(worker, frame)

    def _on_frame(self, worker: int, frame: Frame) -> None:
        handler = self._handlers.get(type(frame))
        if handler is not None:
            handler(worker, frame)  # else a frame only the link reads (Hello): nothing here

    def relay_unconfirmed(self, messages: tuple[Message, ...]) -> None:
        """In a cluster: what another node gave this worker for the node's restored
        sessions, to the other workers, whose restored sessions it may be for."""
        self.broadcast(Unconfirmed(messages, 0))  # the epoch is the cluster's, unused here

    def _on_unconfirmed(self, _worker: int, frame: Unconfirmed) -> None:
        if self.unconfirmed is not None:
            self.unconfirmed(frame.messages)

    def _frame_handlers(self) -> dict[type[Frame], Callable[[int, Any], None]]:
        """Which method handles each kind of frame (one lookup per frame: a chain of
        isinstance tests cost a claim's frames microseconds each in a connect storm)."""
        handlers: dict[type[Frame], Callable[[int, Any], None]] = {
            Forward: self._on_forward,
            ForwardShared: self._on_forward,
            FlowHold: self.publishers.hold,
            FlowRelease: self.publishers.release,
            CommitSync: self._on_commit_sync,
            Adopted: self._on_adopted,
            Unconfirmed: self._on_unconfirmed,
            Orphans: self.adoptions.orphans,
            Committed: lambda worker, frame: self._committed(worker, frame.token),
            Retained: lambda _worker, frame: self._context.retainer.tell(
                StoreRetained(list(frame.messages))
            ),
            Claim: self._on_ownership,
            Settled: self._on_ownership,
            Release: self._on_ownership,
            Declined: self._on_ownership,
            Granted: lambda _worker, frame: self._on_granted(frame),
            ClaimRefused: lambda _worker, frame: self._on_claim_refused(frame),
            Connecting: lambda _worker, frame: self._on_connecting(frame),
            HandOver: lambda _worker, frame: self._on_hand_over(frame),
            HandedOver: self._on_handed_over,
            Leaving: lambda _worker, frame: self._leaving.add(frame.worker),
            StoreFailing: lambda worker, frame: self._context.persistence.store_failing_at(
                worker, bool(frame.failing)
            ),
            Owned: self._on_owned,
            ListenerCounts: self.connection_counts.received,
        }
        for route_frame in ROUTE_FRAMES:
            handlers[route_frame] = self.routes.frame_received
        for ops_frame in (OpsRequest, OpsReply, BanSet, BanLifted, BansSnapshot):
            handlers[ops_frame] = self.ops.frame_received
        for move_frame in (MovedDeliveries, MovingOut, MoveRoutesKnown, MoveEnded):
            handlers[move_frame] = self._on_move
        for auth_frame in (AuthFailed, AuthFailures, AuthFailing, AuthSucceeded):
            handlers[auth_frame] = self._on_auth_failures
        return handlers

    def _on_forward(self, worker: int, frame: Forward | ForwardShared) -> None:
        marks = frame.marks if isinstance(frame, ForwardShared) else None
        gate = self.remote_gates.gate(worker, frame.publisher) if frame.publisher else None
        self._context.dispatcher.publish_forwarded(frame.messages, marks, gate)

    def _on_commit_sync(self, worker: int, frame: CommitSync) -> None:
        token = frame.token
        self._context.persistence.submit((), lambda: self.send(worker, Committed(token)))

    def _on_auth_failures(
        self, worker: int, frame: AuthFailed | AuthFailures | AuthFailing | AuthSucceeded
    ) -> None:
        self.auth_failures.frame_received(worker, frame, self._loop.now())

    def _on_handed_over(self, worker: int, frame: HandedOver) -> None:
        result = self._hand_overs.get((frame.client_id, worker))
        if result is not None and not result.ready():
            result.set(None)

    def _on_owned(self, worker: int, frame: Owned) -> None:
        for client_id in frame.client_ids:
            self.arbiter.adopt(client_id, frame.owner)
        self.owned_reported.add(worker)

    def _on_move(
        self, worker: int, frame: MovedDeliveries | MovingOut | MoveRoutesKnown | MoveEnded
    ) -> None:
        moves = self.moves
        if isinstance(frame, MovedDeliveries):
            moves.forwarded(worker, frame)
        elif isinstance(frame, MovingOut):
            moves.moving_in(worker, frame)
        elif isinstance(frame, MoveRoutesKnown):
            moves.claimant_routes_known(worker, frame.client_id)
        else:
            moves.ended(worker, frame)

    def _peers(self) -> set[int]:
        return self.fabric.peers if self.fabric is not None else set()

    def broadcast(self, frame: Frame) -> None:
        if self.fabric is not None:
            self.fabric.broadcast(frame)

    def send(self, worker: int, frame: Frame) -> bool:
        """Send `frame` to `worker` (to this worker: handled in a later loop callback).
        False if that worker is not linked now."""
        if worker == self.worker:
            if type(frame) in _OWNERSHIP_FRAMES:
                self._on_frame(worker, frame)
            else:
                self._loop.run_callback(self._on_frame, worker, frame)
            return True
        return self.fabric is not None and self.fabric.send(worker, frame)
