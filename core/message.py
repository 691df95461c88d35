"""The application message: the broker's own representation of a PUBLISH's content.

The publisher's client actor builds a `Message` once from a PUBLISH; routing, the retainer,
sessions, persistence and hooks all carry the same object. MQTT 5 properties travel in
`properties` unchanged. Plugins see it re-exported by `hooks.events`.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

_message_ids = itertools.count(1)


def next_message_id() -> int:
    """A process-unique, increasing message id (the worker id is folded in by the pool)."""
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


def _slot_setters() -> tuple[Any, ...]:
    names = ("topic", "payload", "qos", "retain", "publisher", "username", "timestamp")
    extra = ("properties", "message_id", "wire")
    return tuple(Message.__dict__[name].__set__ for name in (*names, *extra))


(
    _set_topic,
    _set_payload,
    _set_qos,
    _set_retain,
    _set_publisher,
    _set_username,
    _set_timestamp,
    _set_properties,
    _set_message_id,
    _set_wire,
) = _slot_setters()
_new_object = object.__new__
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
    """The same `Message` as the constructor builds, about 2.5 times faster.

    A frozen dataclass's `__init__` goes through `object.__setattr__` for every field; on the
    broker's hot path (one message per PUBLISH) that was the largest single cost, so the
    client actor fills the slots directly. The object is as immutable as any other.
    """
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


def stored_message(  # noqa: PLR0917 - positional on purpose, as new_message
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
) -> Message:
    """A `Message` with every field given, built as fast as `new_message` builds one: for
    messages read back from the store (a restart restores every queued message of every
    persistent session)."""
    message = _new_object(Message)
    _set_topic(message, topic)
    _set_payload(message, payload)
    _set_qos(message, qos)
    _set_retain(message, retain)
    _set_publisher(message, publisher)
    _set_username(message, username)
    _set_timestamp(message, timestamp)
    _set_properties(message, properties)
    _set_message_id(message, message_id)
    _set_wire(message, wire)
    return message
