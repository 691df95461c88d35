"""The application message: the broker's own representation of a PUBLISH's content.

The publisher's client actor builds a `Message` once from a PUBLISH; routing, the retainer,
sessions, persistence and hooks all carry the same object. MQTT 5 properties travel in
`properties` unchanged. Plugins see it re-exported by `hooks.events`.
"""

from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, cast

_message_ids = itertools.count(1)
_Fields = ParamSpec("_Fields")

# Message ids are unique across a pool's workers and a cluster's nodes, as moves and a dead
# worker's orphans tell messages apart by id: each worker counts in a space of its own,
# above a part of the id that its cluster node's name sets.
MESSAGE_ID_SPACE = 1 << 40  # a worker's ids: [floor, floor + MESSAGE_ID_SPACE)
_NODE_SHIFT = 50  # above 1,024 workers' spaces
_NODE_MASK = (1 << 12) - 1  # under 2**63: the store keeps ids as SQLite's signed integers


def message_id_floor(worker: int, node: str | None = None) -> int:
    """The lowest message id of `worker` (0 for one process) on the cluster node `node`
    (None: not in a cluster). Two node names share a part of the id once in 4,096 pairs."""
    node_part = 0 if node is None else zlib.crc32(node.encode()) & _NODE_MASK
    return (node_part << _NODE_SHIFT) + worker * MESSAGE_ID_SPACE


def next_message_id() -> int:
    """A process-unique, increasing message id (from the process's `message_id_floor` on)."""
    return next(_message_ids)


def skip_message_ids(up_to: int) -> None:
    """Make later ids larger than `up_to` (messages restored from the store keep theirs)."""
    global _message_ids  # noqa: PLW0603 - the id counter is process state by design
    upcoming = next(_message_ids)
    _message_ids = itertools.count(max(upcoming, up_to + 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    publisher: str | None = None  # client id; None for messages the broker makes itself
    username: str | None = None
    timestamp: float = field(default_factory=time.time)  # seconds since the epoch, UTC
    properties: dict[int, Any] = field(default_factory=dict)  # MQTT 5 PUBLISH properties
    message_id: int = field(default_factory=next_message_id)
    # The encoded 3.x QoS 0 PUBLISH as the publisher sent it (see mqtt.packets.Publish.wire),
    # forwarded as is to QoS 0 subscribers. Not settable: a message changed with
    # dataclasses.replace gets None, so a stale encoding is never sent.
    wire: bytes | None = field(default=None, init=False, compare=False, repr=False)


_MESSAGE_EXPIRY_INTERVAL = 0x02  # mqtt.properties.PropertyId.MESSAGE_EXPIRY_INTERVAL


def remaining_expiry(message: Message, now: float) -> float | None:
    """Seconds left of the message's MQTT 5 Message Expiry Interval at `now` (0 or less:
    expired [MQTT-3.3.2-5]); None if it never expires."""
    interval = message.properties.get(_MESSAGE_EXPIRY_INTERVAL)
    if interval is None:
        return None
    return float(interval - (now - message.timestamp))


def is_expired(message: Message, now: float) -> bool:
    left = remaining_expiry(message, now)
    return left is not None and left <= 0


class _MessageBeingBuilt:
    """A `Message` while its slots are filled: the same slots, but settable.

    A frozen dataclass's `__init__` sets every field through `object.__setattr__`, which made
    building the message the largest single cost of a PUBLISH. An object of this class fills
    its slots with plain attribute stores, then becomes a `Message` (CPython lets an object
    change its class to one with the same slot layout, and checks that it is the same): about
    2.7 times faster, and the result is a `Message` like any other, as immutable.
    """

    __slots__ = Message.__slots__

    def __init__(  # noqa: PLR0917 - one positional slot per field, as stored_message
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        publisher: str | None,
        username: str | None,
        timestamp: float,
        properties: dict[int, Any],
        message_id: int,
        wire: bytes | None = None,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.publisher = publisher
        self.username = username
        self.timestamp = timestamp
        self.properties = properties
        self.message_id = message_id
        self.wire = wire
        self.__class__ = Message  # type: ignore[assignment]  # done: from here on it is frozen


def _as_message_factory(builder: Callable[_Fields, object]) -> Callable[_Fields, Message]:
    """`builder` typed as what its calls return: a `Message` (its signature stays its own)."""
    return cast("Callable[_Fields, Message]", builder)


# A `Message` with every field given, positionally, built as fast as `new_message` builds one:
# for messages read back from the store (a restart restores every queued message of every
# persistent session) and from other workers (every message a pool forwards).
stored_message = _as_message_factory(_MessageBeingBuilt)
_now = time.time


def new_message(  # noqa: PLR0917 - positional on purpose: one call per PUBLISH
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    publisher: str | None,
    username: str | None,
    properties: dict[int, Any],
    wire: bytes | None = None,
) -> Message:
    """The same `Message` as the constructor builds, stamped now with the next id, built as
    `stored_message` builds one (the client actor makes one per PUBLISH)."""
    return stored_message(
        topic,
        payload,
        qos,
        retain,
        publisher,
        username,
        _now(),
        properties,
        next_message_id(),
        wire,
    )
