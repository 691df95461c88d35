"""A worker's QoS 1/2 forwarding to other nodes: numbered, confirmed by the receiver, sent
again after a lost NATS connection, and awaited by the publisher's acknowledgement where a
persistent session stores it (docs/cluster.md "Forwarding a QoS 1/2 message").

`ClusterMember` hands it each publish batch's frame per peer (a `Forward`, or a
`ForwardShared` where a share group picked a member of the peer). A peer that wants a QoS 1/2
message of the batch, or is picked for one, gets `Numbered`, the frame (split past
FORWARD_BYTES) and `CommitSync`; the batch is
kept (`cluster.commits.SentBatches`) until the peer's `Committed`, which it sends once its
store has what it got before. If one of the peer's persistent sessions (the replicated
`durable` routes, as in the pool) wants such a message, the publisher's acknowledgement
waits for that `Committed` too (`pool.ack_waits.AckWaits`, as the pool's waits for its
workers' commits); for clean sessions only, it does not. Kept batches are sent again, in
order, to a peer that has not confirmed the oldest of them for `peer_timeout` seconds, to
every peer a heartbeat after this worker's NATS connection comes back, and to a peer that
is linked again in the same life; the receiver takes each number once, delivering a batch
when it has arrived whole, at its `CommitSync` (`ReceivedBatches`). Every part of a batch and
its `CommitSync` name its number, and `Numbered` counts its parts: NATS loses whole
messages, a long batch spans several, and a batch whose head or any part was lost is
neither delivered in part nor confirmed, but taken whole when it comes again.

The receiver confirms a batch that an acknowledgement waits for (`Numbered.awaited`) at
once, and gathers the confirmations of the others for up to CONFIRM_DELAY (one `Committed`,
of the latest, confirms them all): a stream of batches for clean sessions then costs a few
NATS messages back a second, not one per batch.

A peer taken for gone (`peer_timeout` of silence, a clean stop, a restart) is not waited for:
the acknowledgements go. The share groups' picks of the batches it had not confirmed are taken
out of them and picked again among the members left (`repick`: the dispatcher's
`share_again`), as a member that leaves gives its messages back: a group's message is then
at least once, not lost with a node. What else it had not confirmed is sent again if it
comes back in the same life (its NATS connection was cut); if it restarted, its QoS 1/2
messages go to the new life as its first numbered batch (of `Unconfirmed`, kept and sent
again until confirmed as any batch), for the persistent sessions it restored, which take
those they lack (`cluster.restored_sessions`). While a peer is down, what is published here
for its persistent sessions is kept (`cluster.kept_for_down`) and goes to it once its
routes are known again (`routes_known`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent

from actors.persistence import Persistence
from cluster.commits import Batch, ReceivedBatches, SentBatches, Verdict
from cluster.config import ClusterConfig
from cluster.fabric import NatsFabric
from cluster.kept_for_down import KeptForDown
from core.message import Message
from core.share_origin import ShareMark, ShareOrigin
from core.wire_messages import ForwardedMessages
from pool.ack_waits import AckWaits
from pool.frames.forwarding import (
    CommitSync,
    Committed,
    Forward,
    ForwardShared,
    Numbered,
    Unconfirmed,
)
from router.route_replica import RemoteRoutes

logger = logging.getLogger(__name__)

CONFIRM_DELAY = 0.02  # seconds a receiver may gather the confirmations nothing waits for
_ORDINARY = ShareMark(True, ())  # a message for the ordinary subscribers only

# A peer's frame of a publish batch: its ordinary subscribers' messages, or also (or only)
# those a share group picked one of its members for.
BatchFrame = Forward | ForwardShared
# What a numbered batch carries: a publish batch's frame, or what a restarted peer's
# previous life never confirmed, for the sessions it restored.
KeptFrame = Forward | ForwardShared | Unconfirmed
# Splits a batch's frame into frames of at most FORWARD_BYTES of payload, each a part of the
# numbered batch given (0: of none): split(frame, batch) (cluster.member's).
Split = Callable[[KeptFrame, int], list[KeptFrame]]
# Delivers messages another node's worker forwarded to this worker's subscribers (and share
# groups' members: `marks`, as the sender marked them, or None):
# deliver(sender, messages, marks, publisher), `publisher` the sender's flow-control id.
Deliver = Callable[[int, ForwardedMessages, tuple[ShareMark, ...] | None, int], None]
# Gives the sessions restored here what a peer's `Unconfirmed` carries:
# restored(sender, frame).
Restored = Callable[[int, Unconfirmed], None]
# Picks again, among the members left, the share groups' picks a peer did not confirm before
# it was taken for gone or restarted: repick(peer, [(message, group it was picked for)]).
Repick = Callable[[int, list[tuple[Message, ShareOrigin]]], None]


class _Incoming:
    """The numbered batch a sender is sending now: its number (`seq`) and how many parts it
    has (`parts`) and how many arrived (`arrived`), whether it is taken, skipped (a resend
    of one taken before) or dropped (`verdict`), whether an acknowledgement waits for its
    confirmation (`awaited`), and, if taken, what has arrived of it so far."""

    __slots__ = (
        "arrived",
        "awaited",
        "marks",
        "messages",
        "parts",
        "publisher",
        "restored_epoch",
        "seq",
        "verdict",
    )

    def __init__(self, frame: Numbered, verdict: Verdict) -> None:
        self.seq = frame.seq
        self.parts = frame.parts
        self.arrived = 0
        self.verdict = verdict
        self.awaited = frame.awaited
        self.messages: list[Message] = []
        self.marks: list[ShareMark] | None = None  # once a frame of it had share marks
        self.publisher = 0  # the sender's flow-control id of the batch's publisher
        # If it carries `Unconfirmed`, not a publish: the receiver's life it is for.
        self.restored_epoch: int | None = None

    def add(self, frame: KeptFrame) -> None:
        """A frame of the batch (to deliver whole at its end)."""
        if type(frame) is Unconfirmed:
            self.messages += frame.messages
            self.restored_epoch = frame.epoch
            return
        assert isinstance(frame, Forward | ForwardShared)
        marks = self.marks
        if type(frame) is ForwardShared:
            if marks is None:  # the messages before it were for ordinary subscribers only
                marks = self.marks = [_ORDINARY] * len(self.messages)
            marks += frame.marks
        elif marks is not None:
            marks += [_ORDINARY] * len(frame.messages)
        self.messages += frame.messages
        self.publisher = frame.publisher


class NumberedForwarding:
    """This worker's numbered batches to other nodes' workers, and theirs to it."""

    def __init__(
        self,
        config: ClusterConfig,
        fabric: NatsFabric,
        durable: RemoteRoutes,
        persistence: Callable[[], Persistence],
        *,
        split: Split,
        deliver: Deliver,
        restored: Restored,
        repick: Repick,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._fabric = fabric
        self._durable = durable  # the other nodes' workers' persistent sessions' filters
        # The node's persistence, read when a `Committed` is due: the broker replaces the one
        # it starts with (no store) once its store is open, after this object is made.
        self._persistence = persistence
        self._split = split
        self._deliver = deliver
        self._restored = restored
        self._repick = repick
        self._clock = clock
        self._to: set[int] = set()  # peers wanting a QoS 1/2 message of this batch
        self._stored_by: set[int] = set()  # those of them whose persistent sessions want one
        self._token = 0
        self._sent = SentBatches()
        self._acks = AckWaits()
        self._received = ReceivedBatches()
        self._incoming: dict[int, _Incoming] = {}  # per sender: the batch it sends now
        # Per sender: the latest token committed here and not confirmed yet (gathered).
        self._unconfirmed: dict[int, int] = {}
        self._confirming: gevent.Greenlet[..., Any] | None = None  # sends them, soon
        self._gaps: set[int] = set()  # senders whose batches are dropped until they resend
        self._resend_all = False  # NATS came back: every kept batch goes again
        # What is published here for the persistent sessions of peers that are down, and
        # the peers up again whose routes are not known yet (whether they restarted).
        self.kept = KeptForDown(config.down_queue)
        self._returning: dict[int, bool] = {}
        self._ticker: gevent.Greenlet[..., Any] | None = None

    def start(self) -> None:
        self._ticker = gevent.spawn(self._tick)

    def stop(self) -> None:
        """Stop, confirming now what is committed and not confirmed yet: a peer would else
        send it again to this worker's next life (or pick its share picks again)."""
        if self._ticker is not None:
            self._ticker.kill()
        if self._confirming is not None:
            self._confirming.kill()
            self._confirm_gathered()

    # ----- sending ------------------------------------------------------------------------

    def add(self, message: Message, peers: tuple[int, ...]) -> None:
        """`message`, QoS 1 or 2, is forwarded to `peers` in this batch: they get it
        numbered; note those whose persistent sessions store it."""
        self._to.update(peers)
        durable = self._durable.workers_cached(message.topic)
        if durable:
            self._stored_by.update(durable)

    def keep(self, message: Message) -> None:
        """`message`, QoS 1/2, published on this worker while peers are down: kept for those
        whose persistent sessions want it."""
        filled = self.kept.offer(message)
        for peer in filled or ():
            logger.warning(
                "cluster: %d messages kept for the persistent sessions of %s, which is down "
                "([cluster] down_queue): the oldest are dropped from now on, and counted",
                self._config.down_queue,
                self._fabric.name_of(peer),
            )

    def add_pick(self, peer: int) -> None:
        """A QoS 1/2 message of this batch goes to `peer`, picked for a share group: it gets
        the batch numbered (a group's pick is not waited for)."""
        self._to.add(peer)

    def send(
        self,
        frames: list[tuple[int, BatchFrame]],
        on_durable: Callable[[], object] | None,
    ) -> Callable[[], None] | None:
        """Send the batch's frame per peer, numbered to the peers that want a QoS 1/2
        message of it. If persistent sessions of some of them store one and `on_durable` is
        given, `on_durable` waits for their commits: the callback returned is to be called
        once this worker's own part is committed."""
        numbered_to, self._to = self._to, set()
        stored_by, self._stored_by = self._stored_by, set()
        fabric = self._fabric
        waiting: set[int] = set()
        token = 0
        for worker, frame in frames:
            if worker in numbered_to and self._sent.epoch_of(worker) is not None:
                if not token:
                    self._token += 1
                    token = self._token
                awaited = worker in stored_by
                batch = self._sent.add(worker, token, frame, self._clock(), awaited=awaited)
                if self._send_batch(worker, batch) and awaited:
                    waiting.add(worker)
            else:
                for part in self._split(frame, 0):
                    fabric.send(worker, part)
        if on_durable is None or not waiting:
            return None
        return self._acks.wait(token, waiting, on_durable)

    def _send_batch(self, worker: int, batch: Batch) -> bool:
        """Numbered, the frame (in parts), CommitSync: False if `worker` is not linked."""
        epoch = self._sent.epoch_of(worker)
        assert epoch is not None
        fabric = self._fabric
        parts = self._split(batch.frame, batch.seq)
        first = self._sent.first(worker)
        if not fabric.send(worker, Numbered(batch.seq, first, epoch, batch.awaited, len(parts))):
            return False
        for part in parts:
            fabric.send(worker, part)
        fabric.send(worker, CommitSync(batch.token, batch.seq))
        return True

    def _tick(self) -> None:
        """Every heartbeat: send again what a peer has not confirmed for `peer_timeout`
        seconds (everything, once NATS is back)."""
        while True:
            gevent.sleep(self._config.heartbeat)
            after = -1.0 if self._resend_all else self._config.peer_timeout
            self._resend_all = False
            for worker, batches in self._sent.due(self._clock(), after, self._fabric.peers).items():
                logger.warning(
                    "cluster: %d batches (%d messages) with QoS 1/2 messages for %s not "
                    "confirmed yet: sent again (a NATS connection was lost meanwhile?)",
                    len(batches),
                    sum(len(batch.frame.messages) for batch in batches),
                    self._fabric.name_of(worker),
                )
                self._resend(worker, batches)

    def _resend(self, worker: int, batches: list[Batch]) -> None:
        for batch in batches:
            if not self._send_batch(worker, batch):
                return

    def link_up(self) -> None:
        """This worker's NATS connection is back: what was sent meanwhile may be lost."""
        self._resend_all = True

    # ----- peers --------------------------------------------------------------------------

    def peer_up(self, worker: int, epoch: int) -> None:
        self._incoming.pop(worker, None)  # a batch cut by the link's loss is sent again
        restarted = self._sent.epoch_of(worker) not in (None, epoch)
        picks = self._sent.take_picks(worker) if restarted else []
        unconfirmed = tuple(m for m in self._sent.forget(worker, epoch) if m.qos)
        self._resend(worker, self._sent.peer_up(worker, epoch))  # none if it restarted
        if unconfirmed:
            logger.warning(
                "cluster: %s restarted before confirming %d QoS 1/2 messages forwarded to "
                "it: given to its new life, for the persistent sessions it restored (those "
                "it had stored are not delivered twice); see its log for why it restarted",
                self._fabric.name_of(worker),
                len(unconfirmed),
            )
            self._give_restored(worker, unconfirmed)
        self._pick_again(worker, picks)
        # What was kept goes once its routes are known, as to a restarted worker if it
        # restarted since they were last known (it may re-link in its new life first).
        self._returning[worker] = restarted or self._returning.get(worker, False)

    def routes_known(self, worker: int) -> None:
        """`worker`'s routes are known here again (its `DurableSnapshot` came): what was
        published here for its persistent sessions while it was down goes to it now, before
        anything published from now on. A worker that restarted gets it as `Unconfirmed`,
        for the sessions it restored; one that was cut off, as a numbered batch."""
        restarted = self._returning.pop(worker, None)
        if restarted is None:
            return
        kept, dropped = self.kept.up(worker)
        if not kept:
            return
        logger.warning(
            "cluster: %s is back: given the %d QoS 1/2 messages published here for its "
            "persistent sessions while it was down (%d older ones were dropped past [cluster] "
            "down_queue)",
            self._fabric.name_of(worker),
            len(kept),
            dropped,
        )
        if restarted:
            self._give_restored(worker, kept)
            return
        self._token += 1
        batch = self._sent.add(worker, self._token, Forward(kept), self._clock(), awaited=False)
        self._send_batch(worker, batch)

    def _give_restored(self, worker: int, messages: tuple[Message, ...]) -> None:
        """`messages` to the sessions `worker`'s new life restored, as its first batch
        (before any later one, so per publisher the order holds), kept and sent again until
        it confirms it as any batch."""
        epoch = self._sent.epoch_of(worker)
        if epoch is None:
            return
        self._token += 1
        frame = Unconfirmed(messages, epoch)
        batch = self._sent.add(worker, self._token, frame, self._clock(), awaited=False)
        self._send_batch(worker, batch)

    def peer_down(self, worker: int, durable: frozenset[str]) -> None:
        """`worker` is down; `durable`: the filters its persistent sessions subscribed to,
        for which what is published here is kept until it is back."""
        self.kept.down(worker, durable)
        released = self._acks.peer_gone(worker)
        if released:
            logger.warning(
                "cluster: %s is gone before confirming it stored messages for its persistent "
                "sessions: %d acknowledgements no longer wait for it; those messages are "
                "sent again if it comes back without restarting",
                self._fabric.name_of(worker),
                released,
            )
        self._pick_again(worker, self._sent.take_picks(worker))

    def _pick_again(self, worker: int, picks: list[tuple[Message, ShareOrigin]]) -> None:
        """The share groups' picks `worker` did not confirm, to other members."""
        if not picks:
            return
        logger.warning(
            "cluster: %s did not confirm %d messages picked for members of share groups "
            "there: picked again among the groups' other members (any it delivered before "
            "it went arrive twice)",
            self._fabric.name_of(worker),
            len(picks),
        )
        self._repick(worker, picks)

    # ----- receiving ----------------------------------------------------------------------

    def numbered(self, worker: int, frame: Numbered) -> None:
        """The next `Forward`s from `worker` are its batch `frame.seq` (a batch begun before
        and not ended by its `CommitSync` lost its end: it is not taken)."""
        epoch = self._sent.epoch_of(worker)
        if frame.epoch != self._fabric.epoch or epoch is None:
            verdict = Verdict.DROP  # for this worker's previous life
        else:
            verdict = self._received.batch(worker, epoch, frame.seq, frame.first)
        if verdict is not Verdict.DROP:
            self._gaps.discard(worker)
        elif worker not in self._gaps:
            self._gaps.add(worker)
            logger.warning(
                "cluster: batch %d from %s follows one that did not arrive (lost with a NATS "
                "connection) or is for this worker's previous life: dropped until it sends "
                "again",
                frame.seq,
                self._fabric.name_of(worker),
            )
        self._incoming[worker] = _Incoming(frame, verdict)

    def forward(self, worker: int, frame: KeptFrame) -> None:
        """A `Forward`, `ForwardShared` or `Unconfirmed` from `worker`: a plain batch's
        (QoS 0 only) delivered now; a numbered batch's part kept to deliver the batch whole
        at its end if it is taken, else ignored, as a part of a batch whose `Numbered` was
        lost (it comes again whole). An `Unconfirmed` is always a numbered batch's part."""
        if not frame.batch:
            if isinstance(frame, Forward | ForwardShared):
                marks = frame.marks if type(frame) is ForwardShared else None
                self._deliver(worker, frame.messages, marks, frame.publisher)
            else:
                logger.warning(
                    "cluster: %s sent %d messages for restored sessions outside a numbered "
                    "batch: dropped; do all nodes of the cluster run the same broker version?",
                    self._fabric.name_of(worker),
                    len(frame.messages),
                )
            return
        incoming = self._incoming.get(worker)
        if incoming is None or incoming.seq != frame.batch:
            return
        incoming.arrived += 1
        if incoming.verdict is Verdict.TAKE:
            incoming.add(frame)

    def commit_sync(self, worker: int, frame: CommitSync) -> None:
        """The end of a numbered batch: delivered if taken, and `Committed` once the store
        has what came before. A batch to take whose `Numbered` or a part was lost on the
        way is neither delivered nor answered: the sender sends it again. A resend of a
        batch taken before is answered, whatever arrived of it."""
        incoming = self._incoming.pop(worker, None)
        if incoming is None or incoming.seq != frame.batch:
            logger.warning(
                "cluster: the end of batch %d from %s arrived without its start (lost with a "
                "NATS connection): not confirmed until it is sent again",
                frame.batch,
                self._fabric.name_of(worker),
            )
            return
        if incoming.verdict is Verdict.DROP:
            return
        if incoming.verdict is Verdict.TAKE:
            if incoming.arrived != incoming.parts:
                logger.warning(
                    "cluster: batch %d from %s arrived with %d of its %d parts (the others "
                    "were lost with a NATS connection): not taken until it is sent again",
                    incoming.seq,
                    self._fabric.name_of(worker),
                    incoming.arrived,
                    incoming.parts,
                )
                return
            if incoming.restored_epoch is not None:
                self._restored(
                    worker, Unconfirmed(tuple(incoming.messages), incoming.restored_epoch)
                )
            else:
                marks = incoming.marks
                self._deliver(
                    worker,
                    tuple(incoming.messages),
                    None if marks is None else tuple(marks),
                    incoming.publisher,
                )
            self._received.taken(worker)
        token = frame.token
        if incoming.awaited:
            self._persistence().submit((), lambda: self._confirm(worker, token))
        else:
            self._persistence().submit((), lambda: self._confirm_soon(worker, token))

    def _confirm(self, worker: int, token: int) -> None:
        """Everything `worker` sent up to `token` is committed here: tell it now (which
        confirms a gathered token too, an older one)."""
        self._unconfirmed.pop(worker, None)
        self._fabric.send(worker, Committed(token))

    def _confirm_soon(self, worker: int, token: int) -> None:
        """As `_confirm`, within CONFIRM_DELAY, with whatever `worker` sends meanwhile."""
        self._unconfirmed[worker] = token
        if self._confirming is None:
            self._confirming = gevent.spawn_later(CONFIRM_DELAY, self._confirm_gathered)

    def _confirm_gathered(self) -> None:
        self._confirming = None
        unconfirmed, self._unconfirmed = self._unconfirmed, {}
        for worker, token in unconfirmed.items():
            self._fabric.send(worker, Committed(token))

    def committed(self, worker: int, frame: Committed) -> None:
        self._acks.committed(worker, self._sent.confirmed(worker, frame.token))
