"""Client-id ownership across the cluster: one node holds each client id's session, as a
JetStream key-value bucket records it (docs/cluster.md "One session per client id").

The bucket `mqtt-<cluster>-clients` maps each client id (base64url, as keys allow few
characters) to the node that last opened a session for it. A CONNECT that passed
authentication claims its id before the node's own registry (one process's, or the pool's
claim at the id's home worker) opens the session:
1. the claim is a create-if-absent, or a compare-and-set on the revision read (retried when
   another claim came between); the record's revision after it is this claim's fencing
   token;
2. if another node held the id, each of that node's workers is asked to give it up
   (`GiveUp` with the revision): the one holding a session under an older claim closes its
   connection (taken over [MQTT-3.1.4-2]) and discards the session; each answers
   `HandedOver` once that is committed. A node that does not answer within the claim
   timeout, or goes down, is not waited for;
3. then the node's own registry opens the session, unless a newer claim on another node
   was heard of meanwhile (`_may_open`, the node registry's `fence`, asked as the session
   would attach): then the CONNECT is
   refused with Server unavailable, as it lost the race to a later connection.
If the bucket cannot be reached within `[cluster] claim_timeout`, the CONNECT is refused with
Server unavailable (5.0 0x88, 3.1.1 code 3), as a cluster that cannot say who owns an id must
not risk two sessions for it.

Fencing: every worker watches the bucket. When a record names another node with a newer
revision than this worker's own claim of the id, a session held here for it is discarded
and its connection closed, and none opens under the old claim: a node that was paused or
cut off while another took its ids finds out as soon as it hears the bucket again (the watch
starts again after each NATS reconnection, `KvBucket.watch_entries`). Records
are never deleted: a node that gives an id up leaves it named until the next claim (whose
hand-over then finds nothing to give up).

A persistent session taken over by a CONNECT that resumes it (clean start 0) moves: the
worker that held it commits it, sends its stored form in the answer (`SessionHandedOver`,
`cluster.session_moves`), forwards what reaches the session meanwhile
(`cluster.move_forwarding`), and deletes its copy once the claimant says it stored it and
the forwarding has ended. A pool's workers share a store, so each can send the stored
form: the claimant takes the one from the worker that forwards, another only once every
worker has answered. A
session the watch ends before the claimant's `GiveUp` arrives keeps its stored state for
that `GiveUp`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol, TypeVar

import gevent
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js.api import KeyValueConfig
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue

from actors.context import Sessions
from actors.messages import Attach, ClientMessage, ConnectRefused, HandOff
from actors.persistence import Persistence
from actors.refs import Ref
from actors.runtime import tell_if_alive
from cluster.config import ClusterConfig
from cluster.move_forwarding import MoveForwarding
from cluster.nats_link import NatsLink
from cluster.session_moves import NodeMoves
from core.client import ClientInfo
from mqtt.reason_codes import ReasonCode
from net.rate_limited_log import RateLimitedLog
from net.transport import Transport
from pool.frames.codec import Frame
from pool.frames.ownership import GiveUp, HandedOver, SessionHandedOver
from store.base import DeleteSession, Op

logger = logging.getLogger(__name__)

CLAIM_TRIES = 8  # compare-and-set attempts before a claim counts as failed (contention)
# A JetStream request to the bucket while its stream has no leader (just made, or electing
# one after the NATS server that led it died) is dropped unanswered; so is one while
# JetStream is out of quorum. It is sent again after REQUEST_TIMEOUT seconds (RETRY_PAUSE
# after a quick refusal), until the claim's `claim_timeout` ends it: an election shorter
# than that delays a CONNECT instead of refusing it.
REQUEST_TIMEOUT = 1.0
RETRY_PAUSE = 0.1
# A session restored from the store whose id another node took while this one was down is
# kept this many claim timeouts after the watch found it (a claim under way may still ask
# for it), then discarded.
STALE_WAIT = 2
# Seconds a worker keeps the claim and fence of a client id it no longer serves: longer
# than opening a session at the node's registry takes (the pool's hand-over waits 5 s).
FORGET_AFTER = 10.0
_UNANSWERED = (TimeoutError, NoRespondersError, ServiceUnavailableError, NoStreamResponseError)
T = TypeVar("T")


class ClaimContendedError(Exception):
    """Other claims kept changing the record between this claim's read and its write."""


