"""Refusing QoS 1/2 publishes while the store fails: the MQTT 5 acknowledgements."""

from __future__ import annotations

import pytest

from channel.problems import refusal_ack
from channel.store_refusal import REFUSED_WHY, refused_acks, refused_pubrec
from core.client import ClientInfo
from mqtt import PacketDecoder
from mqtt.encoder import encode_ack
from mqtt.packets import PacketType, PubAck, PubRec
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode

REASON = PropertyId.REASON_STRING


def client(request_problem_information: bool) -> ClientInfo:
    return ClientInfo(
        client_id="c1",
        username=None,
        peer="p",
        protocol_version=5,
        clean_start=True,
        keepalive=0,
        request_problem_information=request_problem_information,
    )


@pytest.mark.parametrize("problems", [True, False])
def test_successful_pubacks_become_quota_exceeded_and_refusals_stay(problems: bool) -> None:
    denied_why = "not authorised to publish to 't'"
    acks = b"".join(
        [
            encode_ack(PacketType.PUBACK, 1, ReasonCode.SUCCESS, 5),
            refusal_ack(
                PacketType.PUBACK, 2, ReasonCode.NOT_AUTHORIZED, denied_why, client(problems)
            ),
            encode_ack(PacketType.PUBACK, 3, ReasonCode.NO_MATCHING_SUBSCRIBERS, 5),
        ]
    )
    refused = refused_acks(acks, client(problems))
    decoded = PacketDecoder(max_packet_size=1024, protocol_version=5).feed(refused)
    # The 0x97s say why only to a client that asked for problem information [MQTT-3.1.2-29];
    # the earlier refusal keeps what it said.
    why = {REASON: REFUSED_WHY} if problems else {}
    denied = {REASON: denied_why} if problems else {}
    assert decoded == [
        PubAck(1, ReasonCode.QUOTA_EXCEEDED, why),
        PubAck(2, ReasonCode.NOT_AUTHORIZED, denied),
        PubAck(3, ReasonCode.QUOTA_EXCEEDED, why),
    ]


def test_a_refused_pubrec_says_why() -> None:
    decoded = PacketDecoder(max_packet_size=1024, protocol_version=5).feed(
        refused_pubrec(9, client(True))
    )
    assert decoded == [PubRec(9, ReasonCode.QUOTA_EXCEEDED, {REASON: REFUSED_WHY})]
