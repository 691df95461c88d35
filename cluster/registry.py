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
cut off while another took its ids finds out as soon as it hears the bucket again. Records
are never deleted: a node that gives an id up leaves it named until the next claim (whose
hand-over then finds nothing to give up).

Sessions do not move between nodes yet: a persistent session taken over by another node is
discarded (counted and logged), and the client starts afresh there.
"""

from __future__ import annotations

import base64
import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import gevent
from nats.aio.client import Client
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.context import Sessions
from actors.messages import Attach, ClientMessage, ConnectRefused, HandOff
from actors.persistence import Persistence
from actors.refs import Ref
from actors.runtime import tell_if_alive
from cluster.config import ClusterConfig
from cluster.nats_link import NatsLink
from core.client import ClientInfo
from mqtt.reason_codes import ReasonCode
from net.rate_limited_log import RateLimitedLog
from net.transport import Transport
from pool.frames.codec import Frame
from pool.frames.ownership import GiveUp, HandedOver

logger = logging.getLogger(__name__)

CLAIM_TRIES = 8  # compare-and-set attempts before a claim counts as failed (contention)


class ClaimContendedError(Exception):
    """Other claims kept changing the record between this claim's read and its write."""


class Peers(Protocol):
    """What the registry needs of the cluster's fabric."""

    def workers_of(self, node: str) -> list[int]:
        """The linked peers (their numbers) that are workers of `node`."""
        ...

    def send(self, worker: int, frame: Frame) -> bool: ...


def record_key(client_id: str) -> str:
    """The bucket key of `client_id` (keys allow letters, digits and `-/_=.` only)."""
    return base64.urlsafe_b64encode(client_id.encode("utf-8", "surrogatepass")).decode("ascii")


def client_id_of(key: str) -> str:
    return base64.urlsafe_b64decode(key.encode("ascii")).decode("utf-8", "surrogatepass")