class Peers(Protocol):
    """What the registry needs of the cluster's fabric."""

    def workers_of(self, node: str) -> list[int]:
        """The linked peers (their numbers) that are workers of `node`."""
        ...

    def send(self, worker: int, frame: Frame) -> bool: ...


def key_of(text: str) -> str:
    """`text` (a client id, a banned value) as a bucket key, which allows letters, digits
    and `-/_=.` only: base64url."""
    return base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii")


def text_of(key: str) -> str:
    """The text `key_of` made `key` of; ValueError if it made no such key."""
    raw = base64.b64decode(key.encode("ascii"), altchars=b"-_", validate=True)
    return raw.decode("utf-8", "surrogatepass")


async def answered(request: Callable[[], Awaitable[T]]) -> T:
    """`request()`'s answer, asked again while JetStream leaves it unanswered (see
    REQUEST_TIMEOUT); the caller's own timeout ends the wait (`asyncio.timeout`, unlike
    3.11's `wait_for`, never takes the caller's cancellation for its own timeout)."""
    while True:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                return await request()
        except _UNANSWERED as error:
            logger.debug("cluster: a request to the bucket went unanswered (%r); again", error)
            await asyncio.sleep(RETRY_PAUSE)


class KvBucket:
    """A key-value bucket of the cluster, `mqtt-<cluster>-<what>`, made on first use with
    `[cluster] replicas` copies, on the NATS loop: every method is a coroutine run by
    `NatsLink.run`."""

    def __init__(self, config: ClusterConfig, what: str) -> None:
        self.name = f"mqtt-{config.name}-{what}"
        self._replicas = config.replicas
        self._kv: KeyValue | None = None

    async def open(self, client: Client) -> KeyValue:
        if self._kv is None:
            js = client.jetstream()
            try:
                self._kv = await js.key_value(self.name)
            except BucketNotFoundError:
                self._kv = await js.create_key_value(
                    KeyValueConfig(bucket=self.name, history=1, replicas=self._replicas)
                )
        return self._kv

    async def watch_entries(
        self,
        client: Client,
        seen: Callable[[KeyValue.Entry | None], None],
        reconnected: Callable[[], Awaitable[None]],
    ) -> None:
        """Tell `seen` (on the NATS loop) of the latest entry of every key (deletions
        included), then None (the end of the initial values), then of each change, until
        cancelled. After each reconnection (`reconnected()` returns: `NatsLink.reconnected`)
        the watch starts again, so every key is told again, then None again: a JetStream
        watch whose consumer the server lost (it restarted) resumes by itself only once its
        heartbeats are missed, about 10 s later, and what changed meanwhile would wait."""
        kv = await answered(lambda: self.open(client))
        while True:
            watcher = await answered(kv.watchall)
            reading = asyncio.ensure_future(_read_entries(watcher, seen))
            back = asyncio.ensure_future(reconnected())
            await asyncio.wait((reading, back), return_when=asyncio.FIRST_COMPLETED)
            if reading.done():
                back.cancel()
                return reading.result()
            reading.cancel()
            with contextlib.suppress(Exception):  # its consumer may be gone with the server
                await watcher.stop()  # type: ignore[no-untyped-call]


async def _read_entries(
    watcher: KeyValue.KeyWatcher, seen: Callable[[KeyValue.Entry | None], None]
) -> None:
    async for entry in watcher:
        seen(entry)


