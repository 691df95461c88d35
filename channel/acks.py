"""The PUBACKs of a 5.0 client's batch, once routing knows which messages found a subscriber.

A 5.0 PUBACK says 0x10 (No matching subscribers) for a message accepted that nobody
subscribes to (section 3.4.2.1); 3.x PUBACKs carry no reason and are encoded by the channel
at once. PUBACKs go out in the order of their PUBLISHes [MQTT-4.6.0-2].
"""

from __future__ import annotations

from collections.abc import Collection

from core.message import Message
from mqtt.encoder import encode_ack
from mqtt.packets import PacketType
from mqtt.reason_codes import ReasonCode

_PUBACK = PacketType.PUBACK
_NO_MATCHING_SUBSCRIBERS = ReasonCode.NO_MATCHING_SUBSCRIBERS


def encode_pubacks(
    entries: list[tuple[int, Message | None, int]], unmatched: Collection[int]
) -> bytes:
    """The PUBACKs of (packet id, message routed or None, reason code) entries, in order;
    `unmatched` holds the ids of the messages no subscription matched."""
    parts = []
    for packet_id, message, decided in entries:
        code = decided
        if unmatched and not code and message is not None and message.message_id in unmatched:
            code = _NO_MATCHING_SUBSCRIBERS
        parts.append(encode_ack(_PUBACK, packet_id, code, 5))
    return b"".join(parts)
