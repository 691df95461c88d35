"""Immutable, typed objects that the broker hands to hook callbacks.

The domain types they carry (`Message`, `ClientInfo`, `DisconnectReason`, `DropReason`) live
in `core`; they are re-exported here, so a plugin imports everything it needs from this one
module.

All classes are frozen, keyword-only dataclasses, so fields can be added later without
breaking plugins (the way Mosquitto pads its plugin structs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from core.client import ClientInfo
from core.message import Message, new_message, next_message_id, skip_message_ids, stored_message
from core.rate_limit import RateLimits
from core.reasons import DisconnectReason, DropReason

__all__ = [
    "AuthenticateRequest",
    "AuthorizeAction",
    "AuthorizeRequest",
    "CheckReads",
    "ClientConnect",
    "ClientConnected",
    "ClientDisconnected",
    "ClientInfo",
    "ClientRateLimit",
    "ClientSubscribe",
    "ClientUnsubscribe",
    "DisconnectReason",
    "DropReason",
    "Message",
    "MessageAcked",
    "MessageDelivered",
    "MessageDropped",
    "RateLimits",
    "SessionEvent",
    "SessionSubscribed",
    "SessionUnsubscribed",
    "TopicFilterRequest",
    "new_message",
    "next_message_id",
    "skip_message_ids",
    "stored_message",
]


class AuthorizeAction(Enum):
    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConnect:
    client: ClientInfo
    properties: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthenticateRequest:
    """One step of authenticating a client.

    With a plain CONNECT only `client` and `password` are set. For MQTT 5.0 enhanced
    authentication (section 4.12) `method` is the Authentication Method and `data` the
    Authentication Data of the CONNECT or AUTH packet; `state` is what the plugin returned
    in its last `AuthContinue` (None at the first step); `reauthenticate` is True during a
    connection (AUTH 0x19). A plugin that does not implement `method` returns IGNORE.
    """

    client: ClientInfo
    password: bytes | None
    method: str | None = None
    data: bytes | None = None
    state: Any = None
    reauthenticate: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConnected:
    client: ClientInfo
    session_present: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientRateLimit:
    """client.rate_limit: the client is connected; a callback returns the `RateLimits` it
    gets, or None to keep `limits` (`[overload] messages_rate` / `bytes_rate`, or what the
    callbacks before it answered)."""

    client: ClientInfo
    limits: RateLimits


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientDisconnected:
    client: ClientInfo
    reason: DisconnectReason
    properties: dict[int, Any] = field(default_factory=dict)  # of a 5.0 DISCONNECT, if any


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthorizeRequest:
    client: ClientInfo
    action: AuthorizeAction
    topic: str  # topic name for PUBLISH, topic filter for SUBSCRIBE
    qos: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckReads:
    """client.check_reads: whether the messages delivered to `client` are each checked for
    read access (Mosquitto's `MOSQ_ACL_READ`), beyond its SUBSCRIBE being granted."""

    client: ClientInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicFilterRequest:
    """One filter of a SUBSCRIBE or UNSUBSCRIBE (qos is 0 for UNSUBSCRIBE)."""

    topic_filter: str
    qos: int = 0
    # MQTT 5 subscription options (section 3.8.3.1); their 3.x values otherwise
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSubscribe:
    client: ClientInfo
    filters: tuple[TopicFilterRequest, ...]
    properties: dict[int, Any] = field(default_factory=dict)  # MQTT 5 SUBSCRIBE properties


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientUnsubscribe:
    client: ClientInfo
    filters: tuple[TopicFilterRequest, ...]
    properties: dict[int, Any] = field(default_factory=dict)  # MQTT 5 UNSUBSCRIBE properties


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEvent:
    client_id: str
    reason: str | None = None  # for session.terminated: "clean_start", "expired", "discarded", ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSubscribed:
    client_id: str
    topic_filter: str
    qos: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionUnsubscribed:
    client_id: str
    topic_filter: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageDelivered:
    client_id: str
    username: str | None
    message: Message
    qos: int  # the QoS it was delivered with


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageAcked:
    client_id: str
    username: str | None
    message: Message


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageDropped:
    message: Message
    reason: DropReason
    client_id: str | None = None  # the subscriber it was dropped for, if any
