"""The frames that carry messages to other workers: a publish batch's `Forward` (or
`ForwardShared`, for share groups), retained messages, the `CommitSync` round a QoS 1/2
acknowledgement waits for (docs/pool.md "Publishing across workers"), and the cluster's
numbered batches (`Numbered`, docs/cluster.md "Forwarding a QoS 1/2 message") and what a
restarted peer's previous life never confirmed (`Unconfirmed`). The bodies
of those that carry messages are the binary message part of pool.frames.messages."""

from __future__ import annotations

from dataclasses import dataclass

from core.message import Message
from core.share_origin import ShareMark
from core.wire_messages import ForwardedMessages


@dataclass(frozen=True, slots=True)
class Forward:
    """Messages of one publish batch for the receiver's local subscribers, in order.
    `publisher`: the sender's flow-control id of the connection that published them (0:
    none), which the receiver names in `FlowHold`/`FlowRelease`. Decoded, a frame of 3.x
    QoS 0 messages holds them as their PUBLISH packets (`core.wire_messages`)."""

    messages: ForwardedMessages
    publisher: int = 0
    # Cluster: the number of the numbered batch (`Numbered.seq`) this frame is a part of;
    # 0: none. Each part names its batch, so a part whose batch's head was lost with a
    # NATS connection is known for one and is not delivered as a batch of its own.
    batch: int = 0


@dataclass(frozen=True, slots=True)
class ForwardShared:
    """A `Forward` whose messages are also (or only) for share groups the sender picked the
    receiver for: `marks[i]` says what message `i` is for."""

    messages: tuple[Message, ...]
    marks: tuple[ShareMark, ...]
    publisher: int = 0  # as `Forward`'s
    batch: int = 0  # as `Forward`'s

    def __post_init__(self) -> None:
        if len(self.marks) != len(self.messages):
            raise ValueError(f"{len(self.marks)} share marks for {len(self.messages)} messages")


@dataclass(frozen=True, slots=True)
class Retained:
    """Retained messages set (payload) or cleared (empty payload), for every worker's index."""

    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class RetainedSnapshot:
    """Cluster: the sender's retained messages, for a worker of another node that came up;
    each is kept unless the receiver holds a newer one for its topic."""

    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class Numbered:
    """Cluster: the `parts` frames (`Forward`, `ForwardShared` or `Unconfirmed`, each naming
    the batch) and the `CommitSync` that follow are the sender's batch `seq` for the
    receiver (numbered 1, 2, ... per receiver), addressed to the receiver's life `epoch`.
    `first` is the sender's oldest batch not confirmed yet: it never sends an older one
    again. The receiver takes each number once and in order (cluster.commits): a resent
    batch it has is skipped (its `CommitSync` still answered), one after a missing batch
    waits for the resend (not answered). A batch is taken only if all its parts and its
    `CommitSync` arrived: NATS loses whole messages, and a long batch spans several.
    `awaited`: a publisher's acknowledgement waits for the batch's `Committed` (a
    persistent session of the receiver stores one of its messages), which is then sent at
    once; else it may be gathered with later ones."""

    seq: int
    first: int
    epoch: int
    awaited: bool
    parts: int


@dataclass(frozen=True, slots=True)
class Unconfirmed:
    """Cluster: the QoS 1/2 messages the sender forwarded to a previous life of the
    receiver that never confirmed them (it restarted), for the persistent sessions the
    receiver restored from its store, which get those they do not have; carried, as a
    publish batch's `Forward`, in a numbered batch to the receiver's new life. `epoch`: the
    receiver's life it is meant for (its current one); a pool worker that gets it hands it
    to its pool's other workers, as it is, for their restored sessions."""

    messages: tuple[Message, ...]
    epoch: int
    batch: int = 0  # as `Forward`'s


@dataclass(frozen=True, slots=True)
class CommitSync:
    """Sent after a `Forward` with QoS 1/2 messages: answer `Committed(token)` once the store
    ops of everything received before are committed (the publisher's PUBACK waits).
    `batch`: as `Forward`'s (the cluster's numbered batch it ends; 0 in the pool)."""

    token: int
    batch: int = 0


@dataclass(frozen=True, slots=True)
class Committed:
    """The answer to `CommitSync(token)`."""

    token: int
