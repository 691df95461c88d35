"""Refusing QoS 1/2 publishes while the store fails: the MQTT 5 acknowledgements."""

from __future__ import annotations

from channel.store_refusal import refused_acks
from mqtt import PacketDecoder
from mqtt.encoder import encode_ack
from mqtt.packets import PacketType, PubAck
from mqtt.reason_codes import ReasonCode


def test_successful_pubacks_become_quota_exceeded_and_refusals_stay() -> None:
    acks = b"".join(
        [
            encode_ack(PacketType.PUBACK, 1, ReasonCode.SUCCESS, 5),
            encode_ack(PacketType.PUBACK, 2, ReasonCode.NOT_AUTHORIZED, 5),
            encode_ack(PacketType.PUBACK, 3, ReasonCode.NO_MATCHING_SUBSCRIBERS, 5),
        ]
    )
    decoded = PacketDecoder(max_packet_size=1024, protocol_version=5).feed(refused_acks(acks))
    assert decoded == [
        PubAck(1, ReasonCode.QUOTA_EXCEEDED),
        PubAck(2, ReasonCode.NOT_AUTHORIZED),
        PubAck(3, ReasonCode.QUOTA_EXCEEDED),
    ]
