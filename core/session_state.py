"""Everything the broker keeps for one client id, as pure data with pure transitions.

The session actor owns one `SessionState` and turns its answers into packets; nothing here
does I/O, so the QoS flows can be tested without sockets, and the whole state can be
serialised for persistent sessions and moved between workers later.

Outgoing QoS 1/2 (broker -> client) follow ONE path: an in-flight entry whose `stage` says
what acknowledgement it waits for:

    QoS 1: AWAIT_PUBACK --PUBACK--> done
    QoS 2: AWAIT_PUBREC --PUBREC--> AWAIT_PUBCOMP (send PUBREL) --PUBCOMP--> done

The in-flight window holds at most `max_inflight` entries in send order (a dict keeps
insertion order); messages beyond it wait in `queue`, which is bounded (`max_queued`, oldest
dropped first). Packet ids are never reused while in flight [MQTT-2.3.1-2].

Incoming QoS 2 (client -> broker) uses method B of MQTT 3.1.1 figure 4.3: the message is
routed when the PUBLISH arrives and its packet id is kept in `awaiting_rel` until PUBREL, so a
re-sent PUBLISH with the same id is acknowledged but not routed twice [MQTT-4.3.3-2].
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import NamedTuple

from core.message import Message
from core.reasons import DropReason


class Delivery(NamedTuple):
    """A message on its way to one subscriber, with the QoS and RETAIN flag it goes out with."""

    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...] = ()
    wire: bytes | None = None  # the encoded MQTT 3.x QoS 0 PUBLISH, shared by all its receivers
    seq: int = 0  # order in the session's stored queue; 0 = not stored (QoS 0, clean session)


class Stage(Enum):
    AWAIT_PUBACK = "await_puback"
    AWAIT_PUBREC = "await_pubrec"
    AWAIT_PUBCOMP = "await_pubcomp"


_FIRST_STAGE = {1: Stage.AWAIT_PUBACK, 2: Stage.AWAIT_PUBREC}


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


# Answers of SessionState.admit besides a packet id (>= 1).
SEND_WITHOUT_ID = 0  # QoS 0: write it now
QUEUED = -1  # waits in the queue for a free in-flight slot or for the client to come back
DROPPED = -2  # not kept (QoS 0 to an offline session); recorded in `dropped`


class TooManyAwaitingRelError(Exception):
    """More incoming QoS 2 messages await PUBREL than `max_awaiting_rel` allows."""


@dataclass(slots=True)
class SessionState:
    client_id: str
    persistent: bool
    max_inflight: int = 32
    max_queued: int = 1000  # 0 = unbounded
    queue_qos0: bool = False
    max_awaiting_rel: int = 100
    subscriptions: dict[str, SubscriptionOptions] = field(default_factory=dict)
    inflight: dict[int, InflightEntry] = field(default_factory=dict)
    # Messages waiting for a free in-flight slot or for the client; None while empty, so an
    # idle session holds no deque (~0.6 KB).
    queue: deque[Delivery] | None = None
    awaiting_rel: set[int] = field(default_factory=set)
    next_packet_id: int = 1
    # Deliveries dropped since the owner last looked; the session actor drains this list
    # after each batch to count them and run the message.dropped hook.
    dropped: list[tuple[Delivery, DropReason]] = field(default_factory=list)

    # ----- outgoing: broker -> client -------------------------------------------------

    def admit(self, delivery: Delivery, connected: bool) -> int:
        """Take a delivery; return its packet id if it is to be sent now, else an answer above."""
        if delivery.qos == 0:
            if connected and not self.queue:
                return SEND_WITHOUT_ID
            if not connected and not self.queue_qos0:
                self.dropped.append((delivery, DropReason.QOS0_OFFLINE))
                return DROPPED
        elif connected and not self.queue and len(self.inflight) < self.max_inflight:
            return self._send(delivery)
        self._enqueue(delivery)
        return QUEUED

    def acknowledge(self, ack: Ack, packet_id: int) -> tuple[Stage | None, Delivery | None]:
        """Apply a PUBACK/PUBREC/PUBCOMP from the client.

        Returns (next stage, delivery): next stage AWAIT_PUBCOMP means "send PUBREL";
        (None, delivery) means the delivery is complete; (None, None) means the ack matched
        nothing in flight (a duplicate or a stray; the spec says to ignore it, except that a
        PUBREC still gets a PUBREL in the caller).
        """
        entry = self.inflight.get(packet_id)
        if entry is None:
            return None, None
        expected, next_stage = _TRANSITIONS[ack]
        if entry.stage is not expected:
            return None, None
        if next_stage is None:
            del self.inflight[packet_id]
        else:
            entry.stage = next_stage
        return next_stage, entry.delivery

    def fill_window(self) -> list[tuple[int, Delivery]]:
        """Move queued deliveries into free in-flight slots (or out as QoS 0) when connected."""
        sent: list[tuple[int, Delivery]] = []
        queue = self.queue
        while queue and len(self.inflight) < self.max_inflight:
            delivery = queue.popleft()
            packet_id = SEND_WITHOUT_ID if delivery.qos == 0 else self._send(delivery)
            sent.append((packet_id, delivery))
        if not queue:
            self.queue = None
        return sent

    def unacknowledged(self) -> list[tuple[int, InflightEntry]]:
        """In-flight entries in their original send order, for resending on reconnect."""
        return list(self.inflight.items())

    def _send(self, delivery: Delivery) -> int:
        packet_id = self._allocate_packet_id()
        self.inflight[packet_id] = InflightEntry(delivery, _FIRST_STAGE[delivery.qos])
        return packet_id

    def _enqueue(self, delivery: Delivery) -> None:
        if self.queue is None:
            self.queue = deque()
        elif self.max_queued and len(self.queue) >= self.max_queued:
            self.dropped.append((self.queue.popleft(), DropReason.QUEUE_FULL))
        self.queue.append(delivery)

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
        self.awaiting_rel.add(packet_id)
        return True

    def release(self, packet_id: int) -> None:
        """PUBREL received: forget the packet id (PUBCOMP is sent whether it was known or not)."""
        self.awaiting_rel.discard(packet_id)

    # ----- subscriptions --------------------------------------------------------------

    def subscribe(self, topic_filter: str, options: SubscriptionOptions) -> bool:
        """Add or replace a subscription [MQTT-3.8.4-3]; True if the filter is new."""
        is_new = topic_filter not in self.subscriptions
        self.subscriptions[topic_filter] = options
        return is_new

    def unsubscribe(self, topic_filter: str) -> bool:
        return self.subscriptions.pop(topic_filter, None) is not None

    # ----- re-authorisation -----------------------------------------------------------

    def keep_readable(self, may_read: Callable[[str, int], bool]) -> list[str]:
        """Drop what the client may no longer read; returns the revoked topic filters.

        `may_read(topic filter or topic name, qos)` is the ACL's answer. Subscriptions it
        denies are removed; so are queued messages and in-flight ones the client has not
        received yet (awaiting PUBACK or PUBREC), recorded in `dropped` as NOT_AUTHORIZED.
        A QoS 2 message awaiting PUBCOMP stays: the client has it, only PUBREL is left.
        """
        revoked = [f for f, o in self.subscriptions.items() if not may_read(f, o.qos)]
        for topic_filter in revoked:
            del self.subscriptions[topic_filter]
        denied = DropReason.NOT_AUTHORIZED
        for packet_id, entry in list(self.inflight.items()):
            delivery = entry.delivery
            if entry.stage is not Stage.AWAIT_PUBCOMP and not may_read(
                delivery.message.topic, delivery.qos
            ):
                del self.inflight[packet_id]
                self.dropped.append((delivery, denied))
        if self.queue:
            kept: deque[Delivery] = deque()
            for delivery in self.queue:
                if may_read(delivery.message.topic, delivery.qos):
                    kept.append(delivery)
                else:
                    self.dropped.append((delivery, denied))
            self.queue = kept or None
        return revoked
