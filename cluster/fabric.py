"""The cluster's fabric: the `pool.fabric.Fabric` between this worker and every worker of the
other nodes, carried by NATS (docs/cluster.md "The fabric").

Every worker of every node is a peer, named `<node>.<worker>`; each gets a local number when
first heard of, which `Fabric`'s callers use like a pool worker's id. The frames are the
pool's own (pool.frames), several per NATS message:
- `mqtt.<cluster>.all.<node>.<worker>`: what a worker broadcasts, and its heartbeat (a
  `Hello` with its epoch, every `heartbeat` seconds);
- `mqtt.<cluster>.to.<node>.<worker>.<from node>.<from worker>`: what it sends one peer.

A peer is up from the first message heard of it, and down after `peer_timeout` seconds of
silence, on its `Leaving`, or when its heartbeat carries a new epoch (it restarted: down, then
up again). A peer whose `Hello` names another `FRAMES_VERSION` (a node of another broker
version) is not linked, and what it sends is dropped until it greets with this version.
The handler's `peer_up` sends the peer this worker's snapshots; the first direct
message to a peer after that begins with a `Hello`, which asks the peer to send its own
snapshots back (it may have taken this worker for gone and dropped what it knew). Frames
from one peer keep their order: one NATS connection each way, and NATS keeps a connection's
order.

The frames of one loop turn leave at its end, consecutive frames for the same destination in
one NATS message (at most a quarter of the server's `max_payload`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import gevent

from cluster.config import ClusterConfig
from cluster.nats_link import NatsLink
from core.message import message_id_floor
from pool.fabric import FabricHandler
from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.frames.peers import FRAMES_VERSION, Hello, Leaving
from pool.frames.validation import FrameError

logger = logging.getLogger(__name__)

_BROADCAST = None  # the destination of a broadcast frame in the outgoing queue


class _Peer:
    __slots__ = ("bridges", "epoch", "greet", "heard", "number", "up")

    def __init__(self, number: int) -> None:
        self.number = number
        self.epoch = -1
        self.up = False
        self.greet = False  # the next direct message begins with a Hello
        self.heard = 0.0  # monotonic time of its last message
        self.bridges: tuple[str, ...] = ()  # its node's, as its last Hello said


class NatsFabric:
    """This worker's links to the other nodes' workers, over NATS."""

    def __init__(
        self,
        config: ClusterConfig,
        worker: int,
        handler: FabricHandler,
        *,
        bridges: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self.worker = worker
        self.name = f"{config.node}.{worker}"
        self.epoch = int.from_bytes(os.urandom(6), "big")  # this life of this worker
        self._hello = Hello(worker, self.epoch, bridges)  # its node's bridges: in every one
        self._handler = handler
        self._clock = clock
        prefix = f"mqtt.{config.name}"
        self._all = f"{prefix}.all."
        self._to = f"{prefix}.to."
        self._mine = f"{prefix}.to.{self.name}."
        self._broadcast_subject = f"{prefix}.all.{self.name}"
        self._own_node = f"{config.node}."
        self._id_clashes: set[str] = set()  # nodes said to count message ids as this one
        self._dropped: dict[str, int] = {}  # sender -> its messages dropped since one parsed
        self._foreign: dict[str, int] = {}  # sender -> the other frames version its Hello named
        self._peers: dict[str, _Peer] = {}  # by name
        self._names: dict[int, str] = {}  # number -> name
        self._queue: list[tuple[int | None, Frame]] = []
        self._flush_due = False
        self._loop = gevent.get_hub().loop
        self._link = NatsLink(
            config,
            f"{config.name}/{self.name}",
            [f"{prefix}.all.>", f"{self._mine}>"],
            self._messages,
            self._link_state,
        )
        self._ticker: gevent.Greenlet[..., Any] | None = None
        self.connected = False
        self.on_link_state: Callable[[bool], None] | None = None  # told of each up and down
        # Told when an up peer's Hello names other bridges than before (one that came up
        # on another frame is heard with none until its next heartbeat).
        self.on_bridges_heard: Callable[[], None] | None = None

    # ----- the Fabric ---------------------------------------------------------------------

    @property
    def peers(self) -> set[int]:
        return {peer.number for peer in self._peers.values() if peer.up}

    def start(self) -> None:
        self._link.start()
        self._ticker = gevent.spawn(self._tick)

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.kill()
        self._queue.append((_BROADCAST, Leaving(self.worker)))
        self._flush()
        self._link.stop()

    def send(self, worker: int, frame: Frame) -> bool:
        name = self._names.get(worker)
        if name is None or not self._peers[name].up:
            return False
        self._queue.append((worker, frame))
        self._flush_soon()
        return True

    def broadcast(self, frame: Frame) -> None:
        self._queue.append((_BROADCAST, frame))
        self._flush_soon()

    @property
    def link(self) -> NatsLink:
        return self._link

    def workers_of(self, node: str) -> list[int]:
        """The linked peers that are workers of `node`."""
        prefix = f"{node}."
        return [p.number for name, p in self._peers.items() if p.up and name.startswith(prefix)]

    def heard_of(self) -> dict[int, str]:
        """Every peer heard of since this worker started, linked or not: number -> name."""
        return dict(self._names)

    def name_of(self, worker: int) -> str:
        """The `<node>.<worker>` name of peer number `worker`."""
        return self._names[worker]

    def bridges_of(self, worker: int) -> tuple[str, ...]:
        """The bridges peer number `worker`'s node has configured, as it last said."""
        return self._peers[self._names[worker]].bridges

    # ----- outgoing -----------------------------------------------------------------------

    def _flush_soon(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            self._loop.run_callback(self._flush)

    def _flush(self) -> None:
        """Publish the queued frames: consecutive ones for one destination in one message."""
        self._flush_due = False
        queue, self._queue = self._queue, []
        limit = max(self._link.max_payload // 4, 1024)
        body: list[bytes] = []
        size = 0
        target: int | None = _BROADCAST
        for destination, frame in queue:
            encoded = encode_frame(frame)
            if body and (destination != target or size + len(encoded) > limit):
                self._publish(target, body)
                body, size = [], 0
            if not body and destination is not _BROADCAST:
                peer = self._peers[self._names[destination]]
                if peer.greet:
                    peer.greet = False
                    body.append(encode_frame(self._hello))
            target = destination
            body.append(encoded)
            size += len(encoded)
        if body:
            self._publish(target, body)

    def _publish(self, target: int | None, body: list[bytes]) -> None:
        subject = (
            self._broadcast_subject
            if target is _BROADCAST
            else f"{self._to}{self._names[target]}.{self.name}"
        )
        self._link.publish(subject, b"".join(body))

    def _tick(self) -> None:
        """Every heartbeat: say this worker is alive, and take silent peers for gone."""
        while True:
            if self.connected:
                self._queue.append((_BROADCAST, self._hello))
                self._flush()
            now = self._clock()
            for name, peer in self._peers.items():
                if peer.up and now - peer.heard > self._config.peer_timeout:
                    logger.warning(
                        "cluster: no word from %s for %.1f s: taken for gone, its routes dropped",
                        name,
                        now - peer.heard,
                    )
                    self._down(peer)
            gevent.sleep(self._config.heartbeat)

    # ----- incoming -----------------------------------------------------------------------

    def _link_state(self, up: bool) -> None:
        self.connected = up
        if self.on_link_state is not None:
            self.on_link_state(up)
        if up:
            self._queue.append((_BROADCAST, self._hello))
            self._flush()

    def _messages(self, messages: list[tuple[str, bytes]]) -> None:
        now = self._clock()
        for subject, body in messages:
            if subject.startswith(self._all):
                sender = subject[len(self._all) :]
                if sender.startswith(self._own_node):
                    continue  # this node's workers: the pool links them
                direct = False
            elif subject.startswith(self._mine):
                sender = subject[len(self._mine) :]
                direct = True
            else:
                continue
            try:
                frames = FrameDecoder().feed(body)
            except FrameError as error:
                if sender not in self._foreign:  # from a node of another version: expected
                    self._unparsed(sender, error)
                continue
            if not self._speaks_ours(sender, frames):
                continue
            if sender in self._dropped:
                logger.warning(
                    "cluster: messages from %s parse again; %d were dropped",
                    sender,
                    self._dropped.pop(sender),
                )
            self._received(sender, direct, frames, now)

    def _speaks_ours(self, sender: str, frames: list[Frame]) -> bool:
        """Whether `frames` are to be taken: not if their sender's last `Hello` named another
        `FRAMES_VERSION` (logged once per sender and version; a peer it was is taken for
        gone), until a `Hello` of this version comes from it."""
        hello = frames[0] if frames and type(frames[0]) is Hello else None
        if hello is None:
            return sender not in self._foreign
        assert isinstance(hello, Hello)
        if hello.frames == FRAMES_VERSION:
            if self._foreign.pop(sender, None) is not None:
                logger.warning("cluster: %s speaks this node's frames again", sender)
            return True
        if self._foreign.get(sender) != hello.frames:
            self._foreign[sender] = hello.frames
            logger.error(
                "cluster: %s speaks frame version %d and this node %d: not linked, its "
                "messages dropped; run one broker version on every node of cluster %r",
                sender,
                hello.frames,
                FRAMES_VERSION,
                self._config.name,
            )
        peer = self._peers.get(sender)
        if peer is not None and peer.up:
            self._down(peer)
        return False

    def _unparsed(self, sender: str, error: FrameError) -> None:
        """Drop a message from `sender` that does not parse: logged for the first of a
        series, counted for the others (a node of another version sends many)."""
        dropped = self._dropped.get(sender)
        self._dropped[sender] = 1 if dropped is None else dropped + 1
        if dropped is None:
            logger.error(
                "cluster: a message from %s does not parse (%s): dropped, as are the next "
                "ones from it until one parses; do all nodes of cluster %r run the same "
                "broker version?",
                sender,
                error,
                self._config.name,
            )

    def _received(self, sender: str, direct: bool, frames: list[Frame], now: float) -> None:
        peer = self._peers.get(sender)
        if peer is None:
            peer = _Peer(len(self._names) + 1)
            self._peers[sender] = peer
            self._names[peer.number] = sender
        peer.heard = now
        if frames and type(frames[0]) is Hello:
            hello = frames[0]
            assert isinstance(hello, Hello)
            frames = frames[1:]
            if direct:  # it (re)discovered this worker: it wants the snapshots again
                # What is queued for it in the life it greets from still reaches it, after
                # the greeting (a restart heard in the same turn queued what goes first).
                self._down(peer, quiet=True, keep_queued=hello.epoch == peer.epoch)
            elif peer.up and hello.epoch != peer.epoch:
                logger.info("cluster: %s restarted", sender)
                self._down(peer, quiet=True)
            peer.epoch = hello.epoch
            heard_other = peer.bridges != hello.bridges
            peer.bridges = hello.bridges
            if not peer.up:
                self._up(peer, sender, greet=not direct)
            elif heard_other and self.on_bridges_heard is not None:
                self.on_bridges_heard()
        elif not peer.up and not (frames and type(frames[-1]) is Leaving):
            self._up(peer, sender, greet=True)
        leaving = bool(frames) and type(frames[-1]) is Leaving
        if leaving:
            frames = frames[:-1]
        if frames and peer.up:
            self._handler.frames_received(peer.number, frames)
        if leaving and peer.up:
            logger.info("cluster: %s is leaving", sender)
            self._down(peer, quiet=True)

    def _up(self, peer: _Peer, name: str, *, greet: bool) -> None:
        peer.up = True
        peer.greet = greet
        logger.info("cluster: linked to %s", name)
        node = name.rpartition(".")[0]
        own = self._own_node[:-1]
        alike = node != own and message_id_floor(0, node) == message_id_floor(0, own)
        if alike and node not in self._id_clashes:
            self._id_clashes.add(node)
            logger.warning(
                "cluster: nodes %r and %r count message ids in the same space (their names "
                "hash alike), so the message ids of their event files may coincide (join "
                "events on node and message_id); rename one of them ([cluster] node)",
                own,
                node,
            )
        self._handler.peer_up(peer.number, peer.epoch)

    def _down(self, peer: _Peer, *, quiet: bool = False, keep_queued: bool = False) -> None:
        if not peer.up:
            return
        peer.up = False
        peer.greet = False
        if not keep_queued:
            self._queue = [(d, f) for d, f in self._queue if d != peer.number]
        if not quiet:
            logger.info("cluster: %s is down", self._names[peer.number])
        self._handler.peer_down(peer.number)
