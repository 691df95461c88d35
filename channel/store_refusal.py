"""Answers to QoS 1/2 publishes the broker cannot make durable (the store is failing: a full
disk, an I/O error; docs/overload.md), pure.

While the store fails, a QoS 1/2 PUBLISH that a persistent session would have to store is
refused rather than acknowledged: an MQTT 5 client gets its PUBACK or PUBREC with reason code
0x97 Quota exceeded ("an implementation or administrative imposed limit has been exceeded",
sections 3.4.2.1 / 3.5.2.1) and may send it again later; an MQTT 3.1.1 client, whose
acknowledgements carry no reason code, is disconnected instead, so it resends the message on
its next connection [MQTT-4.4.0-1].
"""

from __future__ import annotations

from mqtt.decoder import PacketDecoder
from mqtt.encoder import encode_ack
from mqtt.packets import PubAck, PubRec
from mqtt.reason_codes import ReasonCode

REFUSED = ReasonCode.QUOTA_EXCEEDED


def refused_acks(acks: bytes) -> bytes:
    """The MQTT 5 PUBACKs/PUBRECs in `acks`, each successful one turned into a refusal
    (0x97); refusals already in it (0x87 not authorised, ...) are kept as they are."""
    refused = []
    for packet in PacketDecoder(max_packet_size=len(acks) + 5, protocol_version=5).feed(acks):
        assert isinstance(packet, PubAck | PubRec), packet
        code = ReasonCode(packet.reason_code) if packet.reason_code >= 0x80 else REFUSED
        refused.append(encode_ack(packet.packet_type, packet.packet_id, code, 5))
    return b"".join(refused)
