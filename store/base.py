"""The durable store's contract: what is kept, the write operations, and the `Store` protocol.

The broker never mutates stored state in place: it describes every change as an op (a small
frozen dataclass) and hands a batch of ops to `Store.apply`, which applies them in order in
ONE transaction (all or nothing). `Store.load` returns everything as a `Snapshot`, once, at
start-up. Ops are idempotent: applying a batch twice leaves the same state, so a batch whose
commit is in doubt can simply be retried.

What a persistent session keeps (MQTT 3.1.1 4.1, MQTT 5.0 4.1):
- `SessionMeta`: subscriptions with their options, incoming QoS 2 packet ids awaiting PUBREL,
  the next outgoing packet id, the expiry interval and when the client went away.
- one `StoredDelivery` per message on its way to the client, keyed by a per-session `seq` that
  the broker assigns in increasing order: queued ones have `stage` None; in-flight ones carry
  their packet id and the acknowledgement they wait for, so they can be resent with DUP=1 (or
  as PUBREL) after a restart [MQTT-4.4.0-1].

The ops and `StoredDelivery` are built several times per QoS 1/2 message on the broker's
hot path, so they are plain slotted dataclasses (a frozen one costs 2-3 times more to build);
nothing mutates them after construction.

These records mirror `core.session_state` but do not import it: they are the storage
format, versioned with the schema, while the in-memory classes may change freely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.message import Message

# Values of StoredDelivery.stage while in flight (the values of core.session_state.Stage).
IN_FLIGHT_STAGES = frozenset({"await_puback", "await_pubrec", "await_pubcomp"})


class StoreError(Exception):
    """The store could not be opened, read or written; the message says what and what to do."""


class StoreUnavailableError(StoreError):
    """The store process is away (killed, being restarted): nothing of the request was
    applied, or it was and a retry applies it again harmlessly (ops are idempotent). The
    store logged the loss once; retrying, quietly, is the caller's part."""


@dataclass(frozen=True, slots=True)
class StoredSubscription:
    """Options of one subscription, field for field as `SubscriptionOptions` (5.0 ones 0/False)."""

    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionMeta:
    """Everything of a persistent session except its messages."""

    protocol_version: int  # 3, 4 or 5
    expiry_interval: float  # seconds; math.inf for sessions that never expire
    disconnected_at: float | None = None  # epoch seconds; None while a client is connected
    next_packet_id: int = 1
    subscriptions: Mapping[str, StoredSubscription] = field(default_factory=dict)
    awaiting_rel: frozenset[int] = frozenset()  # incoming QoS 2 ids, PUBREL not yet received


@dataclass(slots=True)
class StoredDelivery:
    """A message queued for, or in flight to, one session (see `core.session_state`).

    Its stored form is declared in `store.records.DELIVERY_FIELDS`, in this field order."""

    message: Message
    qos: int  # the QoS it goes out with
    retain: bool
    subscription_ids: tuple[int, ...] = ()
    packet_id: int | None = None  # set while in flight
    stage: str | None = None  # one of IN_FLIGHT_STAGES while in flight, None while queued

    def __post_init__(self) -> None:
        if self.stage is not None and self.stage not in IN_FLIGHT_STAGES:
            raise ValueError(f"stage must be None or one of {sorted(IN_FLIGHT_STAGES)}")
        if (self.stage is None) != (self.packet_id is None):
            raise ValueError("packet_id and stage go together: both set (in flight) or both None")


@dataclass(slots=True)
class PutRetained:
    """Store (or replace) the retained message of `message.topic`."""

    message: Message


@dataclass(slots=True)
class DeleteRetained:
    topic: str


@dataclass(slots=True)
class PutSession:
    """Create or replace a session's metadata; its messages are kept."""

    client_id: str
    meta: SessionMeta


@dataclass(slots=True)
class DeleteSession:
    """Delete a session and all its messages."""

    client_id: str


@dataclass(slots=True)
class PutMessage:
    """Create or replace message `seq` of a session (replace: e.g. queued -> in flight)."""

    client_id: str
    seq: int
    entry: StoredDelivery


@dataclass(slots=True)
class MarkInFlight:
    """Record that stored messages went in flight, or moved on, at `stage`: `marks` holds a
    (seq, packet_id) pair for each.

    Cheaper than a `PutMessage` of the whole delivery (no payload is rewritten); a no-op
    for a message that is no longer stored. One op holds a run of them (a session's sends
    of one drain): an object per message cost the broker's loop more than the mark itself.
    """

    client_id: str
    stage: str  # one of IN_FLIGHT_STAGES
    marks: list[tuple[int, int]]


@dataclass(slots=True)
class DeleteMessage:
    """Delete stored messages `seqs` of a session (acknowledged, dropped); a run per op."""

    client_id: str
    seqs: list[int]


Op = (
    PutRetained
    | DeleteRetained
    | PutSession
    | DeleteSession
    | PutMessage
    | MarkInFlight
    | DeleteMessage
)


@dataclass(frozen=True, slots=True)
class StoredSession:
    meta: SessionMeta
    messages: list[tuple[int, StoredDelivery]]  # (seq, delivery) in seq order


@dataclass(frozen=True, slots=True)
class Snapshot:
    retained: list[Message]
    sessions: dict[str, StoredSession]


class Store(Protocol):
    """A durable store. Not thread-safe: one caller at a time (the `StoreWriter`). A call may
    yield to the gevent loop while it waits (`ProcessStore` waits for its store process)."""

    def apply(self, ops: Sequence[Op]) -> None:
        """Apply `ops` in order in one transaction; raise `StoreError` and change nothing on
        failure. Messages of a session that has no metadata are kept but not loaded."""

    def load(self) -> Snapshot:
        """Everything stored; raise `StoreError` if it cannot be read."""

    def close(self) -> None:
        """Release the store; further calls are errors."""
