"""Refusing QoS 1/2 publishes while the store fails: the MQTT 5 acknowledgements."""

from __future__ import annotations

import pytest

from channel.pubacks import STORE_REFUSED_WHY as REFUSED_WHY
from channel.pubacks import Pubacks, refused_pubrec
from core.client import ClientInfo
from core.message import new_message
from mqtt import PacketDecoder
from mqtt.packets import PubAck, PubRec
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode

REASON = PropertyId.REASON_STRING


def client(request_problem_information: bool, version: int = 5) -> ClientInfo:
    return ClientInfo(
        client_id="c1",
        username=None,
        peer="p",
        protocol_version=version,
        clean_start=True,
        keepalive=0,
        request_problem_information=request_problem_information,
    )


@pytest.mark.parametrize("problems", [True, False])
def test_successful_pubacks_become_quota_exceeded_and_refusals_stay(problems: bool) -> None:
    denied_why = "not authorised to publish to 't'"
    acks = Pubacks(client(problems))
    acks.accept(1, new_message("t", b"x", 1, False, "c1", None, {}))
    acks.refuse(2, ReasonCode.NOT_AUTHORIZED, "t")
    acks.accept(3, new_message("nobody", b"x", 1, False, "c1", None, {}))  # would have been 0x10
    refused = acks.refused()
    assert refused is not None
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


def test_a_3x_batch_is_not_refused_with_bytes_but_by_closing() -> None:
    # 3.1.1 acknowledgements carry no reason code: the connection is closed instead, so the
    # client sends the messages again on its next connection [MQTT-4.4.0-1].
    acks = Pubacks(client(True, version=4))
    acks.accept(1, new_message("t", b"x", 1, False, "c1", None, {}))
    assert acks.refused() is None
