"""A session moving between the workers of a pool: what its new owner delivers, holds and
drops while the previous owner still forwards (docs/pool.md "Deliveries during a move").

The previous owner (A) hands the session over through the store, then forwards, in arrival
order, the deliveries that still reach it for the session; the new owner (B) routes new
messages to the session directly once its routes are in. Until A says the forwarding has
ended, B cannot tell whether a direct delivery was sent to A as well (a worker that knows
both routes sends to both) or whether an earlier message of the same publisher is still on
its way through A. `MoveIn` is B's side:

- forwarded deliveries are delivered as they come, except those B loaded from the store
  (the same seq: A commits the put of a delivery before forwarding it, so B may have
  loaded it already; a delivery from another node of a cluster comes without a seq, as
  the nodes' stores number apart, and is known by its message);
- direct deliveries are held until the end of the forwarding; then those the session
  already has (the same message as one loaded or forwarded) are dropped as duplicates
  and the rest delivered, in order. So per publisher the order holds: what went through A
  came before what came directly;
- after the end, a direct delivery can still be a late copy of one A forwarded (its link
  is slower than A's): the known ids are checked until the session is told that every
  worker's earlier sends have arrived, and then `MoveIn` is dropped.

A message is known by its id and its timestamp (`message_key`): the ids of two cluster nodes
whose names hash alike count in the same space (`core.message.message_id_floor`), and two
different messages with one id are then told apart by when they were published.

`queued_qos0` and `insert_qos0` carry the QoS 0 deliveries of an offline queue, which the
store does not hold, in the hand-over and put them back where they were in the queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from core.session_state import Delivery

MessageKey = tuple[int, float]  # a message's id and timestamp


def message_key(delivery: Delivery) -> MessageKey | None:
    """What tells `delivery`'s message from any other; None for a message without an id
    (never a duplicate)."""
    message = delivery.message
    return (message.message_id, message.timestamp) if message.message_id else None


class MoveIn:
    """The new owner's side of a session's move; see the module docstring."""

    __slots__ = ("_held", "_known", "_loaded", "_seqs", "ended", "forwarded_count")

    def __init__(self, loaded: Iterable[Delivery]) -> None:
        """`loaded`: the deliveries the session was loaded with (from the store)."""
        loaded = list(loaded)
        self._seqs = {delivery.seq for delivery in loaded if delivery.seq}
        # The messages the session has had, by `message_key`.
        self._known = {key for key in map(message_key, loaded) if key is not None}
        self._loaded = frozenset(self._known)
        self._held: list[Delivery] = []
        self.ended = False
        self.forwarded_count = 0  # deliveries the previous owner forwarded, new or not

    def forwarded(self, deliveries: Iterable[Delivery]) -> list[Delivery]:
        """The deliveries A forwarded that the session does not have yet, in order."""
        fresh: list[Delivery] = []
        for delivery in deliveries:
            self.forwarded_count += 1
            if delivery.seq and delivery.seq in self._seqs:
                continue  # loaded from the store: the same stored delivery
            key = message_key(delivery)
            if not delivery.seq and key in self._loaded:
                continue  # from another node (no seq of this store): one loaded already
            if delivery.seq:
                self._seqs.add(delivery.seq)
            if key is not None:
                self._known.add(key)
            fresh.append(delivery)
        return fresh

    def orphaned(self, deliveries: Iterable[Delivery]) -> tuple[list[Delivery], list[Delivery]]:
        """Deliveries of messages another worker kept for the session while its worker was
        dead (`pool.orphans`), as (new, duplicates): a message the session has (the dead
        worker stored it, or another worker kept it too) is a duplicate."""
        fresh: list[Delivery] = []
        duplicates: list[Delivery] = []
        known = self._known
        for delivery in deliveries:
            key = message_key(delivery)
            if key in known:
                duplicates.append(delivery)
                continue
            if key is not None:
                known.add(key)
            if delivery.seq:
                self._seqs.add(delivery.seq)
            self.forwarded_count += 1
            fresh.append(delivery)
        return fresh, duplicates

    def direct(self, deliveries: list[Delivery]) -> tuple[list[Delivery], list[Delivery]]:
        """Deliveries routed to the session on its new worker: (to deliver now, duplicates
        of forwarded ones). Before the end, all are held: ([], [])."""
        if not self.ended:
            self._held += deliveries
            return [], []
        return self._split(deliveries)

    def end(self) -> tuple[list[Delivery], list[Delivery]]:
        """A forwards nothing more: the held deliveries, (to deliver, duplicates)."""
        self.ended = True
        held, self._held = self._held, []
        return self._split(held)

    def _split(self, deliveries: list[Delivery]) -> tuple[list[Delivery], list[Delivery]]:
        known = self._known
        if not known:
            return deliveries, []
        keep = [d for d in deliveries if message_key(d) not in known]
        if len(keep) == len(deliveries):
            return deliveries, []
        return keep, [d for d in deliveries if message_key(d) in known]


def queued_qos0(queue: Iterable[Delivery] | None) -> tuple[list[Delivery], list[int]]:
    """The QoS 0 deliveries of a queue, each with the seq of the stored delivery before it
    in the queue (0: none): what the store does not hold, and where it was."""
    qos0: list[Delivery] = []
    after: list[int] = []
    last_stored = 0
    for delivery in queue or ():
        if delivery.seq:
            last_stored = delivery.seq
        elif delivery.qos == 0:
            qos0.append(delivery)
            after.append(last_stored)
    return qos0, after


def insert_qos0(
    queue: Iterable[Delivery] | None, qos0: Iterable[Delivery], after: Iterable[int]
) -> deque[Delivery] | None:
    """`queue` with each of `qos0` back after the stored delivery whose seq `after` names;
    at the head if that one is not queued (it went in flight, or none was before it).
    Deliveries with the same place keep their order."""
    queued = list(queue or ())
    seqs = {delivery.seq for delivery in queued if delivery.seq}
    following: dict[int, list[Delivery]] = {}
    for delivery, seq in zip(qos0, after, strict=True):
        following.setdefault(seq if seq in seqs else 0, []).append(delivery)
    merged: deque[Delivery] = deque(following.get(0, ()))
    for delivery in queued:
        merged.append(delivery)
        if delivery.seq:
            merged.extend(following.get(delivery.seq, ()))
    return merged or None
