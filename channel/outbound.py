"""How one connection's outgoing PUBLISHes are written for an MQTT 5.0 client: pure, per connection.

The session actor keeps one `Outbound` per attached 5.0 connection (3.x clients take the
shared encodings and need none) and asks it for the bytes of each delivery. It decides:
- the properties the subscriber gets: the publisher's Payload Format Indicator, Content
  Type, Response Topic, Correlation Data and User Properties unchanged and in order
  [MQTT-3.3.2-4] [MQTT-3.3.2-17..20], the Message Expiry Interval counted down to what is
  left [MQTT-3.3.2-6], and every Subscription Identifier of the subscriptions that matched
  [MQTT-3.3.4-3];
- the topic alias: with a Topic Alias Maximum from the client, each topic name gets an
  alias the first time it is sent (topic and alias), and later PUBLISHes carry only the
  alias [MQTT-3.3.2-7..12]; when all are taken, the least recently used is reassigned.
  Aliases belong to the connection and start afresh with the next one;
- whether it can be sent at all: a message whose expiry has passed is not
  (`DropReason.EXPIRED`) [MQTT-3.3.2-5], nor a packet larger than the client's Maximum
  Packet Size (`DropReason.PACKET_TOO_LARGE`) [MQTT-3.1.2-25]. The session then behaves as
  if it had been delivered, and reports the drop.

A PUBLISH whose alias assignment was never sent (too large) forgets that assignment, so the
broker never uses an alias the client does not know.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from core.client import NO_LIMIT, ClientInfo
from core.message import remaining_expiry
from core.reasons import DropReason
from core.session_state import Delivery
from mqtt.encoder import encode_publish
from mqtt.properties import PropertyId

FORWARDED_PROPERTIES = frozenset(
    (
        PropertyId.PAYLOAD_FORMAT_INDICATOR,
        PropertyId.CONTENT_TYPE,
        PropertyId.RESPONSE_TOPIC,
        PropertyId.CORRELATION_DATA,
        PropertyId.USER_PROPERTY,
    )
)
_EXPIRY = PropertyId.MESSAGE_EXPIRY_INTERVAL
_SUBSCRIPTION_IDENTIFIER = PropertyId.SUBSCRIPTION_IDENTIFIER
_TOPIC_ALIAS = PropertyId.TOPIC_ALIAS


class Outbound:
    """The outgoing side of one 5.0 connection: its topic aliases and the client's limits."""

    __slots__ = ("_aliases", "_free", "_next_alias", "alias_maximum", "maximum_packet_size")

    def __init__(self, client: ClientInfo) -> None:
        self.maximum_packet_size = client.maximum_packet_size
        self.alias_maximum = client.topic_alias_maximum
        self._aliases: OrderedDict[str, int] = OrderedDict()  # topic -> alias, LRU first
        self._next_alias = 1  # the lowest alias never assigned
        self._free: list[int] = []  # aliases whose assignment was forgotten

    def publish(
        self, delivery: Delivery, packet_id: int | None, dup: bool, now: float
    ) -> bytes | DropReason:
        """The PUBLISH of `delivery` for this client, or why it is not sent."""
        message = delivery.message
        properties: dict[int, Any] | None = None
        if message.properties:
            properties = {k: v for k, v in message.properties.items() if k in FORWARDED_PROPERTIES}
            left = remaining_expiry(message, now)
            if left is not None:
                if left <= 0:
                    return DropReason.EXPIRED
                properties[_EXPIRY] = math.ceil(left)  # what is left [MQTT-3.3.2-6]
        if delivery.subscription_ids:
            if properties is None:
                properties = {}
            properties[_SUBSCRIPTION_IDENTIFIER] = list(delivery.subscription_ids)
        topic = message.topic
        assigned = None
        if self.alias_maximum:
            if properties is None:
                properties = {}
            topic, assigned = self._alias(topic, properties)
        data = encode_publish(
            topic, message.payload, delivery.qos, delivery.retain, dup, packet_id, properties, 5
        )
        if self.maximum_packet_size != NO_LIMIT and len(data) > self.maximum_packet_size:
            if assigned is not None:
                self._free.append(self._aliases.pop(assigned))
            return DropReason.PACKET_TOO_LARGE
        return data

    def _alias(self, topic: str, properties: dict[int, Any]) -> tuple[str, str | None]:
        """(topic to write, topic newly assigned an alias or None); sets the alias property."""
        aliases = self._aliases
        alias = aliases.get(topic)
        if alias is not None:
            aliases.move_to_end(topic)
            properties[_TOPIC_ALIAS] = alias
            return "", None
        if self._free:
            alias = self._free.pop()
        elif self._next_alias <= self.alias_maximum:
            alias = self._next_alias
            self._next_alias += 1
        else:
            _oldest, alias = aliases.popitem(last=False)
        aliases[topic] = alias
        properties[_TOPIC_ALIAS] = alias
        return topic, topic
