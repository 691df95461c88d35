"""How the actors use the durable store: write-ahead with group commit, and restore at start-up.

`Persistence` wraps the store's group-commit writer. Actors describe changes as store ops and
say what to do once they are durable (`submit(ops, then)`): the publisher's PUBACK/PUBREC,
a SUBACK, a PUBCOMP. Without a store (`[store] kind = "none"`) `then` runs at once.

The guarantee (docs/persistence.md): a QoS 1/2 message that a persistent session will
receive is written to that session's stored queue before the publisher gets PUBACK (QoS 1)
or PUBREC (QoS 2), in the same commit as anything submitted before it; so after a SIGKILL
the restarted broker still delivers it. Deliveries carry a broker-wide increasing `seq`
that orders a session's stored messages.

QoS 0 deliveries and clean sessions never touch the store. A subscriber's QoS 1 progress
(sent, acknowledged) is submitted lazily: no acknowledgement waits for it, and a crash that
loses it makes the broker send those messages again, as QoS 1 allows.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from core.session_state import (
    NO_PACKET_IDS,
    Delivery,
    InflightEntry,
    SessionState,
    Stage,
    SubscriptionOptions,
)
from store.base import (
    DeleteMessage,
    MarkInFlight,
    Op,
    SessionMeta,
    StoredDelivery,
    StoredSession,
    StoredSubscription,
)
from store.writer import StoreWriter

logger = logging.getLogger(__name__)

_AWAIT_PUBACK = Stage.AWAIT_PUBACK.value


class Persistence:
    def __init__(self, writer: StoreWriter | None, first_seq: int = 1) -> None:
        self._writer = writer
        self._seqs = itertools.count(first_seq)
        self._worker, self._workers = 0, 1
        self.enabled = writer is not None
        self._failing_at: set[int] = set()  # a pool's other workers whose commits fail

    @property
    def failing(self) -> bool:
        """The store's commits are failing (disk full, I/O error): refuse new durable work.
        In a pool, the store is the pool's: any worker's failing commits count."""
        return bool(self._failing_at) or self.failing_here

    @property
    def failing_here(self) -> bool:
        """This process's store writer's commits are failing."""
        return self._writer is not None and self._writer.failing

    def store_failing_at(self, worker: int, failing: bool) -> None:
        """Pool: `worker` says its commits fail / succeed again (or it went away)."""
        if failing == (worker in self._failing_at):
            return
        if failing:
            self._failing_at.add(worker)
            logger.warning(
                "the store fails on worker %d: QoS 1/2 publishes to persistent sessions are "
                "refused on every worker until that worker commits again",
                worker,
            )
        else:
            self._failing_at.discard(worker)
            logger.info("the store works again on worker %d (or it is gone)", worker)

    def next_seq(self) -> int:
        return next(self._seqs)

    def interleave(self, worker: int, workers: int, after: int = 0) -> None:
        """Pool: this worker's seqs are the numbers above `after` that are `worker` modulo
        `workers`, so the workers sharing the store never give two deliveries of one session
        the same key, and each worker's stay increasing (docs/pool.md)."""
        self._worker, self._workers = worker, workers
        start = (max(after, 0) // workers + 1) * workers + worker
        self._seqs = itertools.count(start, workers)

    def advance_past(self, seq: int) -> None:
        """Pool: a session taken over from another worker holds deliveries up to `seq`; the
        ones this worker adds to it must order after them."""
        upcoming = next(self._seqs)
        if upcoming > seq:
            self._seqs = itertools.count(upcoming, self._workers)
        else:
            self.interleave(self._worker, self._workers, seq)

    def submit(
        self, ops: Sequence[Op], then: Callable[[], object] | None = None, *, lazy: bool = False
    ) -> None:
        """Make `ops` durable, then call `then` (at once when there is no store). `lazy`:
        nothing waits for them and losing them in a crash costs duplicates only, so they
        may wait for a later commit (`StoreWriter.submit`)."""
        if self._writer is None:
            if then is not None:
                then()
            return
        self._writer.submit(ops, then, lazy=lazy)

    def close(self, timeout: float) -> None:
        if self._writer is not None:
            self._writer.close(timeout=timeout)


def may_commit_lazily(ops: Sequence[Op]) -> bool:
    """Whether `ops` only record QoS 1 sends and acknowledgements: losing them in a crash
    means a message is sent again, which QoS 1 allows, so nothing needs to wait for their
    commit. A QoS 2 stage is committed promptly: after a restart the broker must resend the
    right packet (PUBLISH or PUBREL) with the right packet id [MQTT-4.4.0-1]."""
    return all(
        type(op) is DeleteMessage or (type(op) is MarkInFlight and op.stage == _AWAIT_PUBACK)
        for op in ops
    )


def stored_delivery(
    delivery: Delivery, packet_id: int | None = None, stage: Stage | None = None
) -> StoredDelivery:
    """The stored form of a delivery: queued (no packet id) or in flight at `stage`."""
    return StoredDelivery(
        message=delivery.message,
        qos=delivery.qos,
        retain=delivery.retain,
        subscription_ids=delivery.subscription_ids,
        packet_id=packet_id,
        stage=None if stage is None else stage.value,
    )


def stored_subscriptions(state: SessionState) -> dict[str, StoredSubscription]:
    """The stored form of the session's subscriptions."""
    return {
        topic_filter: StoredSubscription(
            qos=options.qos,
            no_local=options.no_local,
            retain_as_published=options.retain_as_published,
            retain_handling=options.retain_handling,
            subscription_id=options.subscription_id,
        )
        for topic_filter, options in state.subscriptions.items()
    }


def session_meta(
    state: SessionState,
    protocol_version: int,
    disconnected_at: float | None,
    subscriptions: Mapping[str, StoredSubscription] | None = None,
) -> SessionMeta:
    """The stored metadata of `state`; pass `subscriptions` if already converted (they only
    change on SUBSCRIBE/UNSUBSCRIBE, the metadata is written on every QoS 2 exchange).
    The session's own expiry is stored, so a restart keeps each client's interval."""
    return SessionMeta(
        protocol_version=protocol_version,
        expiry_interval=state.expiry,
        disconnected_at=disconnected_at,
        next_packet_id=state.next_packet_id,
        subscriptions=stored_subscriptions(state) if subscriptions is None else subscriptions,
        awaiting_rel=frozenset(state.awaiting_rel),
    )


def restored_state(client_id: str, stored: StoredSession, base: SessionState) -> SessionState:
    """A detached persistent `SessionState` rebuilt from the store (limits taken from `base`)."""
    meta = stored.meta
    state = base
    state.client_id = client_id
    state.persistent = True
    state.expiry = meta.expiry_interval
    state.next_packet_id = meta.next_packet_id
    state.awaiting_rel = set(meta.awaiting_rel) if meta.awaiting_rel else NO_PACKET_IDS
    state.subscriptions = {
        topic_filter: SubscriptionOptions(
            qos=sub.qos,
            no_local=sub.no_local,
            retain_as_published=sub.retain_as_published,
            retain_handling=sub.retain_handling,
            subscription_id=sub.subscription_id,
        )
        for topic_filter, sub in meta.subscriptions.items()
    }
    for seq, entry in stored.messages:
        delivery = Delivery(
            entry.message, entry.qos, entry.retain, entry.subscription_ids, None, seq
        )
        if entry.stage is None or entry.packet_id is None:
            if state.queue is None:
                state.queue = deque()
            state.queue.append(delivery)
        else:
            state.inflight[entry.packet_id] = InflightEntry(delivery, Stage(entry.stage))
    return state