class Bucket(KvBucket):
    """The client-id records (see the module docstring)."""

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config, "clients")

    async def claim(self, client: Client, client_id: str, node: str) -> tuple[str | None, int]:
        """Record `node` as the owner of `client_id`: (the node that held it before, if
        another, and the record's revision after this claim)."""
        kv = await answered(lambda: self.open(client))
        key = key_of(client_id)
        mine = node.encode()
        # The last other node read as the owner: a write of this claim that was applied but
        # left unanswered (sent again, it fails on the revision) then reads as this node's.
        previous: str | None = None
        for _ in range(CLAIM_TRIES):
            try:
                entry = await answered(lambda: kv.get(key))
            except KeyNotFoundError:  # never claimed, or its record deleted
                entry = None
            try:
                if entry is None or entry.value is None:
                    return previous, await answered(lambda: kv.create(key, mine))
                if entry.value != mine:
                    previous = entry.value.decode()
                # Written even when this node holds the id already: every claim gets a
                # revision of its own, so a claim made elsewhere in between is ordered
                # against it (and fences it, or is fenced by it).
                update = partial(kv.update, key, mine, last=entry.revision)
                return previous, await answered(update)
            except KeyWrongLastSequenceError:
                continue  # another claim came between the read and the write
        raise ClaimContendedError(f"{CLAIM_TRIES} attempts")

    async def watch(
        self,
        client: Client,
        seen: Callable[[str, str, int, bool], None],
        reconnected: Callable[[], Awaitable[None]],
    ) -> None:
        """Tell `seen(client_id, node, revision, initial)` (from the NATS loop) of every
        record, now (`initial`: the records as the watch found them when it first started)
        and as it changes (told again after a reconnection, as `watch_entries` does), until
        cancelled."""
        initial = True

        def entry_seen(entry: KeyValue.Entry | None) -> None:
            nonlocal initial
            if entry is None:
                initial = False  # the end of the initial values
            elif entry.value is not None and entry.revision is not None:  # not a deletion
                seen(text_of(entry.key), entry.value.decode(), entry.revision, initial)

        await self.watch_entries(client, entry_seen, reconnected)


class _GivingUp:
    """A session of this worker being given up to another node's claim."""

    __slots__ = ("after", "ended", "session")

    def __init__(self, session: Any) -> None:
        self.session = session
        self.ended: Callable[[], None] = lambda: None  # set once the hand-off is told
        self.after: list[Callable[[], object]] = []  # calls waiting for it to end


