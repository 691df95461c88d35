"""A worker's membership of the cluster: its routes told to the other nodes' workers, theirs
replicated, and publishes forwarded to the workers that want them (docs/cluster.md).

`ClusterMember` is the `FabricHandler` of this worker's `NatsFabric` and reuses the pool's
pure parts over it: `PoolRoutes` for the routes (filter -> peer, the `RoutesSync` round a
SUBACK waits for; the `durable` replica of persistent sessions' filters) and `ForwardOutbox`
for one `Forward` per peer per publish batch. A batch with QoS 1/2 messages for a peer is
numbered and kept until that peer confirms it, and awaited by the publisher's
acknowledgement where the peer's persistent sessions store one
(`cluster.numbered_forwarding`). A `Forward` received goes to
this worker's subscribers only, never onwards; a `Retained` into this worker's retained
index. Flow control crosses the nodes as it crosses a pool's workers (`pool.flow_control`):
a `Forward` names its publishing connection, the sessions here hold a stand-in for it, and
their holds go back as `FlowHold` / `FlowRelease`.

Client ids are owned cluster-wide (`cluster.registry`): `joined_sessions` puts the claim in
front of the node's own registry, and the frames of a claim (`GiveUp`, `HandedOver`) travel
over the same fabric, as do the admin API's questions to the other nodes (`cluster.ops`).
Bans hold on every node (`cluster.bans`, the cluster's bucket of them). Share groups span
the nodes (`cluster.shares`): `PoolRoutes` announces this worker's member
counts, the other nodes' join the dispatcher's stand-ins, and a message whose pick is another
node's worker goes to it in a `ForwardShared`. Left to each node (docs/cluster.md "Not
guaranteed yet"): its `$SYS/broker/...` tree (each node reports its own figures, and adds up
the other nodes' counts under `$SYS/cluster/...`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from operator import attrgetter
from pathlib import Path
from typing import Any

import gevent
import gevent.event

from actors.admission import Admission
from actors.cluster_part import NodesGathered
from actors.context import BrokerContext, Sessions
from actors.dispatch import RemoteForwarder
from actors.messages import CloseConnection, StoreRetained, Sync
from actors.router_actor import RouteReplication
from actors.runtime import tell_if_alive
from cluster.bans import ClusterBans
from cluster.config import ClusterConfig
from cluster.fabric import NatsFabric
from cluster.joined import JoinedForwarder, JoinedReplication
from cluster.move_forwarding import MOVE_FRAMES, MoveForwarding
from cluster.numbered_forwarding import KeptFrame, NumberedForwarding
from cluster.ops import ClusterOps, node_of
from cluster.registry import ClusterRegistry
from cluster.restored_sessions import RestoredSessions
from cluster.session_moves import NodeMoves, StoredSessions
from cluster.shares import ClusterShares
from core.flow import Gate
from core.message import Message
from core.reasons import DisconnectReason
from core.session_state import Delivery
from core.share_origin import ShareMark, ShareOrigin
from core.wire_messages import ForwardedMessages
from pool.flow_control import Publishers, RemoteGates
from pool.frames.codec import Frame
from pool.frames.flow import FlowHold, FlowRelease
from pool.frames.forwarding import (
    CommitSync,
    Committed,
    Forward,
    ForwardShared,
    Numbered,
    Retained,
    RetainedSnapshot,
    Unconfirmed,
)
from pool.frames.operations import OpsReply, OpsRequest
from pool.frames.ownership import GiveUp, HandedOver, SessionHandedOver
from pool.frames.routes import SharesChanged, SharesSnapshot
from pool.frames.store import DurableSnapshot
from pool.outbox import ForwardOutbox
from pool.routes import ROUTE_FRAMES, PoolRoutes
from router.fan_out import Route
from router.retained_clears import RetainedClears
from router.retained_index import RetainedIndex
from router.share_replica import PEER_SHARE_IDS, stand_in
from router.shared import inner_filter, is_shared
from store.base import DeleteRetained, PutRetained

logger = logging.getLogger(__name__)

ROUTES_TIMEOUT = 5.0  # seconds a moved-in session's CONNACK waits for its routes to be known
# Seconds a pool's dead worker takes, at most, to be restarted and linked to NATS: the
# sessions re-hosted from it wait that long too for what the other nodes give its next life.
REHOST_WAIT = 10.0
# Seconds the restored sessions wait at least for what the other nodes give the node's new
# life, however short `peer_timeout`: on a loaded machine the others may take seconds to
# hear the restart, and waiting costs only the sessions' check of message ids.
RESTORE_WAIT_FLOOR = 10.0
FORWARD_BYTES = 256 * 1024  # payload bytes per `Forward` frame, so a NATS message stays small
_LOCAL_ONLY = "$SYS/"  # each node publishes its own $SYS tree
_FORWARDING_FRAMES = frozenset(
    (Forward, ForwardShared, Unconfirmed, Numbered, CommitSync, Committed)
)
_CLAIM_FRAMES = frozenset((GiveUp, HandedOver, SessionHandedOver))
_payload = attrgetter("payload")


class ClusterMember:
    """This worker's side of the cluster; see the module docstring."""

    def __init__(
        self,
        config: ClusterConfig,
        worker: int,
        context: BrokerContext,
        stored_sessions: StoredSessions,
        *,
        retained: Callable[[], RetainedIndex[Message] | None],
        clears: Callable[[], RetainedClears | None],
        bridges: tuple[str, ...] = (),
    ) -> None:
        """`bridges`: the names of the bridges this node has configured (`[[bridges]]`)."""
        self.config = config
        self._context = context
        self._stored_sessions = stored_sessions
        self._retained = retained  # this worker's retained index (the retainer's)
        self._clears = clears  # and the clears its retainer remembers
        self._bridges = bridges
        self.fabric = NatsFabric(config, worker, self, bridges=bridges)
        loop = gevent.get_hub().loop
        fabric = self.fabric
        self.routes = PoolRoutes(
            fabric.send, fabric.broadcast, lambda: fabric.peers, loop.run_callback
        )
        self._outbox = ForwardOutbox()
        self._wanted_by = self.routes.remote.workers_cached  # topic -> other nodes' workers
        self.ops = ClusterOps(fabric.send, lambda: fabric.peers, fabric.heard_of)
        self.shares = ClusterShares(config.node, fabric)
        self.numbered = numbered = NumberedForwarding(
            config,
            fabric,
            self.routes.durable,
            lambda: context.persistence,  # the store's, once `Broker.start` opened it
            split=split_frame,
            deliver=self._forwarded_here,
            restored=self._unconfirmed,
            repick=self._pick_again,
        )
        self._kept = numbered.kept  # what is published here for peers that are down
        # Flow control across nodes, as across a pool's workers (pool.flow_control): this
        # worker's publishers that other nodes' sessions hold, and theirs as sessions here
        # hold them. Ids and holds are the cluster's own, apart from the pool's.
        self.publishers = Publishers()
        self.remote_gates = RemoteGates(fabric.send)
        self.registry: ClusterRegistry | None = None  # once the node's registry is made
        self.bans: ClusterBans | None = None  # once the worker's admission is made
        self.moves = MoveForwarding(
            fabric.send,
            self._when_all_routes_known,
            config.claim_timeout + config.peer_timeout,
            self._moved_away,
        )
        self._replication: RouteReplication = JoinedReplication(None, self)  # the router's
        # The lease: NATS lost since this monotonic time (None: linked), and whether the
        # lease ran out, so this worker's clients were closed and CONNECTs are refused.
        self._lost_at: float | None = time.monotonic()  # not linked before the first time
        self.fenced = False
        self._answered_at = time.monotonic()  # the last answer to a probe of NATS
        self._prober: gevent.Greenlet[[], None] | None = None
        # The live nodes are known once every live node has been heard since NATS was
        # (re)gained (`live_nodes`); whoever places the bridges is told when they may have
        # changed. `_link_ups` counts the times NATS was gained, to tell stale timers.
        self._nodes_known = False
        self._link_ups = 0
        self._nodes_changed: Callable[[], None] | None = None
        fabric.on_link_state = self._link_state
        fabric.on_bridges_heard = self._tell_nodes_changed
        self.forwarded = 0  # messages sent to other nodes' workers
        self.received = 0  # messages other nodes' workers sent here
        # The sessions restored from the store at start-up, for what the other nodes had
        # forwarded to this node's previous life (settled twice `peer_timeout`, at least 10
        # s, after the first link to NATS), and a pool worker's relay of it to the other
        # workers.
        self.restored = RestoredSessions()
        self._settling: gevent.Greenlet[..., Any] | None = None
        self._relay: Callable[[tuple[Message, ...]], object] | None = None

    def start(self) -> None:
        """Link to the cluster, once the node's sessions are restored from its store."""
        self.restored.ready(self._context.dispatcher)
        gevent.spawn_later(self.config.peer_timeout, self._lease_check)
        self.fabric.start()
        self.numbered.start()
        self._prober = gevent.spawn(self._probe_nats)
        if self.registry is not None:
            self.registry.start()
        if self.bans is not None:
            self.bans.start()

    def stop(self) -> None:
        if self.bans is not None:
            self.bans.stop()
        self.numbered.stop()
        if self._prober is not None:
            self._prober.kill()
        self.fabric.stop()

    def joined_replication(self, pool: RouteReplication | None) -> RouteReplication:
        """What the router tells: the pool's replication (if any) and this member."""
        self._replication = JoinedReplication(pool, self)
        return self._replication

    def _after_routes(self, then: Callable[[], object]) -> None:
        """`then`, in a greenlet, once the routes added so far are known to the node's other
        workers and the other nodes (a session that moved in: its CONNACK waits, as a
        SUBACK does, so a publish anywhere after it reaches the session)."""

        def wait() -> None:
            try:
                self._context.router.ask(Sync(), timeout=ROUTES_TIMEOUT)
                known = gevent.event.Event()
                self._replication.when_routes_known(known.set)
                known.wait(ROUTES_TIMEOUT)
            finally:
                then()

        gevent.spawn(wait)

    def joined_forwarder(self, pool: RemoteForwarder | None) -> RemoteForwarder:
        """What the dispatcher forwards through: the pool's forwarder (if any) and this
        member."""
        forwarder = JoinedForwarder(pool, self)
        self.shares.use(forwarder.shares)
        return forwarder

    def keep_bans(self, admission: Admission, bans_file: Path | None) -> None:
        """The bans are the cluster's from `start` on (`cluster.bans`)."""
        self.bans = ClusterBans(
            self.config, self.fabric.link, self.fabric.worker, admission, bans_file
        )

    def joined_sessions(self, inner: Sessions) -> Sessions:
        """The node's registry (one process's, or the pool's), each id claimed cluster-wide
        before it opens a session."""
        context = self._context
        self.registry = ClusterRegistry(
            inner,
            self.config,
            link=self.fabric.link,
            peers=self.fabric,
            persistence=context.persistence,
            loss_log=context.loss_log,
            moves=NodeMoves(self._stored_sessions, context.persistence),
            forwarding=self.moves,
            after_routes=self._after_routes,
            fenced=lambda: self.fenced,
        )
        return self.registry

    # ----- the live nodes (where the bridges run: bridge.placement) ------------------------

    def live_nodes(self) -> dict[str, frozenset[str]] | None:
        if not self._nodes_known or self._lost_at is not None or self.fenced:
            return None
        fabric = self.fabric
        nodes: dict[str, set[str]] = {self.config.node: set(self._bridges)}
        for worker in fabric.peers:
            nodes.setdefault(node_of(fabric.name_of(worker)), set()).update(
                fabric.bridges_of(worker)
            )
        return {node: frozenset(bridges) for node, bridges in nodes.items()}

    def on_nodes_changed(self, call: Callable[[], None] | None) -> None:
        self._nodes_changed = call

    def _nodes_heard(self, link_up: int) -> None:
        """`peer_timeout` after NATS was gained (at start, or back after a loss, when the
        others may have taken this node for gone): every live node has said so since
        (each says it every `heartbeat`), unless NATS was lost again meanwhile."""
        if link_up == self._link_ups and self._lost_at is None:
            self._nodes_known = True
            self._tell_nodes_changed()

    def _tell_nodes_changed(self) -> None:
        if self._nodes_changed is not None:
            self._nodes_changed()

    # ----- the lease -----------------------------------------------------------------------

    def _link_state(self, up: bool) -> None:
        if up:
            self._lost_at = None
            self.numbered.link_up()
            self._answered_at = time.monotonic()  # not lost since before: probes count anew
            if self.fenced:
                self.fenced = False
                logger.warning("cluster: NATS is back: this node accepts CONNECTs again")
            self._link_ups += 1
            gevent.spawn_later(self.config.peer_timeout, self._nodes_heard, self._link_ups)
            if self._link_ups == 1:
                self._settle_restored_later()
            return
        self._lost_at = time.monotonic()
        self._nodes_known = False
        self._tell_nodes_changed()
        gevent.spawn_later(self.config.peer_timeout, self._lease_check)

    def _probe_nats(self) -> None:
        """A NATS connection that stalls without closing (a silent partition) is reported
        down by the NATS client only when its pings time out, minutes later. So every
        `heartbeat` a round trip to the server (PING, PONG) is asked for; with no answer for
        `peer_timeout` and a heartbeat, NATS counts as lost since the last answer."""
        config = self.config
        wait = math.ceil(config.peer_timeout)  # nats-py takes whole seconds; `run` cuts it
        while True:
            gevent.sleep(config.heartbeat)
            self.fabric.link.run(
                lambda client: client.flush(timeout=wait),
                self._probed,
                timeout=config.peer_timeout,
            )

    def _probed(self, _result: None, error: BaseException | None) -> None:
        now = time.monotonic()
        if error is None:
            self._answered_at = now
            if self._lost_at is not None and self.fabric.connected:
                self._link_state(True)  # a stalled connection that carries on
            return
        config = self.config
        if self._lost_at is None and now - self._answered_at >= (
            config.peer_timeout + config.heartbeat
        ):
            self._lost_at = self._answered_at
            self._lease_check()

    def _lease_check(self) -> None:
        """The other nodes take this one for gone after `peer_timeout` of silence: so does it,
        closing its clients (5.0: DISCONNECT 0x9C Use another server) so they reconnect to
        a node that is in the cluster, and refusing CONNECTs until NATS is back."""
        lost = self._lost_at
        if lost is None or self.fenced or time.monotonic() - lost < self.config.peer_timeout:
            return
        self.fenced = True
        clients = list(self._context.live_clients)
        logger.error(
            "cluster: no NATS for %.1f s ([cluster] peer_timeout): the other nodes take this "
            "one for gone, so its %d clients are closed (use another server) and CONNECTs "
            "refused until NATS is back; check the NATS servers %s and the network to them",
            time.monotonic() - lost,
            len(clients),
            ", ".join(self.config.nats),
        )
        for client in clients:
            tell_if_alive(client, CloseConnection(DisconnectReason.CLUSTER_UNREACHABLE))

    # ----- the fabric's handler -----------------------------------------------------------

    def peer_up(self, worker: int, epoch: int) -> None:
        self.routes.peer_up(worker)
        self.numbered.peer_up(worker, epoch)
        if self.fabric.worker == 0:  # one worker per node answers for the node
            self._send_retained(worker)
        self._tell_nodes_changed()

    def _send_retained(self, worker: int) -> None:
        """A worker of another node came up (started, restarted, or back): it gets the
        retained messages this node knows, to keep those it has not got or has older, and
        the clears it remembers (as empty messages), to drop what was cleared meanwhile."""
        index = self._retained()
        if index is None:
            return
        kept = tuple(m for _topic, m in index.items() if not m.topic.startswith(_LOCAL_ONLY))
        clears = self._clears()
        if clears is not None:
            kept += tuple(
                Message(topic=topic, payload=b"", retain=True, timestamp=timestamp)
                for topic, timestamp in clears.items(time.time())
            )
        for part in split_payloads(kept) if kept else ():
            self.fabric.send(worker, RetainedSnapshot(part))

    def _retained_received(self, messages: tuple[Message, ...], merge: bool) -> None:
        """Retained messages another node set or cleared (`merge`: of its snapshot, kept
        only where newer than this worker's message and than a clear it remembers): into
        this worker's index, and worker 0 keeps them in the node's store, so they outlive
        the node they were published on."""
        if merge:
            index, clears = self._retained(), self._clears()
            messages = tuple(
                m
                for m in messages
                if (
                    index is None
                    or (current := index.get(m.topic)) is None
                    or current.timestamp < m.timestamp
                )
                and (clears is None or not clears.overrides(m.topic, m.timestamp))
            )
            if not messages:
                return
        self._context.retainer.tell(StoreRetained(list(messages)))
        persistence = self._context.persistence
        if self.fabric.worker == 0 and persistence.enabled:
            persistence.submit(
                [PutRetained(m) if m.payload else DeleteRetained(m.topic) for m in messages]
            )

    def peer_down(self, worker: int) -> None:
        durable = self.routes.durable.filters_of(worker)  # before they go with its routes
        self.routes.peer_down(worker)
        self.ops.peer_down(worker)
        self.shares.peer_down(worker)
        self.numbered.peer_down(worker, durable)
        self.publishers.peer_down(worker)  # a node gone leaves no publisher here paused
        self.remote_gates.peer_down(worker)
        self.moves.peer_down(worker)
        if self.registry is not None:
            self.registry.peer_down(worker)
        self._tell_nodes_changed()

    def frames_received(self, worker: int, frames: list[Frame]) -> None:
        for frame in frames:
            kind = type(frame)
            if kind in _FORWARDING_FRAMES:
                self._forwarding_frame(worker, frame)
            elif kind is Retained or kind is RetainedSnapshot:
                assert isinstance(frame, Retained | RetainedSnapshot)
                self._retained_received(frame.messages, merge=kind is RetainedSnapshot)
            elif kind is SharesChanged or kind is SharesSnapshot:
                assert isinstance(frame, SharesChanged | SharesSnapshot)
                self.shares.frame_received(worker, frame)
            elif kind in ROUTE_FRAMES:
                self._route_frame(worker, frame)
            elif kind in MOVE_FRAMES:  # a session moving between nodes
                self.moves.frame_received(worker, frame)
            elif kind in _CLAIM_FRAMES and self.registry is not None:
                self._claim_frame(self.registry, worker, frame)
            elif kind is OpsRequest or kind is OpsReply:  # the admin API's, `cluster.ops`
                assert isinstance(frame, OpsRequest | OpsReply)
                self.ops.frame_received(worker, frame)
            elif kind is FlowHold:
                assert isinstance(frame, FlowHold)
                self.publishers.hold(worker, frame)
            elif kind is FlowRelease:
                assert isinstance(frame, FlowRelease)
                self.publishers.release(worker, frame)
            # else a frame the cluster does not use (yet): ignored, as a newer peer's would be

    def _route_frame(self, worker: int, frame: Frame) -> None:
        """A frame of `worker`'s routes; its `DurableSnapshot` is the last of the snapshots
        it sends when it links, so its routes are known here again."""
        self.routes.frame_received(worker, frame)  # type: ignore[arg-type]
        if type(frame) is DurableSnapshot:
            self.numbered.routes_known(worker)

    def _forwarding_frame(self, worker: int, frame: Frame) -> None:
        """A publish batch's frames, plain or numbered and confirmed
        (`cluster.numbered_forwarding`)."""
        if isinstance(frame, Forward | ForwardShared | Unconfirmed):
            self.numbered.forward(worker, frame)
        elif isinstance(frame, Numbered):
            self.numbered.numbered(worker, frame)
        elif isinstance(frame, CommitSync):
            self.numbered.commit_sync(worker, frame)
        elif isinstance(frame, Committed):
            self.numbered.committed(worker, frame)

    def _when_all_routes_known(self, then: Callable[[], object]) -> None:
        """`then` once the node's other workers and the other nodes have applied this
        worker's route changes (the router's replication, set after this member)."""
        self._replication.when_routes_known(then)

    def _moved_away(self, client_id: str) -> None:
        if self.registry is not None:
            self.registry.moved_away(client_id)

    def _unconfirmed(self, worker: int, frame: Unconfirmed) -> None:
        """What `worker` had forwarded to this worker's previous life and never saw
        confirmed: to the sessions restored here and on the pool's other workers."""
        sender = self.fabric.name_of(worker)
        if frame.epoch != self.fabric.epoch:
            logger.warning(
                "cluster: %s gave %d messages forwarded to another life of this worker than "
                "this one; dropped",
                sender,
                len(frame.messages),
            )
            return
        self.restored.deliver(self._context.dispatcher, frame.messages, sender)
        if self._relay is not None:
            self._relay(frame.messages)

    def rehosted_session(self, client_id: str, routes: Sequence[tuple[str, Route]]) -> None:
        waits = False
        for topic_filter, route in routes:
            if not reads_local_only(topic_filter) and not is_shared(topic_filter):
                self.restored.add(topic_filter, client_id, route)
                waits = True
        if waits:
            self._settle_restored_later(REHOST_WAIT)

    def _settle_restored_later(self, more: float = 0.0) -> None:
        """The restored sessions stop waiting twice `peer_timeout` from now, at least
        `RESTORE_WAIT_FLOOR` seconds (and `more`), the other nodes having heard of the
        restart by then."""
        if self._settling is not None:
            self._settling.kill(block=False)
        delay = max(2 * self.config.peer_timeout, RESTORE_WAIT_FLOOR) + more
        self._settling = gevent.spawn_later(delay, self.restored.settle)

    def relay_unconfirmed(self, relay: Callable[[tuple[Message, ...]], object]) -> None:
        self._relay = relay

    def unconfirmed_relayed(self, messages: tuple[Message, ...]) -> None:
        self.restored.deliver(self._context.dispatcher, messages, "another worker of this node")

    @staticmethod
    def _claim_frame(registry: ClusterRegistry, worker: int, frame: Frame) -> None:
        """A frame of a client id's claim (`cluster.registry`)."""
        if isinstance(frame, GiveUp):
            registry.give_up(worker, frame)
        elif isinstance(frame, HandedOver):
            registry.handed_over(worker, frame)
        elif isinstance(frame, SessionHandedOver):
            registry.session_handed_over(worker, frame)

    def _forwarded_here(
        self,
        worker: int,
        messages: ForwardedMessages,
        marks: tuple[ShareMark, ...] | None,
        publisher: int,
    ) -> None:
        """Messages another node's worker forwarded: to this worker's subscribers only (and
        to a member of each share group `marks` name), whose sessions hold and release the
        publisher there (`publisher`: its id, 0 none)."""
        self.received += len(messages)
        gate = self._gate(worker, publisher)
        shares = None if marks is None else self.shares.incoming(marks)
        self._context.dispatcher.publish_forwarded(messages, shares, gate)

    def _pick_again(self, worker: int, picks: list[tuple[Message, ShareOrigin]]) -> None:
        """Messages share groups picked members of `worker` for, which it did not confirm
        before it went: to other members of their groups (never `worker`'s again: its
        stand-in joins each one's `tried`), or dropped and logged if none is left."""
        deliveries = [
            Delivery(message, message.qos, message.retain, share=self.shares.local(share))
            for message, share in picks
        ]
        left = self._context.dispatcher.share_again(deliveries, stand_in(PEER_SHARE_IDS + worker))
        if left:
            logger.warning(
                "cluster: %d messages picked for share groups' members on %s, which did not "
                "confirm them, have no other member left to take them: dropped",
                len(left),
                self.fabric.name_of(worker),
            )

    def _gate(self, worker: int, publisher: int) -> Gate | None:
        """What stands for the publishing connection `publisher` of `worker` here."""
        return self.remote_gates.gate(worker, publisher) if publisher else None

    # ----- routes (the router's RouteReplication) -----------------------------------------

    def route_changed(self, topic_filter: str, added: bool) -> None:
        if not reads_local_only(topic_filter):
            self.routes.route_changed(topic_filter, added)

    def restored_route(self, topic_filter: str, client_id: str, route: Route) -> None:
        if reads_local_only(topic_filter):
            return
        self.routes.route_changed(topic_filter, True)
        if not is_shared(topic_filter):  # a group's pick is not waited for (docs/cluster.md)
            self.routes.durable_route_changed(topic_filter, True)
            self.restored.add(topic_filter, client_id, route)

    def durable_route_changed(self, topic_filter: str, added: bool) -> None:
        """A persistent session's route appeared / went: the other nodes' publishers then
        wait for this worker's commit of what they forward to it."""
        if not reads_local_only(topic_filter):
            self.routes.durable_route_changed(topic_filter, added)

    def when_routes_known(self, then: Callable[[], object]) -> None:
        self.routes.when_routes_known(then)

    # ----- publishes (beside the pool's forwarder) ----------------------------------------

    def add(self, message: Message) -> bool:
        """Whether a worker of another node wants `message` (it is then sent at `flush`).
        Asked once per message published on this worker, wanted elsewhere or not."""
        topic = message.topic
        if message.qos and self._kept and not topic.startswith(_LOCAL_ONLY):
            self.numbered.keep(message)  # for the persistent sessions of peers that are down
        workers = self._wanted_by(topic)
        if not workers or topic.startswith(_LOCAL_ONLY):
            return False
        self._outbox.add(workers, message)
        if message.qos:
            self.numbered.add(message, workers)
        return True

    def add_share(self, peer: int, message: Message, share: ShareOrigin) -> None:
        """`message` goes (at `flush`) to `peer`, another node's worker the dispatcher picked
        for the group `share` names."""
        self._outbox.add_share(peer, message, self.shares.outgoing(share))
        if message.qos:
            self.numbered.add_pick(peer)

    def flush(
        self,
        retained: list[Message],
        on_durable: Callable[[], object] | None,
        publisher: Gate | None = None,
    ) -> Callable[[], None] | None:
        """Send what `add` collected, one frame per peer (split past FORWARD_BYTES), and the
        batch's retained messages to every peer. If QoS 1/2 messages went to persistent
        sessions of other nodes and `on_durable` is given, it waits for their commits: the
        callback returned is then to be called once this node's part is committed. The
        frames name `publisher`, the connection that published the batch, for flow control."""
        local_part = None
        if self._outbox:
            flow_id = 0 if publisher is None else self.publishers.id_of(publisher)
            frames = self._outbox.frames(flow_id)
            for _worker, frame in frames:
                self.forwarded += len(frame.messages)
            local_part = self.numbered.send(frames, on_durable)
        kept = tuple(m for m in retained if not m.topic.startswith(_LOCAL_ONLY))
        if kept:
            self.fabric.broadcast(Retained(kept))
        return local_part

    def gather(self, op: str, args: dict[str, Any], timeout: float) -> NodesGathered:
        """Every other node's rows for `op`, and the nodes left out (`cluster.ops`)."""
        return self.ops.gather(op, args, timeout)

    def describe(self) -> dict[str, Any]:
        """The cluster as this worker sees it: one row per node (this one, and each other
        one with its linked workers), and the counts of what crossed."""
        fabric = self.fabric
        nodes: dict[str, list[int]] = {}
        for worker in fabric.peers:
            node, _, number = fabric.name_of(worker).rpartition(".")
            nodes.setdefault(node, []).append(int(number))
        rows: list[dict[str, Any]] = [
            {"node": self.config.node, "state": "this node", "workers": []}
        ]
        rows += [
            {"node": node, "state": "linked", "workers": sorted(workers)}
            for node, workers in sorted(nodes.items())
        ]
        registry = self.registry
        return {
            "data": rows,
            "cluster": {
                "name": self.config.name,
                "node": self.config.node,
                "nats_connected": fabric.connected,
                "forwarded": self.forwarded,
                "received": self.received,
                "sessions_taken_over": 0 if registry is None else registry.taken_over,
                "sessions_moved_in": 0 if registry is None else registry.moved_in,
                "stale_sessions_discarded": 0 if registry is None else registry.discarded,
                "resumed_without_session": (
                    0 if registry is None else registry.resumed_without_session
                ),
            },
        }


