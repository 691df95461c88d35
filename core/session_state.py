"""Everything the broker keeps for one client id, as pure data with pure transitions.

Nothing here does I/O, so the QoS flows can be tested without sockets, and the whole state
can be serialised for persistent sessions and moved between workers later. Like the
connection's channel (`channel.channel`), the outgoing transitions return a list of ACTIONS,
in the order they must happen, which the session actor (`actors.session_actor`) carries out:

- a bare `Delivery`: write it now as QoS 0 (no packet id; nothing to track or store);
- `SendPublish(packet_id, delivery, dup)`: write a QoS 1/2 PUBLISH; without `dup` the
  delivery has just entered the in-flight window (record it, count it, run
  message.delivered), with `dup` it is a resend on reconnect;
- `SendPubrel(packet_id, delivery, found)`: write PUBREL; `delivery` has just moved to
  AWAIT_PUBCOMP (record it), or is None when nothing changed; `found` is False for a
  PUBREC of a packet id not in flight (5.0: reason 0x92);
- `Completed(delivery)`: the client acknowledged it to the end (delete it from the store,
  run message.acked);
- `Dropped(delivery, reason)`: not kept: queue full, QoS 0 offline or to a slow consumer,
  no longer authorised, expired, too large for the client (count, log, delete from the
  store, run message.dropped);
- `Revoked(topic_filter)`: a subscription the ACL no longer allows was removed;
- `ProtocolViolation(why)`: the client acknowledged a delivery in flight with an
  acknowledgement that does not fit its stage (close the connection as a Protocol Error).

The transitions: `deliver` (new deliveries), `acknowledge` (PUBACK/PUBREC/PUBCOMP), `resume`
(the client is back), `discard` (a PUBLISH that could not be sent) and `keep_readable`
(re-authorisation). Those that take `now` leave out messages whose MQTT 5 Message Expiry
Interval has passed [MQTT-3.3.2-5]: when they leave the queue, and from the resends of
messages the client has not acknowledged receiving. The incoming QoS 2 and subscription
methods answer with a plain value: they have nothing to send.

Outgoing QoS 1/2 (broker -> client) follow ONE path: an in-flight entry whose `stage` says
what acknowledgement it waits for:

    QoS 1: AWAIT_PUBACK --PUBACK--> Completed
    QoS 2: AWAIT_PUBREC --PUBREC--> AWAIT_PUBCOMP (SendPubrel) --PUBCOMP--> Completed

The in-flight window holds at most `max_inflight` entries (the configured window, lowered to
a 5.0 client's Receive Maximum [MQTT-3.3.4-9]) in send order (a dict keeps
insertion order); messages beyond it wait in `queue`, which is bounded (`max_queued`, oldest
dropped first). Packet ids are never reused while in flight [MQTT-2.3.1-2].

Incoming QoS 2 (client -> broker) uses method B of MQTT 3.1.1 figure 4.3: the message is
routed when the PUBLISH arrives and its packet id is kept in `awaiting_rel` until PUBREL, so a
re-sent PUBLISH with the same id is acknowledged but not routed twice [MQTT-4.3.3-2].
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from operator import itemgetter
from typing import NamedTuple

from core.message import Message, is_expired
from core.reasons import DropReason
from core.share_origin import ShareOrigin


class Delivery(NamedTuple):
    """A message on its way to one subscriber, with the QoS and RETAIN flag it goes out with."""

    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...] = ()
    wire: bytes | None = None  # the encoded MQTT 3.x QoS 0 PUBLISH, shared by all its receivers
    seq: int = 0  # order in the session's stored queue; 0 = not stored (QoS 0, clean session)
    share: ShareOrigin | None = None  # the share group it came through (shared subscription)


class Stage(Enum):
    AWAIT_PUBACK = "await_puback"
    AWAIT_PUBREC = "await_pubrec"
    AWAIT_PUBCOMP = "await_pubcomp"


_FIRST_STAGE = {1: Stage.AWAIT_PUBACK, 2: Stage.AWAIT_PUBREC}
_QOS = itemgetter(1)  # Delivery.qos, read in C
NO_PACKET_IDS: frozenset[int] = frozenset()


class Ack(IntEnum):
    """Acknowledgements a client sends for messages the broker delivered to it.

    An IntEnum (valued as the packet type) so table lookups hash in C on the ack hot path.
    """

    PUBACK = 4
    PUBREC = 5
    PUBCOMP = 7


# ack received -> (stage it must find, next stage or None when the delivery is complete).
_TRANSITIONS: dict[Ack, tuple[Stage, Stage | None]] = {
    Ack.PUBACK: (Stage.AWAIT_PUBACK, None),
    Ack.PUBREC: (Stage.AWAIT_PUBREC, Stage.AWAIT_PUBCOMP),
    Ack.PUBCOMP: (Stage.AWAIT_PUBCOMP, None),
}
# The rule an ack that does not fit its delivery's stage breaks, by the delivery's QoS: a
# receiver answers QoS 1 with PUBACK [MQTT-4.3.2-2], QoS 2 with PUBREC and a PUBREL with
# PUBCOMP [MQTT-4.3.3-2].
_RULE_OF_QOS = {1: "MQTT-4.3.2-2", 2: "MQTT-4.3.3-2"}


@dataclass(slots=True)
class InflightEntry:
    delivery: Delivery
    stage: Stage


@dataclass(frozen=True, slots=True)
class SubscriptionOptions:
    """What a client asked for with one topic filter (5.0 options are False/0 in 3.x)."""

    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_id: int | None = None


# ----- actions: what a transition asks the session actor to do -----------------------


@dataclass(slots=True)
class SendPublish:
    """Write a PUBLISH of `delivery` with `packet_id` (a new one entering the window, or with
    `dup` a resend of one in flight [MQTT-4.4.0-1]). QoS 0 never has this action: see below."""

    packet_id: int
    delivery: Delivery
    dup: bool = False


@dataclass(slots=True)
class SendPubrel:
    """Write PUBREL for `packet_id`. `delivery` is the one that has just moved to
    AWAIT_PUBCOMP (to record), or None when nothing changed (a repeated PUBREC, a resend)."""

    packet_id: int
    delivery: Delivery | None
    found: bool = True  # False: the PUBREC's packet id was not in flight


@dataclass(slots=True)
class Completed:
    """An outgoing QoS 1/2 delivery is acknowledged to the end and has left the window."""

    delivery: Delivery


@dataclass(slots=True)
class Dropped:
    """A delivery the session does not keep (queue full, QoS 0 offline or to a slow consumer,
    no longer authorised)."""

    delivery: Delivery
    reason: DropReason


@dataclass(slots=True)
class Revoked:
    """A subscription removed because the client may no longer read its topic filter."""

    topic_filter: str


@dataclass(slots=True)
class ProtocolViolation:
    """The client broke the protocol (`why` says how, citing the rule): close its connection
    as a Protocol Error (5.0: DISCONNECT 0x82)."""

    why: str


# A bare `Delivery` in an action list is itself an action: "write this QoS 0 delivery now,
# without a packet id" (it needs no tracking, and the QoS 0 fan-out path allocates nothing).
Action = Delivery | SendPublish | SendPubrel | Completed | Dropped | Revoked | ProtocolViolation


def with_packet_id(ids: set[int] | frozenset[int], packet_id: int) -> set[int] | frozenset[int]:
    """`ids` with `packet_id` added: a set of packet ids that is the shared NO_PACKET_IDS
    while empty (an empty set is 216 bytes, on every idle connection and session)."""
    if isinstance(ids, set):
        ids.add(packet_id)
        return ids
    return {*ids, packet_id}


def without_packet_id(ids: set[int] | frozenset[int], packet_id: int) -> set[int] | frozenset[int]:
    """`ids` without `packet_id`, NO_PACKET_IDS once empty (see `with_packet_id`)."""
    if packet_id not in ids:
        return ids
    remaining = ids if isinstance(ids, set) else set(ids)
    remaining.discard(packet_id)
    return remaining or NO_PACKET_IDS


class TooManyAwaitingRelError(Exception):
    """More incoming QoS 2 messages await PUBREL than `max_awaiting_rel` allows."""


@dataclass(slots=True)
class SessionState:
    client_id: str
    persistent: bool
    # Seconds the session is kept once detached (math.inf: until resumed); 0 while it is
    # not persistent. Set from each CONNECT and a 5.0 DISCONNECT (`core.client.ClientInfo`).
    expiry: float = 0.0
    max_inflight: int = 32
    max_queued: int = 1000  # 0 = unbounded
    queue_qos0: bool = False
    max_awaiting_rel: int = 100
    subscriptions: dict[str, SubscriptionOptions] = field(default_factory=dict)
    inflight: dict[int, InflightEntry] = field(default_factory=dict)
    # Messages waiting for a free in-flight slot or for the client; None while empty, so an
    # idle session holds no deque (~0.6 KB).
    queue: deque[Delivery] | None = None
    # The incoming QoS 2 ids awaiting PUBREL: a shared empty frozenset until the first one,
    # and again once none waits (an empty set is 216 bytes, on every idle connection).
    awaiting_rel: set[int] | frozenset[int] = NO_PACKET_IDS
    next_packet_id: int = 1
    # In-flight packet ids not resent since `resume` because the window shrank; None: none.
    unsent: deque[int] | None = None

    # ----- outgoing: broker -> client -------------------------------------------------

    def sends_qos0_now(self, connected: bool, drop_qos0: bool) -> bool:
        """Whether `deliver` sends a QoS 0 delivery taken now at once (its action is the
        delivery itself): connected, not dropping QoS 0, nothing queued before it."""
        return connected and not drop_qos0 and not self.queue

    def deliver(
        self, deliveries: list[Delivery], connected: bool, drop_qos0: bool = False
    ) -> Sequence[Action]:
        """Take deliveries for the client, in order; return what to do with each.

        A delivery is sent now if the client is connected, nothing waits before it and (for
        QoS 1/2) the window has room; otherwise it is queued (QoS 0 only with `queue_qos0`,
        else dropped while offline). `drop_qos0` is the owner's slow-consumer verdict: QoS 0
        deliveries are then dropped instead of written.
        """
        if self.sends_qos0_now(connected, drop_qos0) and not any(map(_QOS, deliveries)):
            # All QoS 0 and nothing waits before them: the common fan-out case, checked at
            # C speed; the answer is the list itself, every delivery being its own action.
            return deliveries
        actions: list[Action] = []
        append = actions.append
        for delivery in deliveries:
            if delivery.qos == 0:
                if self.sends_qos0_now(connected, drop_qos0):
                    append(delivery)  # the action "send as QoS 0"
                    continue
                if drop_qos0:
                    append(Dropped(delivery, DropReason.SLOW_CONSUMER))
                    continue
                if not connected and not self.queue_qos0:
                    append(Dropped(delivery, DropReason.QOS0_OFFLINE))
                    continue
            elif connected and not self.queue and len(self.inflight) < self.max_inflight:
                append(SendPublish(self._send(delivery), delivery))
                continue
            self._enqueue(delivery, append)
        return actions

    def acknowledge(
        self, acks: Iterable[tuple[Ack, int]], connected: bool, now: float
    ) -> list[Action]:
        """Apply PUBACK/PUBREC/PUBCOMP packets from the client, in arrival order.

        An ack that matches the stage of its packet id advances it: PUBREC -> SendPubrel,
        PUBACK/PUBCOMP -> Completed. Another ack for an id in flight (PUBREC or PUBCOMP for
        QoS 1, PUBACK for QoS 2, PUBCOMP before PUBREC) would leave the delivery in flight
        for good: it ends the batch with a `ProtocolViolation`, as in Mosquitto (the acks
        before it count; the window is not refilled for a connection that closes). A
        repeated PUBREC gets its PUBREL again [MQTT-4.3.3-1]; an ack for an id not in
        flight (a duplicate, a stray) is ignored, but a PUBREC still gets a PUBREL. If
        slots were freed and the client is connected, queued deliveries follow into the
        window.
        """
        actions: list[Action] = []
        append = actions.append
        inflight = self.inflight
        freed = False
        for ack, packet_id in acks:
            entry = inflight.get(packet_id)
            if entry is not None:
                expected, next_stage = _TRANSITIONS[ack]
                if entry.stage is expected:
                    if self.unsent and packet_id in self.unsent:
                        self.unsent.remove(packet_id)  # acknowledged before its resend
                    if next_stage is None:
                        del inflight[packet_id]
                        append(Completed(entry.delivery))
                        freed = True
                    else:
                        entry.stage = next_stage
                        append(SendPubrel(packet_id, entry.delivery))
                    continue
                if ack is not Ack.PUBREC or entry.stage is Stage.AWAIT_PUBACK:
                    qos = entry.delivery.qos
                    awaited = entry.stage.name.removeprefix("AWAIT_")
                    append(
                        ProtocolViolation(
                            f"{ack.name} for packet id {packet_id}, a QoS {qos} delivery "
                            f"awaiting {awaited} [{_RULE_OF_QOS[qos]}]"
                        )
                    )
                    return actions
            if ack is Ack.PUBREC:
                append(SendPubrel(packet_id, None, found=entry is not None))
        if freed and connected:
            if self.unsent:
                self._resend_unsent(append)
            if self.queue:
                self._fill_window(append, now)
        return actions

    def resume(self, now: float) -> list[Action]:
        """The client is back: resend what is in flight, then fill the window from the queue.

        In-flight entries go in their original send order [MQTT-4.4.0-1]: PUBLISH with DUP
        for those awaiting PUBACK/PUBREC, PUBREL for those awaiting PUBCOMP. A PUBLISH whose
        message expired meanwhile is dropped instead [MQTT-3.3.2-5]. If the window is now
        smaller than what is in flight (a 5.0 client came back with a lower Receive
        Maximum), the PUBLISHes beyond it are resent, in order, as acknowledgements free
        slots [MQTT-3.3.4-9].
        """
        actions: list[Action] = []
        append = actions.append
        self.unsent = None
        sent = 0
        for packet_id, entry in list(self.inflight.items()):
            if entry.stage is Stage.AWAIT_PUBCOMP:
                append(SendPubrel(packet_id, None))
                sent += 1
            elif is_expired(entry.delivery.message, now):
                del self.inflight[packet_id]
                append(Dropped(entry.delivery, DropReason.EXPIRED))
            elif sent >= self.max_inflight:
                if self.unsent is None:
                    self.unsent = deque()
                self.unsent.append(packet_id)
            else:
                append(SendPublish(packet_id, entry.delivery, dup=True))
                sent += 1
        if self.queue and not self.unsent:
            self._fill_window(append, now)
        return actions

    def _resend_unsent(self, append: Callable[[Action], None]) -> None:
        """Resend in-flight PUBLISHes that waited for a slot since `resume`."""
        unsent = self.unsent
        while unsent and len(self.inflight) - len(unsent) < self.max_inflight:
            packet_id = unsent.popleft()
            entry = self.inflight.get(packet_id)
            if entry is not None and entry.stage is not Stage.AWAIT_PUBCOMP:
                append(SendPublish(packet_id, entry.delivery, dup=True))
        if not unsent:
            self.unsent = None

    def discard(self, packet_id: int, connected: bool, now: float) -> list[Action]:
        """A QoS 1/2 PUBLISH could not be sent (too large for the client, expired): it leaves
        the window as if the client had acknowledged it [MQTT-3.1.2-25], and the queue
        moves up. The caller reports the drop."""
        actions: list[Action] = []
        if self.inflight.pop(packet_id, None) is not None and connected:
            if self.unsent:
                self._resend_unsent(actions.append)
            if self.queue:
                self._fill_window(actions.append, now)
        return actions

    def _fill_window(self, append: Callable[[Action], None], now: float) -> None:
        """Move queued deliveries into free in-flight slots (or out as QoS 0); expired ones
        are dropped [MQTT-3.3.2-5]."""
        queue = self.queue
        while queue and len(self.inflight) < self.max_inflight:
            delivery = queue.popleft()
            if delivery.message.properties and is_expired(delivery.message, now):
                append(Dropped(delivery, DropReason.EXPIRED))
            elif delivery.qos == 0:
                append(delivery)
            else:
                append(SendPublish(self._send(delivery), delivery))
        if not queue:
            self.queue = None

    def _send(self, delivery: Delivery) -> int:
        packet_id = self._allocate_packet_id()
        self.inflight[packet_id] = InflightEntry(delivery, _FIRST_STAGE[delivery.qos])
        return packet_id

    def _enqueue(self, delivery: Delivery, append: Callable[[Action], None]) -> None:
        if self.queue is None:
            self.queue = deque()
        elif self.max_queued and len(self.queue) >= self.max_queued:
            append(Dropped(self.queue.popleft(), DropReason.QUEUE_FULL))
        self.queue.append(delivery)

    def shed(self, keep: int, free_bytes: int, qos0: bool) -> list[Dropped]:
        """Drop queued deliveries, oldest first, while more than `keep` wait (0: no bound) or
        fewer than `free_bytes` payload bytes were freed; with `qos0` every queued QoS 0
        delivery as well (a stuck subscriber, docs/overload.md). The in-flight window stays.
        """
        queue = self.queue
        if not queue:
            return []
        dropped: list[Dropped] = []
        if qos0:
            kept: deque[Delivery] = deque()
            for delivery in queue:
                if delivery.qos:
                    kept.append(delivery)
                else:
                    dropped.append(Dropped(delivery, DropReason.SLOW_CONSUMER))
                    free_bytes -= len(delivery.message.payload)
            queue = kept
        while queue and ((keep and len(queue) > keep) or free_bytes > 0):
            delivery = queue.popleft()
            dropped.append(Dropped(delivery, DropReason.QUEUE_FULL))
            free_bytes -= len(delivery.message.payload)
        self.queue = queue or None
        return dropped

    def _allocate_packet_id(self) -> int:
        packet_id = self.next_packet_id
        while packet_id in self.inflight:
            packet_id = packet_id % 65535 + 1
        self.next_packet_id = packet_id % 65535 + 1
        return packet_id

    # ----- incoming QoS 2: client -> broker -------------------------------------------

    def receive_qos2(self, packet_id: int) -> bool:
        """Record an incoming QoS 2 PUBLISH; True if it is new and must be routed."""
        if packet_id in self.awaiting_rel:
            return False
        if len(self.awaiting_rel) >= self.max_awaiting_rel:
            raise TooManyAwaitingRelError(
                f"client {self.client_id!r} has {len(self.awaiting_rel)} QoS 2 messages "
                "awaiting PUBREL (limits.max_awaiting_rel)"
            )
        self.awaiting_rel = with_packet_id(self.awaiting_rel, packet_id)
        return True

    def release(self, packet_id: int) -> bool:
        """PUBREL received: forget the packet id; False if it was not known (PUBCOMP is sent
        either way, in 5.0 with reason 0x92 Packet Identifier not found)."""
        if packet_id not in self.awaiting_rel:
            return False
        self.awaiting_rel = without_packet_id(self.awaiting_rel, packet_id)
        return True

    # ----- subscriptions --------------------------------------------------------------

    def subscribe(self, topic_filter: str, options: SubscriptionOptions) -> bool:
        """Add or replace a subscription [MQTT-3.8.4-3]; True if the filter is new."""
        is_new = topic_filter not in self.subscriptions
        self.subscriptions[topic_filter] = options
        return is_new

    def unsubscribe(self, topic_filter: str) -> bool:
        return self.subscriptions.pop(topic_filter, None) is not None

    # ----- shared subscriptions -------------------------------------------------------

    def take_shared(self, in_flight: bool) -> list[Delivery]:
        """Remove and return the deliveries of shared subscriptions another member may take:
        the queued ones and, with `in_flight` (the session ends), the QoS 1 ones in flight.

        While a persistent session waits for its client, what is in flight stays: it is
        completed to that client when it reconnects [MQTT-4.8.2-4]. A QoS 2 delivery in
        flight never moves: the client may already have it [MQTT-4.8.2-5].
        """
        taken_ids = [
            packet_id
            for packet_id, entry in self.inflight.items()
            if in_flight and entry.delivery.share is not None and entry.stage is Stage.AWAIT_PUBACK
        ]
        taken = [self.inflight.pop(packet_id).delivery for packet_id in taken_ids]
        if self.queue:
            kept: deque[Delivery] = deque()
            for delivery in self.queue:
                (kept if delivery.share is None else taken).append(delivery)
            self.queue = kept or None
        return taken

    # ----- re-authorisation -----------------------------------------------------------

    def keep_readable(self, may_read: Callable[[str, int], bool]) -> list[Revoked | Dropped]:
        """Drop what the client may no longer read: Revoked filters first, then Dropped.

        `may_read(topic filter or topic name, qos)` is the ACL's answer. Subscriptions it
        denies are removed; so are queued messages and in-flight ones the client has not
        received yet (awaiting PUBACK or PUBREC), dropped as NOT_AUTHORIZED. A QoS 2 message
        awaiting PUBCOMP stays: the client has it, only PUBREL is left.
        """
        revoked = [Revoked(f) for f, o in self.subscriptions.items() if not may_read(f, o.qos)]
        for filter_revoked in revoked:
            del self.subscriptions[filter_revoked.topic_filter]
        actions: list[Revoked | Dropped] = list(revoked)
        denied = DropReason.NOT_AUTHORIZED
        for packet_id, entry in list(self.inflight.items()):
            delivery = entry.delivery
            if entry.stage is not Stage.AWAIT_PUBCOMP and not may_read(
                delivery.message.topic, delivery.qos
            ):
                del self.inflight[packet_id]
                actions.append(Dropped(delivery, denied))
        if self.queue:
            kept: deque[Delivery] = deque()
            for delivery in self.queue:
                if may_read(delivery.message.topic, delivery.qos):
                    kept.append(delivery)
                else:
                    actions.append(Dropped(delivery, denied))
            self.queue = kept or None
        if self.unsent:
            self.unsent = deque(p for p in self.unsent if p in self.inflight) or None
        return actions
