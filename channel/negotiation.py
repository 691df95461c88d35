"""What a CONNECT negotiates: the session's lifetime, both sides' limits, and the CONNACK
properties that announce the broker's (MQTT 5.0 sections 3.1.2.11 and 3.2.2.3).

Pure functions of the CONNECT and the channel's settings, used by `channel.channel` when it
accepts a CONNECT:
- `session_expiry`: how long the session outlives the connection. A 5.0 client says so with
  Session Expiry Interval (absent: 0, the session ends with the connection
  [MQTT-3.1.2-11]; 0xFFFFFFFF: never, section 3.1.2.11.2); a 3.x client
  with clean session 0 gets `limits.session_expiry`. Both are capped by
  `limits.max_session_expiry`; a 5.0 client whose value was lowered is told in CONNACK.
- `keepalive`: the client's, unless `limits.max_keepalive` is set and the client asked for
  more (or for none): then the broker's, announced as Server Keep Alive [MQTT-3.2.2-21].
- `connack_properties`: everything the broker offers, announced truthfully from the
  configuration, so a 5.0 client never has to guess (Maximum QoS, Retain Available, Receive
  Maximum, Maximum Packet Size, Topic Alias Maximum, Wildcard / Subscription Identifier /
  Shared Subscription Available, Response Information when asked for).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.client import NO_LIMIT
from mqtt.packets import Connect
from mqtt.properties import PropertyId

SESSION_EXPIRY_NEVER = 0xFFFFFFFF  # on the wire: the session does not expire
MAX_RECEIVE_MAXIMUM = 65535


@dataclass(frozen=True, slots=True)
class Offer:
    """What the broker offers and enforces (the `[mqtt]` and `[limits]` configuration)."""

    session_expiry_3x: float = 7200.0  # a persistent 3.x session; 0 = forever
    max_session_expiry: float = 0.0  # 0 = no maximum
    max_keepalive: int = 0  # 0 = no maximum
    receive_maximum: int = 100  # incoming unacknowledged QoS 1/2 PUBLISHes per connection
    maximum_packet_size: int = 1_048_576
    maximum_qos: int = 2
    retain_available: bool = True
    wildcard_subscriptions: bool = True
    subscription_identifiers: bool = True
    shared_subscriptions: bool = True  # `[shared_subscriptions] enabled`
    topic_alias_maximum: int = 10
    response_information: str = ""
    validate_utf8_payloads: bool = False


@dataclass(frozen=True, slots=True)
class Negotiated:
    session_expiry: float  # seconds; 0: ends with the connection; math.inf: never
    keepalive: int  # what the broker enforces
    receive_maximum: int
    maximum_packet_size: int
    topic_alias_maximum: int
    request_problem_information: bool
    connack_properties: dict[int, Any]


def _capped(seconds: float, maximum: float) -> float:
    return min(seconds, maximum) if maximum > 0 else seconds


def negotiate(connect: Connect, offer: Offer) -> Negotiated:
    """The connection's terms for an accepted `connect` (see the module docstring)."""
    props = connect.properties
    if connect.protocol_version < 5:
        if connect.clean_start:
            expiry = 0.0
        else:
            expiry = offer.session_expiry_3x if offer.session_expiry_3x > 0 else math.inf
        keepalive = _keepalive(connect.keepalive, offer.max_keepalive)
        return Negotiated(
            _capped(expiry, offer.max_session_expiry), keepalive, 65535, NO_LIMIT, 0, True, {}
        )
    connack: dict[int, Any] = {}
    requested = props.get(PropertyId.SESSION_EXPIRY_INTERVAL, 0)
    expiry = math.inf if requested == SESSION_EXPIRY_NEVER else float(requested)
    capped = _capped(expiry, offer.max_session_expiry)
    if capped != expiry:
        connack[PropertyId.SESSION_EXPIRY_INTERVAL] = int(capped)  # 3.2.2.3.2
    keepalive = _keepalive(connect.keepalive, offer.max_keepalive)
    if keepalive != connect.keepalive:
        connack[PropertyId.SERVER_KEEP_ALIVE] = keepalive  # [MQTT-3.2.2-21]
    connack[PropertyId.RECEIVE_MAXIMUM] = min(offer.receive_maximum, MAX_RECEIVE_MAXIMUM)
    connack[PropertyId.MAXIMUM_PACKET_SIZE] = offer.maximum_packet_size
    connack[PropertyId.TOPIC_ALIAS_MAXIMUM] = offer.topic_alias_maximum
    if offer.maximum_qos < 2:
        connack[PropertyId.MAXIMUM_QOS] = offer.maximum_qos  # absent means 2 (3.2.2.3.4)
    connack[PropertyId.RETAIN_AVAILABLE] = int(offer.retain_available)
    connack[PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE] = int(offer.wildcard_subscriptions)
    connack[PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE] = int(offer.subscription_identifiers)
    connack[PropertyId.SHARED_SUBSCRIPTION_AVAILABLE] = int(offer.shared_subscriptions)
    if props.get(PropertyId.REQUEST_RESPONSE_INFORMATION) and offer.response_information:
        connack[PropertyId.RESPONSE_INFORMATION] = offer.response_information  # 3.2.2.3.15
    return Negotiated(
        session_expiry=capped,
        keepalive=keepalive,
        receive_maximum=props.get(PropertyId.RECEIVE_MAXIMUM, 65535),
        maximum_packet_size=props.get(PropertyId.MAXIMUM_PACKET_SIZE, NO_LIMIT),
        topic_alias_maximum=props.get(PropertyId.TOPIC_ALIAS_MAXIMUM, 0),
        request_problem_information=props.get(PropertyId.REQUEST_PROBLEM_INFORMATION, 1) == 1,
        connack_properties=connack,
    )


def _keepalive(requested: int, maximum: int) -> int:
    if maximum and (requested == 0 or requested > maximum):
        return maximum
    return requested


def disconnect_session_expiry(
    connected_with: float, requested: int | None, offer: Offer
) -> float | None:
    """The session expiry a 5.0 DISCONNECT asks for (capped as at CONNECT): None if it set
    none; raises ValueError if it sets one after the CONNECT's was 0, a Protocol Error
    (section 3.14.2.2.2)."""
    if requested is None:
        return None
    if connected_with == 0 and requested != 0:
        raise ValueError(
            "DISCONNECT sets a Session Expiry Interval after CONNECT's was 0 (section 3.14.2.2.2)"
        )
    expiry = math.inf if requested == SESSION_EXPIRY_NEVER else float(requested)
    return _capped(expiry, offer.max_session_expiry)