class Bucket:
    """The records, on the NATS thread: every method is a coroutine run by `NatsLink.run`."""

    def __init__(self, config: ClusterConfig) -> None:
        self.name = f"mqtt-{config.name}-clients"
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

    async def claim(self, client: Client, client_id: str, node: str) -> tuple[str | None, int]:
        """Record `node` as the owner of `client_id`: (the node that held it before, if
        another, and the record's revision after this claim)."""
        kv = await self.open(client)
        key = record_key(client_id)
        mine = node.encode()
        for _ in range(CLAIM_TRIES):
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:  # never claimed, or its record deleted
                entry = None
            try:
                if entry is None or entry.value is None:
                    return None, await kv.create(key, mine)
                if entry.value == mine:
                    assert entry.revision is not None
                    return None, entry.revision
                revision = await kv.update(key, mine, last=entry.revision)
                return entry.value.decode(), revision
            except KeyWrongLastSequenceError:
                continue  # another claim came between the read and the write
        raise ClaimContendedError(f"{CLAIM_TRIES} attempts")

    async def watch(self, client: Client, seen: Callable[[str, str, int], None]) -> None:
        """Tell `seen(client_id, node, revision)` (from the NATS thread) of every record,
        now and as it changes, until cancelled."""
        kv = await self.open(client)
        watcher = await kv.watchall()
        async for entry in watcher:
            if entry is None or entry.value is None or entry.revision is None:
                continue  # the end of the initial values, or a deletion
            seen(client_id_of(entry.key), entry.value.decode(), entry.revision)


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
        # client id -> who waits for its session here to be given up
        self._giving_up: dict[str, list[Callable[[], object]]] = {}
        # client id -> the revision of this worker's latest claim of it (the fencing token),
        # and the newest revision at which another node claimed it (kept while it matters
        # here: a claim or a session of the id on this worker)
        self._claims: dict[str, int] = {}
        self._fences: dict[str, int] = {}
        # The ids being claimed here: the connections of each waiting for their turn.
        self._turns: dict[str, deque[Callable[[], None]]] = {}
        # (client id, peer) -> then: the hand-overs this worker waits for
        self._hand_overs: dict[tuple[str, int], Callable[[], None]] = {}
        self.taken_over = 0  # sessions discarded here because another node took their id

    def start(self) -> None:
        """Watch the records (fencing), from the first connection to NATS on."""
        self._link.run(
            lambda client: self._bucket.watch(client, self._seen_on_nats_thread),
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
        if client_id not in self.inner.sessions and client_id not in self._turns:
            self._claims.pop(client_id, None)  # the next CONNECT claims afresh
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
                self._hand_over(client_id, previous, revision, open_)

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
            f"{error or type(error).__name__}; is NATS (with JetStream) reachable and in quorum?",
        )
        why = "the cluster's client registry is unavailable"
        tell_if_alive(client_ref, ConnectRefused(ReasonCode.SERVER_UNAVAILABLE, why))

    def _hand_over(
        self, client_id: str, previous: str, revision: int, then: Callable[[], None]
    ) -> None:
        """Ask every linked worker of node `previous` to give `client_id` up; `then` once all
        have answered, gone down, or the claim timeout passed."""
        workers = self._peers.workers_of(previous)
        left = set(workers)
        if not left:
            then()
            return
        done = [False]

        def answered(worker: int | None) -> None:
            if done[0]:
                return
            if worker is not None:
                left.discard(worker)
                self._hand_overs.pop((client_id, worker), None)
            if worker is None or not left:
                done[0] = True
                for other in left:
                    self._hand_overs.pop((client_id, other), None)
                then()

        for worker in workers:
            self._hand_overs[(client_id, worker)] = partial(answered, worker)
            if not self._peers.send(worker, GiveUp(client_id, revision)):
                answered(worker)
        if not done[0]:
            gevent.spawn_later(self._config.claim_timeout, answered, None)

    # ----- frames from other nodes --------------------------------------------------------

    def handed_over(self, worker: int, frame: HandedOver) -> None:
        then = self._hand_overs.get((frame.client_id, worker))
        if then is not None:
            then()

    def peer_down(self, worker: int) -> None:
        for key in [key for key in self._hand_overs if key[1] == worker]:
            then = self._hand_overs.get(key)
            if then is not None:
                then()

    def give_up(self, frame: GiveUp, answer: Callable[[], object]) -> None:
        """Another node claimed `frame.client_id` at `frame.revision`: give up a session held
        here under an older claim, then `answer` once that is committed."""
        self._overtaken(frame.client_id, frame.revision, answer)

    def _give_up(self, client_id: str, answer: Callable[[], object] | None) -> None:
        """Discard the session of `client_id` held here, if any, closing its connection
        (taken over); `answer` once what this worker wrote for the id is committed."""
        self._claims.pop(client_id, None)
        waiting = self._giving_up.get(client_id)
        if waiting is not None:  # already going: answered with it
            if answer is not None:
                waiting.append(answer)
            return
        session = self.inner.sessions.get(client_id)
        if session is None:
            if answer is not None:
                self._persistence.submit((), answer)
            return
        self.taken_over += 1
        logger.info("cluster: client id %r taken over by another node", client_id)
        answers = self._giving_up[client_id] = [] if answer is None else [answer]

        def given_up() -> None:
            del self._giving_up[client_id]
            for then in answers:
                then()

        if not tell_if_alive(session, HandOff(True, given_up, None)):
            self._persistence.submit((), given_up)

    # ----- fencing ------------------------------------------------------------------------

    def _seen_on_nats_thread(self, client_id: str, node: str, revision: int) -> None:
        if node != self._node:
            self._link.post(partial(self._seen, client_id, node, revision))

    def _seen(self, client_id: str, node: str, revision: int) -> None:
        """The record of `client_id` names another node at `revision`."""
        if (
            client_id in self.inner.sessions
            or client_id in self._turns
            or client_id in self._claims
        ):
            if revision > self._claims.get(client_id, 0) and client_id not in self._giving_up:
                logger.warning(
                    "cluster: node %s holds client id %r now (record revision %d): a session "
                    "of it here is given up",
                    node,
                    client_id,
                    revision,
                )
            self._overtaken(client_id, revision, None)

    def _overtaken(
        self, client_id: str, revision: int, answer: Callable[[], object] | None
    ) -> None:
        """A claim on another node at `revision`: a session held here under an older claim
        is given up, and none may open under it any more (`_may_open`)."""
        if revision > self._fences.get(client_id, 0):
            self._fences[client_id] = revision
        if revision > self._claims.get(client_id, 0):
            self._give_up(client_id, answer)
        elif answer is not None:  # this worker's claim is newer: it keeps the id
            answer()

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
