"""The PUBACKs of a 5.0 client's batch, once routing knows which messages found a subscriber.

A 5.0 PUBACK says 0x10 (No matching subscribers) for a message accepted that nobody
subscribes to (section 3.4.2.1); 3.x PUBACKs carry no reason and are encoded by the channel
at once. A refusal (0x87, 0x99) does not depend on routing: the channel encodes it when it
refuses, with its Reason String (`channel.problems`), and it is copied here as it is.
PUBACKs go out in the order of their PUBLISHes [MQTT-4.6.0-2].
"""

from __future__ import annotations

from collections.abc import Collection

from core.message import Message
from mqtt.encoder import encode_ack
from mqtt.packets import PacketType
from mqtt.reason_codes import ReasonCode

_PUBACK = PacketType.PUBACK
_NO_MATCHING_SUBSCRIBERS = ReasonCode.NO_MATCHING_SUBSCRIBERS

# One PUBACK of a batch: (packet id, the message routed, None) for an accepted PUBLISH, or
# (packet id, None, the refusal PUBACK's bytes).
PubackEntry = tuple[int, Message | None, bytes | None]


def encode_pubacks(entries: list[PubackEntry], unmatched: Collection[int]) -> bytes:
    """The PUBACKs of `entries`, in order; `unmatched` holds the ids of the messages no
    subscription matched."""
    parts = []
    for packet_id, message, refusal in entries:
        if refusal is not None:
            parts.append(refusal)
        elif unmatched and message.message_id in unmatched:  # type: ignore[union-attr]
            parts.append(encode_ack(_PUBACK, packet_id, _NO_MATCHING_SUBSCRIBERS, 5))
        else:
            parts.append(encode_ack(_PUBACK, packet_id, 0, 5))
    return b"".join(parts)
