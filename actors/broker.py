"""Broker: starts one worker's actors and listener in order, and stops them in reverse.

Start: the listeners' TLS contexts (a bad certificate stops the broker before anything else
starts) -> hook bus and plugins -> store (restoring retained messages and persistent
sessions) -> router -> retainer -> session registry -> listeners, one per `[[listeners]]`
table -> `$SYS` publisher -> admin HTTP listener (`admin`, given by `actors.main`;
`[http] port = 0`: none).
Nothing is accepted before the restore is complete; `ready` is True from then until stop.
Reload (SIGHUP): plugins re-read their files, sessions are re-authorised, and tls/wss
listeners rebuild their TLS contexts for new connections.
Stop (SIGINT/SIGTERM): stop the HTTP listener and `$SYS`; stop accepting; close every
connection from the server side, which publishes the wills of clients that had not sent
DISCONNECT [MQTT-3.1.2-8]; let the sessions record their state; commit what the store still
holds; close plugins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import gevent
import pykka

from actors.admission import BANS_FILE, Admission
from actors.client_actor import accept_connection
from actors.cluster_part import ClusterPart
from actors.config import BrokerConfig
from actors.context import BrokerContext
from actors.dispatch import Dispatcher, RemoteForwarder
from actors.messages import AddRoutes, CloseConnection, Reauthorize, Sync
from actors.overload import FlowControl
from actors.persistence import Persistence, restored_state
from actors.retainer_actor import RetainerActor
from actors.router_actor import RouterActor, RouteReplication, RouteWriter, add_route
from actors.runtime import tell_if_alive
from actors.session_actor import SessionActor
from actors.session_registry import SessionRegistry, new_session_state
from actors.sys_topics import SysPublisher
from bridge.service import Bridges, limit_queues
from core.auth_failures import AuthFailureDelays
from core.message import MESSAGE_ID_SPACE, Message, message_id_floor, skip_message_ids
from core.move_in import insert_qos0
from core.reasons import DisconnectReason
from core.session_state import Delivery
from core.stats import BrokerStats
from hooks.hook_bus import HookBus
from net.endpoint import Endpoint
from net.listener import Listener, bind_unix
from plugins.base import PluginContext
from plugins.loader import LoadedPlugin, close_plugins, load_plugins, reload_plugins
from router.fan_out import Route
from router.retained_clears import RetainedClears
from router.retained_index import RetainedIndex
from router.route_table import RouteTable
from router.share_strategy import SharePicker, Strategy
from store import ProcessStore, open_store
from store.base import DeleteSession, Snapshot, Store, StoredSession
from store.writer import StoreWriter

if TYPE_CHECKING:
    from actors.view import BrokerView, OtherWorkers, Surface

logger = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024
# On shutdown the store commits everything submitted before it closes; this bounds the wait
# (a healthy store needs far less: a commit of 5000 operations takes about 10 ms).
STORE_CLOSE_TIMEOUT = 30.0
REAUTHORIZE_TIMEOUT = 10.0  # seconds a reload waits for one session's re-authorisation


class ListenError(Exception):
    """A listener could not bind its address; the message names the listener."""


class Arriving(Protocol):
    """What a session moving in carries beside its stored form (the pool's `MovingOut`):
    its last user, if known, and the QoS 0 deliveries of its queue, each after the stored
    delivery whose seq `after` names."""

    @property
    def username(self) -> str | None: ...

    @property
    def user_known(self) -> int: ...

    @property
    def qos0(self) -> tuple[Delivery, ...]: ...

    @property
    def after(self) -> tuple[int, ...]: ...


class Broker:
    def __init__(self, config: BrokerConfig, worker_id: int = 0) -> None:
        self.config = config
        self.worker_id = worker_id
        self.context = BrokerContext(
            config=config,
            hooks=HookBus(allow_anonymous=config.auth.allow_anonymous),
            route_table=RouteTable(),
            stats=BrokerStats(),
            persistence=Persistence(None),
        )
        # A pool worker (pool.worker) replicates the routes to the other workers,
        # and gathers their tables and figures for the operations surface.
        self.route_replica: RouteReplication | None = None
        self.ops: OtherWorkers | None = None
        self.context.flow = FlowControl(config.overload, self.context.stats, config.workers or 1)
        self.context.auth_failures = AuthFailureDelays(
            config.overload.auth_failure_delay, config.overload.max_auth_failure_delay
        )
        self.plugins: list[LoadedPlugin] = []
        self.endpoints: list[Endpoint] = []
        self._servers: list[Listener] = []
        self._actors: list[Any] = []
        self.ready = False  # store restored and listeners open (GET /api/v1/ready)
        self.store_writer: StoreWriter | None = None
        self.retained_index: RetainedIndex[Message] | None = None  # the retainer's, read-only
        # The clears the retainer remembers, in a cluster only (router.retained_clears).
        self.retained_clears: RetainedClears | None = None
        self._sys: SysPublisher | None = None
        # The admin HTTP server (`admin.server.AdminServer`), given by the composition root
        # (actors.main) and made over this broker's view once it is ready.
        self.admin: Callable[[BrokerView], Surface] | None = None
        self._http: Surface | None = None
        self.bridges: Bridges | None = None  # [[bridges]] (docs/bridges.md)
        self.cluster: ClusterPart | None = None  # [cluster] (docs/cluster.md)
        self._session_store: Store | None = None  # read when a session moves to another node

    def start(self) -> None:
        """Start everything.

        Raises TlsSetupError (a listener's certificate files), PluginConfigError,
        store.base.StoreError or ListenError (an address in use).
        """
        self.endpoints = [Endpoint(listener) for listener in self.config.listeners]
        context = self.context
        plugin_context = PluginContext(
            config_dir=self.config.config_dir,
            node_name=self.config.node_name,
            worker_id=self.worker_id,
        )
        self.plugins = load_plugins(self.config.plugins, context.hooks, plugin_context)
        limit_queues(context, self.config.bridges)  # before any session starts
        snapshot = self._open_store()
        admission = context.admission = self._make_admission()
        replica = self.route_replica
        if self.cluster is not None:
            replica = self.cluster.joined_replication(replica)
        context.routes = RouteWriter(
            context.route_table,
            context.shared_subscriptions,
            replica,
            worker=self.worker_id,
        )
        context.router = RouterActor.start(context.routes, replica)
        retained: RetainedIndex[Message] = RetainedIndex()
        for message in snapshot.retained:
            retained.set(message.topic, message)
        self.retained_index = retained
        if self.config.cluster is not None:
            self.retained_clears = RetainedClears()
        context.retainer = RetainerActor.start(retained, self.retained_clears)
        context.dispatcher = Dispatcher(
            context.route_table,
            context.retainer,
            context.hooks,
            context.stats,
            context.persistence,
            loss_log=context.loss_log,
            shares=context.shared_subscriptions,
            picker=SharePicker(
                Strategy(self.config.shared_subscriptions.strategy), local_worker=self.worker_id
            ),
            flow=context.flow,
        )
        self.set_forwarder(None)
        sessions = self._restore_sessions(snapshot)
        context.registry = self._make_registry(sessions)
        if self.cluster is not None:
            context.registry = self.cluster.joined_sessions(context.registry)
            self.cluster.keep_bans(admission, self._bans_path())
            self.cluster.start()  # linked, and with the cluster's bans, before the listeners open
        self._actors = [context.retainer, context.router]
        context.flow.start()
        for endpoint in self.endpoints:
            self._servers.append(self._listen(endpoint))
        self._sys = SysPublisher(self, self.config.sys.interval, self.config.sys.presence_events)
        self._sys.start()
        if self.config.bridges:
            self.bridges = Bridges(context, self.config.bridges)
            self._start_bridges(self.bridges)
        if self.config.http.port and self.admin is not None:
            self._http = self.admin(self)
            try:
                self._http.start(self._http_listener())
            except OSError as error:
                raise ListenError(
                    f"cannot listen for the admin HTTP API on {self.config.http.host}:"
                    f"{self.config.http.port}: {error.strerror or error} (change [http] port; "
                    "0 turns it off)"
                ) from error
        self.ready = True
        ready = next((e for e in self.endpoints if e.config.type == "tcp"), self.endpoints[0])
        self._log_ready(ready.name.split(" ", 1)[1])

    def _start_bridges(self, bridges: Bridges) -> None:
        """Start the bridges (a pool worker starts those it owns: `PoolBroker`; a cluster
        node those it runs, `_bridge_placement`)."""
        if self.cluster is None:
            bridges.start()
            return
        self._bridge_placement(bridges, lambda: (0, 1, {0}))()

    def _bridge_placement(
        self, bridges: Bridges, workers: Callable[[], tuple[int, int, set[int]]]
    ) -> Callable[[], None]:
        """What places the bridges (`bridge.placement`), to be called now and whenever the
        live workers change: `workers()` says this worker, the pool's size and the live
        workers. In a cluster the cluster calls it too, whenever the live nodes change."""
        cluster = self.cluster
        node = None if self.config.cluster is None else self.config.cluster.node

        def place() -> None:
            worker, count, live = workers()
            nodes = None if cluster is None else cluster.live_nodes()
            gevent.spawn(bridges.place, worker, count, live, node=node, nodes=nodes)

        if cluster is not None:
            cluster.on_nodes_changed(place)
        return place

    def _log_ready(self, address: str) -> None:
        logger.info("ready: accepting MQTT connections on %s", address)

    def _make_registry(self, sessions: dict[str, Any]) -> SessionRegistry:
        return SessionRegistry(self.context, sessions)

    def _make_admission(self) -> Admission:
        return Admission(self.config.flapping, self._admission_file())

    def _bans_path(self) -> Path | None:
        """Where the bans are kept (None: in memory only, `[store] kind = "none"`)."""
        if self.config.store.kind == "none":
            return None
        return Path(self.config.store.data_dir) / BANS_FILE

    def _admission_file(self) -> Path | None:
        """The bans file the admission keeps: none in a cluster, whose bucket keeps the bans
        (the cluster imports the file once, `ClusterPart.keep_bans`)."""
        return None if self.config.cluster is not None else self._bans_path()

    def _http_listener(self) -> Any:
        """A socket already listening for the admin HTTP API, or None: bind `[http]`."""
        return None

    def _listen_on(self, endpoint: Endpoint) -> tuple[Any, int | None]:
        """What `endpoint`'s listener is given: (an address and the backlog to bind it
        with) or (a socket already listening, None)."""
        config = endpoint.config
        if config.type == "unix":
            return bind_unix(config.path, LISTEN_BACKLOG), None
        return (config.host, config.port), LISTEN_BACKLOG

    def _listen(self, endpoint: Endpoint) -> Listener:
        """Bind and start `endpoint`'s listener; log its type and address."""
        context = self.context
        config = endpoint.config
        settings = context.channel_settings(endpoint.use_identity_as_username)
        try:
            # A socket already listening takes no backlog in gevent.
            address, backlog = self._listen_on(endpoint)
            server = Listener(
                address,
                lambda sock, peer: accept_connection(sock, peer, context, endpoint, settings),
                backlog=backlog,
                connection_rate=config.max_connection_rate,
                workers=self.config.workers or 1,
            )
            server.max_accept = 256
            server.start()
        except OSError as error:
            raise ListenError(
                f"cannot listen for {endpoint.name}: {error.strerror or error} (is another "
                "broker running? change the port)"
            ) from error
        if config.type != "unix":
            bound = server.address  # (host, port): the port chosen for port 0
            endpoint.name = f"{config.type} {bound[0]}:{bound[1]}"
        extra = f", path {config.path}" if config.type in ("ws", "wss") else ""
        logger.info(
            "listening: %s (max_connections %d%s)", endpoint.name, config.max_connections, extra
        )
        return server

    def _open_store(self) -> Snapshot:
        settings = self.config.store
        if settings.kind == "none":
            logger.info("store: none (retained messages and sessions live in memory only)")
            skip_message_ids(self.message_id_floor())
            return Snapshot(retained=[], sessions={})
        started = time.monotonic()
        data_dir = Path(settings.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        store = self._make_store()
        self._session_store = store
        snapshot = store.load()
        seqs = [seq for s in snapshot.sessions.values() for seq, _ in s.messages]
        message_ids = [m.message_id for m in snapshot.retained] + [
            d.message.message_id for s in snapshot.sessions.values() for _, d in s.messages
        ]
        low = self.message_id_floor()
        mine = [i for i in message_ids if low <= i < low + MESSAGE_ID_SPACE]
        skip_message_ids(max(mine, default=low))
        writer = self.store_writer = StoreWriter(store)
        self.context.persistence = Persistence(writer, first_seq=max(seqs, default=0) + 1)
        logger.info(
            "store: %s in %s: restored %d retained messages and %d sessions in %.3f s",
            settings.kind,
            data_dir,
            len(snapshot.retained),
            len(snapshot.sessions),
            time.monotonic() - started,
        )
        return snapshot

    def _make_store(self) -> Store:
        settings = self.config.store
        return open_store(settings.kind, Path(settings.data_dir), synchronous=settings.synchronous)

    # ----- sessions moving to and from other nodes of a cluster (cluster.session_moves) ---

    @property
    def stores_sessions(self) -> bool:
        return self._session_store is not None

    def stored_session(self, client_id: str) -> StoredSession | None:
        """The stored session of `client_id`: what the store has committed (StoreError if
        it cannot be read)."""
        store = self._session_store
        if store is None:
            return None
        if isinstance(store, ProcessStore):
            snapshot = store.load_session(client_id, self.config.store.connect_wait)
        else:
            snapshot = store.load()
        return snapshot.sessions.get(client_id)

    def message_id_floor(self) -> int:
        """Where this process's message ids start (`core.message.message_id_floor`)."""
        cluster = self.config.cluster
        return message_id_floor(0, None if cluster is None else cluster.node)

    def start_stored_session(
        self, client_id: str, stored: StoredSession, moving: Arriving | None = None
    ) -> Any:
        """Start `stored` as the detached session of `client_id` (it moved in from another
        node) and route its subscriptions; None if it had expired. `moving`: what the other
        node carried (its `MovingOut`, pool.frames.moves); the session then holds what its
        routes bring until that node's forwarding ends (docs/cluster.md)."""
        context = self.context
        meta = stored.meta
        now = time.time()
        gone_since = meta.disconnected_at if meta.disconnected_at is not None else now
        if gone_since + meta.expiry_interval <= now:
            return None
        state = restored_state(client_id, stored, new_session_state(client_id, context.limits))
        if moving is not None:
            state.queue = insert_qos0(state.queue, moving.qos0, moving.after)
        actor = SessionActor(state, context, meta.protocol_version)
        if moving is not None:
            actor.moving_in(moving.username, bool(moving.user_known))
        session = actor.launch()
        routes = [
            (topic_filter, Route(session, options, persistent=True))
            for topic_filter, options in state.subscriptions.items()
        ]
        if routes:
            context.router.tell(AddRoutes(client_id, routes))
        return session

    def set_forwarder(self, pool: RemoteForwarder | None) -> None:
        """Forward publishes through `pool` (a pool worker's node) and, in a cluster, to the
        other nodes too."""
        forwarder = pool if self.cluster is None else self.cluster.joined_forwarder(pool)
        self.context.dispatcher.remote = forwarder

    def _restore_sessions(self, snapshot: Snapshot) -> dict[str, Any]:
        """Start a detached SessionActor per stored session and put its routes back."""
        context = self.context
        now = time.time()
        sessions: dict[str, Any] = {}
        expired = []
        for client_id, stored in snapshot.sessions.items():
            meta = stored.meta
            gone_since = meta.disconnected_at if meta.disconnected_at is not None else now
            remaining = gone_since + meta.expiry_interval - now
            if remaining <= 0:
                expired.append(DeleteSession(client_id))
                continue
            state = restored_state(client_id, stored, new_session_state(client_id, context.limits))
            actor = SessionActor(state, context, meta.protocol_version)
            if self.cluster is not None:
                actor.keep_restored()
            session = self._launch_restored(actor)
            for topic_filter, options in state.subscriptions.items():
                route = Route(session, options, persistent=True)
                add_route(
                    context.route_table,
                    context.shared_subscriptions,
                    topic_filter,
                    client_id,
                    route,
                    worker=self.worker_id,
                )
                if self.cluster is not None:
                    self.cluster.restored_route(topic_filter, client_id, route)
            if remaining != float("inf"):
                actor.start_expiry_timer(remaining)
            sessions[client_id] = session
        if expired:
            logger.info("store: removed %d expired sessions", len(expired))
            context.persistence.submit(expired)
        return sessions

    def _launch_restored(self, actor: SessionActor) -> Any:
        """Start a session restored from the store at start-up (a pool worker first makes
        it wait for what the other workers kept for it: `PoolBroker`)."""
        return actor.launch()

    def _store_close_timeout(self, stop_started: float) -> float:
        """Seconds the last commits may take at shutdown (`stop` began at `stop_started`);
        past them, `stop` raises StoreError (main logs it and exits 1)."""
        return STORE_CLOSE_TIMEOUT

    def reload(self) -> None:
        """SIGHUP: plugins re-read their files, tls/wss listeners their certificates (for new
        connections); connections stay up.

        Then every session re-checks its subscriptions and undelivered messages against the
        ACL: a subscription the new rules deny is revoked, and its routes are gone from the
        route table before the "re-authorised" line is logged.
        """
        logger.info("reloading plugins")
        reload_plugins(self.plugins)
        self.context.hooks.decisions_changed()  # publish decisions kept by connections go
        # The ACL may have changed: which clients have each delivery checked, and the
        # answers cached for them, are made again before the next message is routed.
        self.context.dispatcher.read_checks.reset()
        for endpoint in self.endpoints:
            endpoint.reload()
        started = time.monotonic()
        registry = self.context.registry
        sessions = list(registry.sessions.values())
        answers = [s.ask(Reauthorize(), block=False) for s in sessions if s.is_alive()]
        revoked = 0
        for answer in answers:
            try:
                revoked += answer.get(timeout=REAUTHORIZE_TIMEOUT)
            except (pykka.ActorDeadError, pykka.Timeout):
                continue  # the session ended meanwhile: nothing left to revoke
        self.context.router.ask(Sync(), timeout=REAUTHORIZE_TIMEOUT)  # routes removed
        logger.info(
            "re-authorised the subscriptions of %d sessions in %.3f s: %d revoked",
            len(answers),
            time.monotonic() - started,
            revoked,
        )

    def stop(self, timeout: float = 3.0) -> None:
        started = time.monotonic()
        self.ready = False
        if self._http is not None:
            self._http.stop()
        if self._sys is not None:
            self._sys.stop()
        if self.cluster is not None:
            self.cluster.on_nodes_changed(None)  # going down: no bridge is taken over here
        if self.bridges is not None:
            self.bridges.stop()  # their sessions stay, offline, not closed as clients' are
        for server in self._servers:
            server.close()  # stop accepting; handlers of open connections keep running
        if self.cluster is not None:
            self.cluster.stop()  # the other nodes drop this worker's routes at once
        self.context.flow.stop()
        clients = list(self.context.live_clients)
        logger.info(
            "shutting down: closing %d connections (%d counted as connected)",
            len(clients),
            self.context.stats.connections,
        )
        for client in clients:
            tell_if_alive(client, CloseConnection(DisconnectReason.SERVER_SHUTDOWN))
        deadline = time.monotonic() + timeout
        while self.context.live_clients and time.monotonic() < deadline:
            gevent.sleep(0.02)
        gevent.sleep(0.05)  # let sessions and the router handle what the closes sent them
        sessions = list(self.context.registry.sessions.values())
        for actor in [*sessions, *self._actors]:
            if actor.is_alive():
                actor.stop()
        self.context.persistence.close(timeout=self._store_close_timeout(started))
        close_plugins(self.plugins, self.context.hooks)
        stats = self.context.stats
        logger.info(
            "stopped: %d messages received, %d sent, %d dropped (no subscriber, denied or by a "
            "plugin), %d deliveries dropped (queue full, slow or offline subscriber); "
            "overload: %d flow pauses, %d stuck subscribers, %d memory alarms, %d rate-limit "
            "pauses",
            stats.messages_received,
            stats.messages_sent,
            stats.messages_dropped,
            stats.deliveries_dropped,
            stats.flow_pauses,
            stats.stalls,
            stats.memory_alarms,
            stats.rate_limited,
        )
