"""PoolBroker: one worker of the process pool (`python -m actors.main --worker-id I`).

It is the single-process `Broker` with the pool's parts put in (docs/pool.md):
- the listeners accept on the sockets the supervisor bound (inherited descriptors);
- the store is the pool's one store process, reached over its Unix socket; this worker's
  delivery seqs and message ids are its own residue class, so the workers never collide;
- before it restores anything it links to the other workers (`Fabric`) and hears which
  client ids each one owns; it then restores the stored sessions homed at it that nobody
  owns, and announces their routes;
- the dispatcher forwards to the other workers through the `PoolNode`, the router reports
  route changes to it, and the `PoolRegistry` claims every client id from its home;
- refused CONNECTs are counted at their address's home worker (`pool.auth_failures`),
  so their delays grow pool-wide;
- worker 0 serves the admin HTTP API on the socket the supervisor bound (`--http-fd`) and
  keeps `bans.json`; every worker answers its part of the API's tables and figures and
  holds every ban (`pool.ops`);
- once ready it writes its id to the supervisor's ready pipe.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.socket

import core.message
from actors.admission import Admission
from actors.broker import LISTEN_BACKLOG, Arriving, Broker
from actors.config import BrokerConfig
from actors.messages import AddRoutes, Sync
from actors.persistence import restored_state
from actors.session_actor import SessionActor
from actors.session_registry import SessionRegistry, new_session_state
from bridge.service import Bridges
from core.move_in import insert_qos0
from core.session_state import SubscriptionOptions
from net.endpoint import Endpoint
from pool.admission import PoolAdmission
from pool.frames.store import StoreFailing
from pool.link import UnixFabric
from pool.node import PoolNode
from pool.ownership import home_of
from pool.registry import PoolRegistry
from pool.supervisor import STOP_TIMEOUT
from router.fan_out import Route
from router.shared import is_shared
from store import SQLITE_FILE_NAME, ProcessStore
from store.base import Snapshot, Store, StoredSession, StoreError

logger = logging.getLogger(__name__)

LINK_WAIT = 3.0  # seconds a starting worker waits to hear every other worker's ownerships
STORE_SOCKET = "store.sock"
# Seconds kept between the last commits' wait and the supervisor's kill: for the worker's
# own exit, and the supervisor's noticing it, on a loaded machine (0.5 s was not always).
STOP_MARGIN = 1.5
LAST_COMMITS_MIN = 0.5  # seconds the last commits get however late the stop came to them
ROUTES_TIMEOUT = 5.0  # seconds a resumed session waits for its routes to be known pool-wide


class PoolBroker(Broker):
    def __init__(
        self,
        config: BrokerConfig,
        worker_id: int,
        workers: int,
        *,
        run_dir: Path,
        listen_fds: list[int],
        ready_fd: int | None,
        http_fd: int | None = None,
    ) -> None:
        super().__init__(config, worker_id)
        self.workers = workers
        self._run_dir = run_dir
        self._listen_fds = list(listen_fds)
        self._ready_fd = ready_fd
        self._http_fd = http_fd
        self.node = PoolNode(worker_id, workers, self.context)
        self.route_replica = self.node
        self.ops = self.node.ops
        self.context.auth_failures = self.node.auth_failures
        self._store: ProcessStore | None = None
        self._registry: PoolRegistry | None = None  # also under a cluster's registry

    # ----- Broker's start-up steps, pool flavoured ----------------------------------------

    def _make_store(self) -> Store:
        settings = self.config.store
        self._store = ProcessStore(
            Path(settings.data_dir) / SQLITE_FILE_NAME, connect=self._run_dir / STORE_SOCKET
        )
        return self._store

    def _open_store(self) -> Snapshot:
        snapshot = super()._open_store()
        seqs = [seq for s in snapshot.sessions.values() for seq, _ in s.messages]
        self.context.persistence.interleave(self.worker_id, self.workers, max(seqs, default=0))
        if self.store_writer is not None:  # the pool's store: every worker hears its faults
            node = self.node
            self.store_writer.on_failing = lambda failing: node.broadcast(
                StoreFailing(int(failing))
            )
        return snapshot

    def _restore_sessions(self, snapshot: Snapshot) -> dict[str, Any]:
        """Link to the pool first; then restore the sessions homed here that no live worker
        owns (the others host theirs), and announce their routes."""
        node = self.node
        self.set_forwarder(node)
        admission = self.context.admission
        assert admission is not None
        node.ops.admission = admission  # bans travel from the first link on
        admission.replica = node.ops
        assert isinstance(admission, PoolAdmission)
        admission.send = node.send  # flapping: CONNECTs are counted at their id's home
        node.connection_counts.watch(self.endpoints)
        if self.cluster is not None:  # what other nodes give the restored sessions: pool-wide
            self.cluster.relay_unconfirmed(node.relay_unconfirmed)
            node.unconfirmed = self.cluster.unconfirmed_relayed
        fabric = UnixFabric(self.worker_id, self.workers, self._run_dir, time.time_ns(), node)
        node.fabric = fabric
        fabric.start()
        others = set(range(self.workers)) - {self.worker_id}
        deadline = time.monotonic() + LINK_WAIT
        while not others <= node.owned_reported and time.monotonic() < deadline:
            gevent.sleep(0.02)
        missing = others - node.owned_reported
        if missing:
            logger.warning(
                "worker %d: no answer from workers %s within %.0f s; going on without them "
                "(they link when they are up)",
                self.worker_id,
                sorted(missing),
                LINK_WAIT,
            )
        homed = {
            client_id: stored
            for client_id, stored in snapshot.sessions.items()
            if home_of(client_id, self.workers) == self.worker_id
            and node.arbiter.owner(client_id) is None
        }
        # This worker's earlier life may have died: its sessions are adopted from it, and what
        # the others kept for them comes once their routes are known (docs/pool.md "A
        # worker dies").
        self._restoring = node.adoptions.begin(self.worker_id)
        sessions = super()._restore_sessions(Snapshot(retained=[], sessions=homed))
        for client_id in sessions:
            node.arbiter.adopt(client_id, self.worker_id)
            for topic_filter in homed[client_id].meta.subscriptions:
                node.route_changed(topic_filter, True)  # a share group's member too
                if not is_shared(topic_filter):
                    node.durable_route_changed(topic_filter, True)
        node.adoptions.announce(self._restoring, node.fabric.peers)
        node.rehost = self._rehost
        return sessions

    def _launch_restored(self, actor: SessionActor) -> Any:
        actor.moving_in(None, user_known=False)
        session = actor.launch()
        state = actor.state
        self.node.adoptions.add(self._restoring, state.client_id, session, state.subscriptions)
        return session

    def _make_admission(self) -> Admission:
        file = self._admission_file()
        return PoolAdmission(self.config.flapping, file, self.worker_id, self.workers)

    def _bans_path(self) -> Path | None:
        """Worker 0 alone keeps `bans.json` (in a cluster: imports it), from the pool-wide
        table (every worker holds every ban); the others learn the bans from their peers
        when they link."""
        return super()._bans_path() if self.worker_id == 0 else None

    def _make_registry(self, sessions: dict[str, Any]) -> SessionRegistry:
        registry = PoolRegistry(self.context, sessions, self.node, self._resume)
        self.context.registry = registry
        self._registry = registry
        self.node.open_for_claims()
        return registry

    def _listen_on(self, endpoint: Endpoint) -> tuple[gevent.socket.socket, None]:
        """The socket the supervisor bound for this endpoint (listeners keep their order),
        listening from now on (the supervisor binds a TCP-family worker's socket without
        listening: the port opens when a worker can accept; again for a restarted worker's
        socket, which is harmless)."""
        index = self.endpoints.index(endpoint)
        sock = gevent.socket.socket(fileno=self._listen_fds[index])
        sock.listen(LISTEN_BACKLOG)
        return sock, None

    def _http_listener(self) -> gevent.socket.socket | None:
        """The admin HTTP socket the supervisor bound: worker 0 serves the API (the others
        run with `--http-port 0`, docs/pool.md)."""
        if self._http_fd is None:
            return None
        return gevent.socket.socket(fileno=self._http_fd)

    def _log_ready(self, address: str) -> None:
        logger.info("worker %d: accepting MQTT connections on %s", self.worker_id, address)
        if self._ready_fd is not None:
            os.write(self._ready_fd, bytes((self.worker_id % 256,)))
            os.close(self._ready_fd)
            self._ready_fd = None

    def _store_close_timeout(self, stop_started: float) -> float:
        """The supervisor kills a worker `STOP_TIMEOUT` seconds after its SIGTERM: the last
        commits get what is left of that, less a margin, so that a worker whose commits
        keep failing (a full disk) says so and exits 1 instead of being killed."""
        left = STOP_TIMEOUT - STOP_MARGIN - (time.monotonic() - stop_started)
        return max(left, LAST_COMMITS_MIN)

    def _start_bridges(self, bridges: Bridges) -> None:
        """Run the bridges this worker is the runner of, now and whenever a peer is linked
        or lost (`bridge.placement`)."""
        node = self.node

        def workers() -> tuple[int, int, set[int]]:
            live = {self.worker_id, *(node.fabric.peers if node.fabric is not None else ())}
            return self.worker_id, self.workers, live

        place = self._bridge_placement(bridges, workers)
        node.peers_changed = place
        place()

    def stop(self, timeout: float = 3.0) -> None:
        self.node.peers_changed = None  # going down: no bridge is taken over here
        # Going down: no re-hosting of the sessions of workers that leave meanwhile (the
        # store closes under it); their homes restore them from the store when they start.
        self.node.rehost = None
        self.node.leave()
        super().stop(timeout)
        if self.node.fabric is not None:
            self.node.fabric.stop()

    # ----- sessions from the store ----------------------------------------------------------

    def _resume(self, client_id: str, wait: float, adoption: int | None = None) -> Any:
        """Load `client_id`'s stored session and start it detached (None: none stored),
        waiting at most `wait` seconds for a store process that is away (StoreError past
        that). If it is moving in from another worker, that worker then hears that its
        routes are known here (and ends its forwarding). `adoption`: the round in which it
        is adopted from a dead worker (`pool.session_adoptions`)."""
        try:
            return self._load_and_start(client_id, wait, adoption)
        finally:
            self.node.moves.routes_known(client_id)

    def _load_and_start(self, client_id: str, wait: float, adoption: int | None) -> Any:
        if self._store is None:
            return None
        stored = self._store.load_session(client_id, wait).sessions.get(client_id)
        if stored is None:
            return None
        session = self._start_stored(client_id, stored, adoption)
        if session is not None and stored.meta.subscriptions:
            # Its CONNACK waits until every worker routes its topics here, as a SUBACK does:
            # a publish after the CONNACK reaches the moved session.
            self.context.router.ask(Sync(), timeout=ROUTES_TIMEOUT)
            known = gevent.event.Event()
            self.node.when_routes_known(known.set)
            known.wait(ROUTES_TIMEOUT)
        return session

    def _rehost(self, dead: int, client_ids: list[str]) -> None:
        """Worker `dead` died owning `client_ids` (homed here): host their stored sessions,
        if they had persistent ones, so that they keep queueing until their clients are
        back; then this worker has adopted its part of `dead`'s sessions (with none, it
        says so all the same: every worker's part is waited for)."""
        adoption = self.node.adoptions.begin(dead)
        rehosting = []
        for client_id in client_ids:
            granted = self.node.arbiter.claim(client_id, self.worker_id)
            if granted and granted[0].previous is None:  # else another claim is in line
                rehosting.append(gevent.spawn(self._rehost_from_store, client_id, adoption))

        def adopted() -> None:
            gevent.joinall(rehosting)
            fabric = self.node.fabric
            self.node.adoptions.announce(adoption, fabric.peers if fabric is not None else ())

        gevent.spawn(adopted)

    def _rehost_from_store(self, client_id: str, adoption: int) -> None:
        registry = self._registry
        assert registry is not None  # made before any worker can die
        session = None
        if client_id not in registry.sessions:
            try:
                session = self._resume(client_id, self.config.store.connect_wait, adoption)
            except StoreError as error:
                logger.warning(
                    "worker %d: cannot re-host the session of %r: %s; it is restored from "
                    "the store when its client comes back",
                    self.worker_id,
                    client_id,
                    error,
                )
            if session is not None:
                registry.adopt_restored(client_id, session)
                logger.info("worker %d: re-hosted the session of %r", self.worker_id, client_id)
        self.node.settle(client_id, has_session=client_id in registry.sessions)

    def message_id_floor(self) -> int:
        cluster = self.config.cluster
        return core.message.message_id_floor(
            self.worker_id, None if cluster is None else cluster.node
        )

    def _adopting(self, actor: SessionActor) -> None:
        """Before launch: `actor` is a session adopted from a dead worker; it waits for what
        the other workers kept for it (in a cluster, also for what the other nodes give the
        dead worker's next life: `cluster.restored_sessions`)."""
        if self.cluster is not None:
            actor.keep_restored()
        actor.moving_in(None, user_known=False)

    def _adopted(
        self,
        adoption: int,
        client_id: str,
        session: Any,
        subscriptions: Mapping[str, SubscriptionOptions],
        routes: list[tuple[str, Route]],
    ) -> None:
        """`session` runs, adopted in round `adoption` with its `routes`."""
        self.node.adoptions.add(adoption, client_id, session, subscriptions)
        if self.cluster is not None:
            self.cluster.rehosted_session(client_id, routes)

    def start_stored_session(
        self, client_id: str, stored: StoredSession, moving: Arriving | None = None
    ) -> Any:
        return self._start_stored(client_id, stored, moving=moving)

    def _start_stored(
        self,
        client_id: str,
        stored: StoredSession,
        adoption: int | None = None,
        moving: Arriving | None = None,
    ) -> Any:
        context = self.context
        meta = stored.meta
        now = time.time()
        gone_since = meta.disconnected_at if meta.disconnected_at is not None else now
        remaining = gone_since + meta.expiry_interval - now
        if remaining <= 0:
            return None
        if stored.messages:
            context.persistence.advance_past(max(seq for seq, _entry in stored.messages))
        state = restored_state(client_id, stored, new_session_state(client_id, context.limits))
        if moving is None:  # from another node, or another worker of this one
            moving = self.node.moves.arriving(client_id)
        if moving is not None:  # what the store does not hold came with the hand-over
            state.queue = insert_qos0(state.queue, moving.qos0, moving.after)
        actor = SessionActor(state, context, meta.protocol_version)
        if moving is not None:
            actor.moving_in(moving.username, bool(moving.user_known))
        elif adoption is not None:
            self._adopting(actor)
        session = actor.launch()
        self.node.moves.started(client_id, session)
        routes = [
            (topic_filter, Route(session, options, persistent=True))
            for topic_filter, options in state.subscriptions.items()
        ]
        if adoption is not None and moving is None:
            self._adopted(adoption, client_id, session, state.subscriptions, routes)
        if routes:
            context.router.tell(AddRoutes(client_id, routes))
        if remaining != float("inf"):
            actor.start_expiry_timer(remaining)
        return session