class ClusterRegistry:
    """The worker's `Sessions`: the node's own registry, each CONNECT's id claimed
    cluster-wide first (see the module docstring)."""

    def __init__(
        self,
        inner: Sessions,
        config: ClusterConfig,
        *,
        link: NatsLink,
        peers: Peers,
        persistence: Persistence,
        loss_log: RateLimitedLog,
        moves: NodeMoves,
        forwarding: MoveForwarding,
        fenced: Callable[[], bool],
        after_routes: Callable[[Callable[[], object]], None],
    ) -> None:
        self.inner = inner
        inner.fence = self._may_open
        self.fence: Callable[[str], str | None] | None = None  # the outermost: nothing above
        self.sessions = inner.sessions  # the same dict: the node's registry keeps it
        self._config = config
        self._node = config.node
        self._link = link
        self._peers = peers
        self._bucket = Bucket(config)
        self._persistence = persistence
        self._log = loss_log
        # client id -> its session here being given up, and who waits for that
        self._giving_up: dict[str, _GivingUp] = {}
        # client id -> the revision of this worker's latest claim of it (the fencing token),
        # and the newest revision at which another node claimed it (kept while it matters
        # here: a claim or a session of the id on this worker)
        self._claims: dict[str, int] = {}
        self._fences: dict[str, int] = {}
        # The ids being claimed here: the connections of each waiting for their turn.
        self._turns: dict[str, deque[Callable[[], None]]] = {}
        # (client id, peer) -> then: the hand-overs this worker waits for
        # (the argument: whether the peer answered, rather than went down)
        self._hand_overs: dict[tuple[str, int], Callable[[bool], None]] = {}
        # client id -> the peer a session was sent to, until it says it stored it
        self._moving_out: dict[str, int] = {}
        # client id -> a stored form from a worker that does not hold the session live (a
        # pool's workers share a store, so each can send it): taken once the others have
        # answered, as the one holding it forwards what reaches it meanwhile
        self._unforwarded: dict[str, tuple[int, SessionHandedOver]] = {}
        self._moves = moves
        self._forwarding = forwarding  # what reaches a session while it moves to another node
        # Sessions another node stored while they still forward: deleted when that ends.
        self._stored_there: set[str] = set()
        self._fenced = fenced  # the node's lease ran out: CONNECTs are refused at once
        self._after_routes = after_routes  # calls back once the routes added are known
        self.taken_over = 0  # sessions ended here because another node took their id
        self.moved_in = 0  # sessions that came here from another node
        self.discarded = 0  # stored sessions whose id another node took while this one was down
        # CONNECTs that resumed without the session the id's previous node holds (down,
        # cut off, or silent past the claim timeout): a new session started instead
        self.resumed_without_session = 0

    def start(self) -> None:
        """Watch the records (fencing), from the first connection to NATS on."""
        self._link.run(
            lambda client: self._bucket.watch(
                client, self._seen_on_nats_loop, self._link.reconnected
            ),
            self._watch_ended,
            timeout=None,
        )

    # ----- Sessions -----------------------------------------------------------------------

    def open(
        self,
        client: ClientInfo,
        client_ref: Ref[ClientMessage],
        transport: Transport,
        connack_properties: dict[int, Any],
    ) -> None:
        client_id = client.client_id
        opening = partial(self._claim, client, client_ref, transport, connack_properties)
        waiting = self._turns.get(client_id)
        if waiting is not None:  # an earlier connection of the id is being claimed: after it
            waiting.append(opening)
            return
        self._turns[client_id] = deque()
        opening()

    def attach(self, attach: Attach) -> None:
        self.inner.attach(attach)

    def ended(self, client_id: str, session: Any) -> None:
        self.inner.ended(client_id, session)
        going = self._giving_up.get(client_id)
        if going is not None and going.session is session:
            # It ended, whether or not by the hand-off it was told (a takeover within the
            # node may have ended it first, and that hand-off was then never read).
            self._persistence.submit((), going.ended)
        if client_id not in self.inner.sessions and client_id not in self._turns:
            # Forgotten later, not now: a connection of the id whose claim is over may still
            # be opening at the node's registry (in a pool, at the id's home worker), and
            # it must still meet a fence set meanwhile, and its own claim.
            gevent.spawn_later(FORGET_AFTER, self._forget, client_id)

    def _forget(self, client_id: str) -> None:
        """Nothing of `client_id` is here any more: the next CONNECT claims afresh."""
        if client_id not in self.inner.sessions and client_id not in self._turns:
            self._claims.pop(client_id, None)
            self._fences.pop(client_id, None)

    # ----- a claim ------------------------------------------------------------------------

    def _claim(
        self,
        client: ClientInfo,
        client_ref: Ref[ClientMessage],
        transport: Transport,
        connack_properties: dict[int, Any],
    ) -> None:
        client_id = client.client_id
        if self._fenced():
            self._refuse(client, client_ref, ConnectionError("this node lost NATS"))
            self._next_turn(client_id)
            return

        def claimed(result: tuple[str | None, int] | None, error: BaseException | None) -> None:
            if result is None:
                self._refuse(client, client_ref, error)
                self._next_turn(client_id)
                return
            previous, revision = result
            self._claims[client_id] = revision
            open_ = partial(self._open, client, client_ref, transport, connack_properties)
            if previous is None:
                open_()
            else:
                self._hand_over(client_id, previous, revision, client.clean_start, open_)

        self._link.run(
            lambda nats: self._bucket.claim(nats, client_id, self._node),
            claimed,
            timeout=self._config.claim_timeout,
        )

    def _open(
        self,
        client: ClientInfo,
        client_ref: Ref[ClientMessage],
        transport: Transport,
        connack_properties: dict[int, Any],
    ) -> None:
        try:
            if client_ref.is_alive():
                self.inner.open(client, client_ref, transport, connack_properties)
        finally:
            self._next_turn(client.client_id)

    def _next_turn(self, client_id: str) -> None:
        waiting = self._turns.get(client_id)
        if waiting:
            waiting.popleft()()
        else:
            self._turns.pop(client_id, None)

    def _refuse(
        self, client: ClientInfo, client_ref: Ref[ClientMessage], error: BaseException | None
    ) -> None:
        self._log.note(
            "cluster-claim",
            1,
            f"cluster: refused CONNECT of {client.client_id!r} with server unavailable: its id "
            f"could not be claimed in bucket {self._bucket.name} within "
            f"{self._config.claim_timeout} s ([cluster] claim_timeout): "
            f"{str(error) or type(error).__name__}; is NATS (with JetStream) reachable and in "
            "quorum?",
        )
        why = "the cluster's client registry is unavailable"
        tell_if_alive(client_ref, ConnectRefused(ReasonCode.SERVER_UNAVAILABLE, why))

    def _hand_over(
        self, client_id: str, previous: str, revision: int, clean: bool, then: Callable[[], None]
    ) -> None:
        """Ask every linked worker of node `previous` to give `client_id` up; `then` once all
        have answered, gone down, or the claim timeout passed."""
        workers = self._peers.workers_of(previous)
        left = set(workers)
        if not left:
            self._hand_over_ended(client_id, previous, clean, False, then)
            return
        done = [False]
        silent: set[int] = set()  # the workers that went down instead of answering

        def answered(worker: int | None, replied: bool = True) -> None:
            if done[0]:
                return
            if worker is not None:
                left.discard(worker)
                self._hand_overs.pop((client_id, worker), None)
                if not replied:
                    silent.add(worker)
            if self._take_unforwarded(client_id, worker, left) and (done[0] or worker is not None):
                return  # ended by its answer, or that follows once the session started
            if worker is None or not left:
                done[0] = True
                self._unforwarded.pop(client_id, None)
                for other in left:
                    self._hand_overs.pop((client_id, other), None)
                answered_all = not left and not silent
                self._hand_over_ended(client_id, previous, clean, answered_all, then)

        for worker in workers:
            self._hand_overs[(client_id, worker)] = partial(answered, worker)
            if not self._peers.send(worker, GiveUp(client_id, revision, int(clean))):
                answered(worker, replied=False)
        if not done[0]:
            gevent.spawn_later(self._config.claim_timeout, answered, None)

    def _take_unforwarded(self, client_id: str, worker: int | None, left: set[int]) -> bool:
        """Take the stored form of `client_id` a worker sent without forwarding, once every
        other worker answered (`worker`, the one that just did; None: the claim timed out).
        Whether it was taken: its own answer then came, or comes once the session started."""
        waiting = self._unforwarded.get(client_id)
        if waiting is None or not (worker is None or left <= {waiting[0]}):
            return False
        del self._unforwarded[client_id]
        if waiting[0] == worker:  # it went down since: its form is not taken
            return False
        self._take_session(*waiting)
        return True

    def _hand_over_ended(
        self,
        client_id: str,
        previous: str,
        clean: bool,
        answered_all: bool,
        then: Callable[[], None],
    ) -> None:
        """`then`, after counting and logging a resume that goes on without the session node
        `previous` holds (not every worker there answered): at most one line a second, as a
        node's clients come back together."""
        if not answered_all and not clean:
            self.resumed_without_session += 1
            self._log.note(
                "cluster-session-unavailable",
                1,
                f"cluster: {client_id!r} resumes here without its session: node {previous}, "
                f"which holds it, is down, cut off, or did not answer within "
                f"{self._config.claim_timeout} s; a new session starts (if that node comes back "
                "its copy is discarded; if it never does, its offline sessions are lost with "
                "its store)",
            )
        then()

    # ----- frames from other nodes --------------------------------------------------------

    def handed_over(self, worker: int, frame: HandedOver) -> None:
        """A worker of another node answered this worker's `GiveUp`, or stored the session
        this worker sent it (whose copy here then goes)."""
        client_id = frame.client_id
        then = self._hand_overs.get((client_id, worker))
        if then is not None:
            then(True)
        elif self._moving_out.get(client_id) == worker:
            del self._moving_out[client_id]
            if self._forwarding.forwarding(client_id):  # puts go on until it ends
                self._stored_there.add(client_id)
            else:
                self._delete_moved(client_id)
            logger.info("cluster: session of %r moved to another node", client_id)

    def moved_away(self, client_id: str) -> None:
        """The forwarding of `client_id`'s session ended: nothing more is put for it here,
        so its copy goes if the other node stored the session."""
        if client_id in self._stored_there:
            self._stored_there.discard(client_id)
            self._delete_moved(client_id)

    def _delete_moved(self, client_id: str) -> None:
        """Delete the copy of a session another node stored, unless the id came back."""
        if client_id not in self.inner.sessions and client_id not in self._turns:
            self._persistence.submit([DeleteSession(client_id)])

    def session_handed_over(self, worker: int, frame: SessionHandedOver) -> None:
        """The session a `GiveUp` of this worker asked for: stored here, started, and the
        sender told it may delete its copy."""
        client_id = frame.client_id
        then = self._hand_overs.get((client_id, worker))
        if then is None or frame.revision != self._claims.get(client_id):
            return  # a claim that is over: the sender keeps its copy (fenced there)
        others = any(key[0] == client_id and key[1] != worker for key in self._hand_overs)
        if others and self._forwarding.arriving(client_id, worker) is None:
            self._unforwarded[client_id] = (worker, frame)
            return
        self._take_session(worker, frame)

    def _take_session(self, worker: int, frame: SessionHandedOver) -> None:
        client_id = frame.client_id
        then = self._hand_overs.get((client_id, worker))
        if then is None:
            return
        session = None
        forwarding = self._forwarding
        moving = forwarding.arriving(client_id, worker)
        if client_id not in self.inner.sessions:
            session = self._moves.move_in(client_id, frame.ops, moving)
            if session is not None:
                self.inner.sessions[client_id] = session
                self.moved_in += 1
                forwarding.started(client_id, session)
        self._peers.send(worker, HandedOver(client_id))
        if session is None:
            if moving is not None:  # nothing to forward to: the old node stops
                forwarding.routes_known(client_id)
            then(True)
        else:  # its CONNACK once its routes are known everywhere, as after a SUBACK

            def known() -> None:
                forwarding.routes_known(client_id)
                then(True)

            self._after_routes(known)

    def peer_down(self, worker: int) -> None:
        for key in [key for key in self._hand_overs if key[1] == worker]:
            then = self._hand_overs.get(key)
            if then is not None:
                then(False)
        for client_id in [c for c, w in self._moving_out.items() if w == worker]:
            del self._moving_out[client_id]  # its copy stays here, fenced

    def give_up(self, worker: int, frame: GiveUp) -> None:
        """Another node claimed `frame.client_id` at `frame.revision`: a session held here
        under an older claim is discarded (a clean start) or sent to the claimant."""
        client_id, revision = frame.client_id, frame.revision
        if not self._overtaken(client_id, revision):  # this worker's claim is newer
            self._peers.send(worker, HandedOver(client_id))
            return
        if frame.clean or not self._moves.can_move:
            self._forwarding.cancel(client_id)  # fenced by the watch first: nobody takes it
            self._end_here(client_id, revision, True, partial(self._answer, worker, client_id))
            return

        def send() -> None:
            gevent.spawn(self._send_stored, worker, client_id, revision)

        self._end_here(client_id, revision, False, send)

    def _answer(self, worker: int, client_id: str) -> None:
        self._peers.send(worker, HandedOver(client_id))

    def _send_stored(self, worker: int, client_id: str, revision: int) -> None:
        ops = self._moves.move_out(client_id)
        if ops is None:
            self._forwarding.cancel(client_id)
            self._answer(worker, client_id)
            return
        self._moving_out[client_id] = worker
        self._forwarding.claim(client_id, worker)  # its `MovingOut` goes first
        self._peers.send(worker, SessionHandedOver(client_id, revision, ops))

    def _end_here(
        self,
        client_id: str,
        revision: int,
        discard: bool,
        then: Callable[[], object],
        forward: bool = True,
    ) -> None:
        """A claim on another node at `revision` overtook this worker's: end the session of
        `client_id` held here, if any, its connection closed as taken over and its state
        committed to the store (`discard`: deleted there); `then` once that is committed.
        Kept (not `discard`) and `forward`, it forwards what reaches it to the claimant.
        One at a time per id: a second call waits for the first, and then ends nothing if
        a newer claim was made here meanwhile."""
        going = self._giving_up.get(client_id)
        if going is not None:
            going.after.append(partial(self._end_here, client_id, revision, discard, then, forward))
            return
        if revision <= self._claims.get(client_id, 0):  # a newer claim here: it stays
            self._persistence.submit((), then)
            return
        self._claims.pop(client_id, None)
        session = self.inner.sessions.get(client_id)
        gone: list[Op] = [DeleteSession(client_id)] if discard else []
        if session is None:
            self._persistence.submit(gone, then)
            return
        self.taken_over += 1
        logger.info("cluster: client id %r taken over by another node", client_id)
        going = self._giving_up[client_id] = _GivingUp(session)

        def ended() -> None:
            if self._giving_up.get(client_id) is not going:
                return  # ended already: the session's answer and its end both say so
            del self._giving_up[client_id]
            then()
            for call in going.after:
                call()

        going.ended = ended
        # A resumable session keeps its routes and forwards what reaches it meanwhile.
        forwards = forward and not discard and self._moves.can_move
        move = self._forwarding.move_out(client_id, session) if forwards else None
        if not tell_if_alive(session, HandOff(discard, ended, move)):
            self._persistence.submit(gone, ended)

    # ----- fencing ------------------------------------------------------------------------

    def _seen_on_nats_loop(self, client_id: str, node: str, revision: int, initial: bool) -> None:
        if node != self._node:
            self._link.post(partial(self._seen, client_id, node, revision, initial))

    def _seen(self, client_id: str, node: str, revision: int, initial: bool) -> None:
        """The record of `client_id` names another node at `revision`: a session here under
        an older claim ends, its stored state kept for the claimant's `GiveUp`. Found so
        when the watch starts (`initial`), the other node took the id while this one was
        down: if it does not ask for the session soon, the stored copy is discarded."""
        relevant = self.inner.sessions, self._turns, self._claims
        if not any(client_id in ids for ids in relevant):
            return
        if self._overtaken(client_id, revision) and client_id in self.inner.sessions:
            logger.warning(
                "cluster: node %s holds client id %r now (record revision %d): its session "
                "here ends",
                node,
                client_id,
                revision,
            )
            # Found so at start-up, the session waits for no claimant: none is moving it.
            self._end_here(client_id, revision, False, lambda: None, forward=not initial)
            if initial and client_id not in self._claims:
                wait = STALE_WAIT * self._config.claim_timeout
                gevent.spawn_later(wait, self._discard_stale, client_id, node, revision)

    def _discard_stale(self, client_id: str, node: str, revision: int) -> None:
        """Delete the stored session of `client_id`, which `node` took while this node was
        down (at `revision`), unless the id was claimed, asked for or moved here since."""
        if (
            client_id in self.inner.sessions
            or client_id in self._claims
            or client_id in self._moving_out
            or client_id in self._giving_up
        ):
            return
        self.discarded += 1
        logger.warning(
            "cluster: the stored session of %r is discarded: node %s took the client id while "
            "this node was down (record revision %d) and started a session of its own",
            client_id,
            node,
            revision,
        )
        self._persistence.submit([DeleteSession(client_id)])

    def _overtaken(self, client_id: str, revision: int) -> bool:
        """A claim on another node at `revision`: none may open under an older claim here
        any more (`_may_open`). Whether this worker's own claim is older."""
        if revision > self._fences.get(client_id, 0):
            self._fences[client_id] = revision
        return revision > self._claims.get(client_id, 0)

    def _may_open(self, client_id: str) -> str | None:
        """Why `client_id` may not open a session here now (the node registry asks, at the
        moment it would attach one), or None."""
        fenced = self._fences.get(client_id)
        if fenced is None or fenced < self._claims.get(client_id, 0):
            return None
        return "a later connection on another node of the cluster took its client id"

    def _watch_ended(self, _result: None, error: BaseException | None) -> None:
        logger.error(
            "cluster: the watch of bucket %s ended (%s): sessions taken over by other nodes "
            "while this one was cut off are not fenced until it restarts",
            self._bucket.name,
            error,
        )