def reads_local_only(topic_filter: str) -> bool:
    """Whether `topic_filter` (or a share group's filter) reads only `$SYS` topics, which each
    node publishes for itself: the other nodes are not told of it, so a share group of such
    a filter picks among this node's members only."""
    inner = inner_filter(topic_filter)
    return inner == _LOCAL_ONLY[:-1] or inner.startswith(_LOCAL_ONLY)


def split_frame(frame: KeptFrame, batch: int) -> list[KeptFrame]:
    """`frame` in frames of at most FORWARD_BYTES of payload (at least one message each),
    each a part of the numbered batch `batch` (0: of none)."""
    parts = split_payloads(tuple(frame.messages))  # a tuple as is: frames this worker made
    if len(parts) == 1:
        return [frame if frame.batch == batch else replace(frame, batch=batch)]
    if type(frame) is Forward:
        return [Forward(part, frame.publisher, batch) for part in parts]
    if type(frame) is Unconfirmed:
        return [Unconfirmed(part, frame.epoch, batch) for part in parts]
    assert isinstance(frame, ForwardShared)
    frames: list[KeptFrame] = []
    start = 0
    for part in parts:
        end = start + len(part)
        frames.append(ForwardShared(part, frame.marks[start:end], frame.publisher, batch))
        start = end
    return frames


def split_payloads(messages: tuple[Message, ...]) -> list[tuple[Message, ...]]:
    """`messages` in runs of at most FORWARD_BYTES of payload (at least one message each)."""
    if sum(map(len, map(_payload, messages))) <= FORWARD_BYTES:
        return [messages]  # the usual batch: summed without a Python step per message
    parts: list[tuple[Message, ...]] = []
    start, size = 0, 0
    for index, message in enumerate(messages):
        if size and size + len(message.payload) > FORWARD_BYTES:
            parts.append(messages[start:index])
            start, size = index, 0
        size += len(message.payload)
    parts.append(messages[start:])
    return parts
