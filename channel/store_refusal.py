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

from channel.problems import refusal_ack
from core.client import ClientInfo
from mqtt.decoder import PacketDecoder
from mqtt.encoder import encode
from mqtt.packets import PubAck, PubRec
from mqtt.reason_codes import ReasonCode

REFUSED = ReasonCode.QUOTA_EXCEEDED
REFUSED_WHY = "quota exceeded: the broker cannot store messages now; send it again later"


def refused_acks(acks: bytes, client: ClientInfo) -> bytes:
    """The MQTT 5 PUBACKs/PUBRECs in `acks`, each successful one turned into a refusal
    (0x97, with a Reason String if `client` asked for problem information); refusals
    already in it (0x87 not authorised, ...) are kept as they are, Reason String included."""
    refused = []
    for packet in PacketDecoder(max_packet_size=len(acks) + 5, protocol_version=5).feed(acks):
        assert isinstance(packet, PubAck | PubRec), packet
        if packet.reason_code >= 0x80:
            refused.append(encode(packet, 5))
        else:
            refused.append(
                refusal_ack(packet.packet_type, packet.packet_id, REFUSED, REFUSED_WHY, client)
            )
    return b"".join(refused)


def refused_pubrec(packet_id: int, client: ClientInfo) -> bytes:
    """The PUBREC 0x97 of a QoS 2 PUBLISH refused while the store fails."""
    return refusal_ack(PubRec.packet_type, packet_id, REFUSED, REFUSED_WHY, client)
