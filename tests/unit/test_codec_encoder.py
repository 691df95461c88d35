"""Encoder: version down-levelling, reason-code mapping, encode_publish, input limits.

The broker hands the encoder MQTT 5.0 reason codes whatever the client's version; the
tables below pin what a 3.1 (version 3) and 3.1.1 (version 4) client receives instead.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqtt import (
    Auth,
    ConnAck,
    ConnackReturnCode,
    Disconnect,
    PacketDecoder,
    PropertyId,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    UnsubAck,
    connack_return_code,
    encode,
    encode_ack,
    encode_publish,
)


def test_version_4_drops_properties_and_ack_reason_codes() -> None:
    props = {PropertyId.REASON_STRING: "why"}
    assert encode(PubAck(5, ReasonCode.NO_MATCHING_SUBSCRIBERS, props), 4) == b"\x40\x02\x00\x05"
    assert encode(Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE, {}), 4) == b"\xe0\x00"
    unsuback = UnsubAck(2, [ReasonCode.NO_SUBSCRIPTION_EXISTED], props)
    assert encode(unsuback, 4) == b"\xb0\x02\x00\x02"
    publish = Publish("a", b"x", properties={PropertyId.CONTENT_TYPE: "t"})
    assert encode(publish, 4) == b"\x30\x04\x00\x01ax"


def test_connack_reason_code_5_mapped_to_nearest_3_1_1_return_code() -> None:
    assert encode(ConnAck(False, ReasonCode.NOT_AUTHORIZED), 4) == b"\x20\x02\x00\x05"
    assert encode(ConnAck(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD), 4)[-1] == 4
    assert encode(ConnAck(False, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION), 4)[-1] == 1
    assert encode(ConnAck(False, ReasonCode.QUOTA_EXCEEDED), 4)[-1] == 3


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (ReasonCode.SUCCESS, ConnackReturnCode.ACCEPTED),
        (ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, ConnackReturnCode.IDENTIFIER_REJECTED),
        (ReasonCode.SERVER_BUSY, ConnackReturnCode.SERVER_UNAVAILABLE),
        (ReasonCode.BANNED, ConnackReturnCode.NOT_AUTHORIZED),
        (ReasonCode.MALFORMED_PACKET, ConnackReturnCode.SERVER_UNAVAILABLE),
    ],
)
def test_connack_return_code_mapping(reason: int, expected: ConnackReturnCode) -> None:
    assert connack_return_code(reason) is expected


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("return_code", list(ConnackReturnCode))
def test_connack_codes_below_0x80_pass_through_in_3_x(
    version: int, return_code: ConnackReturnCode
) -> None:
    """0x00..0x05 are the 3.1.1 return codes (section 3.2.2.3): a caller that already
    mapped its decision down gets exactly that code on the wire."""
    assert encode(ConnAck(False, return_code), version) == bytes((0x20, 2, 0, return_code))


@given(st.integers(0x80, 0xFF), st.sampled_from([3, 4]))
def test_every_connack_failure_becomes_a_3_1_1_refusal(reason_code: int, version: int) -> None:
    """Return codes 6..255 are reserved in 3.1.1 (section 3.2.2.3, table 3.1): a 5.0 failure
    never reaches a 3.x client as itself, nor as "accepted"."""
    return_code = encode(ConnAck(False, reason_code), version)[3]
    assert ConnackReturnCode.ACCEPTED < return_code <= ConnackReturnCode.NOT_AUTHORIZED


@pytest.mark.parametrize("reason_code", [ReasonCode.SUCCESS, *range(0x80, 0xA3)])
def test_connack_reason_code_goes_out_unchanged_in_5_0(reason_code: int) -> None:
    assert encode(ConnAck(False, reason_code), 5) == bytes((0x20, 3, 0, reason_code, 0))


# (reason code the broker decides, what a 3.1/3.1.1 SUBACK carries) [MQTT-3.9.3-2]
SUBACK_V3_CODES = [
    (ReasonCode.GRANTED_QOS_0, 0x00),
    (ReasonCode.GRANTED_QOS_1, 0x01),
    (ReasonCode.GRANTED_QOS_2, 0x02),
    (ReasonCode.UNSPECIFIED_ERROR, 0x80),
    (ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, 0x80),
    (ReasonCode.NOT_AUTHORIZED, 0x80),
    (ReasonCode.TOPIC_FILTER_INVALID, 0x80),
    (ReasonCode.PACKET_IDENTIFIER_IN_USE, 0x80),
    (ReasonCode.QUOTA_EXCEEDED, 0x80),
    (ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED, 0x80),
    (ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, 0x80),
    (ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED, 0x80),
]


@pytest.mark.parametrize("version", [3, 4, 5])
def test_suback_failure_codes_become_0x80_before_5_0_mqtt_3_9_3_2(version: int) -> None:
    decided = [code for code, _ in SUBACK_V3_CODES]
    sent = [v3 for _, v3 in SUBACK_V3_CODES] if version < 5 else decided
    properties = b"\x00" if version == 5 else b""
    wire = encode(SubAck(1, decided), version)
    assert wire == bytes((0x90, 2 + len(properties) + len(sent), 0, 1)) + properties + bytes(sent)
    assert PacketDecoder(protocol_version=version).feed(wire) == [SubAck(1, sent)]


# The ack packets and the reason codes the broker sends in them (MQTT 5.0 3.4.2.1, 3.5.2.1,
# 3.6.2.1, 3.7.2.1); a 3.x ack is the packet identifier alone (3.1.1 sections 3.4-3.7).
ACK_CODES = [
    (PubAck, 0x40, ReasonCode.SUCCESS),
    (PubAck, 0x40, ReasonCode.NO_MATCHING_SUBSCRIBERS),
    (PubAck, 0x40, ReasonCode.NOT_AUTHORIZED),
    (PubAck, 0x40, ReasonCode.QUOTA_EXCEEDED),
    (PubRec, 0x50, ReasonCode.SUCCESS),
    (PubRec, 0x50, ReasonCode.NOT_AUTHORIZED),
    (PubRec, 0x50, ReasonCode.PACKET_IDENTIFIER_IN_USE),
    (PubRel, 0x62, ReasonCode.SUCCESS),  # PUBREL's flags are 0b0010 [MQTT-3.6.1-1]
    (PubRel, 0x62, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND),
    (PubComp, 0x70, ReasonCode.SUCCESS),
    (PubComp, 0x70, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND),
]


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize(("packet_class", "first", "reason_code"), ACK_CODES)
def test_ack_reason_codes_are_left_out_before_5_0(
    packet_class: type[PubAck | PubRec | PubRel | PubComp],
    first: int,
    reason_code: ReasonCode,
    version: int,
) -> None:
    if version < 5 or reason_code == ReasonCode.SUCCESS:  # 5.0: shortest form (3.4.2.1)
        expected = bytes((first, 2, 0x02, 0x01))
    else:
        expected = bytes((first, 3, 0x02, 0x01, reason_code))
    assert encode_ack(packet_class.packet_type, 0x0201, reason_code, version) == expected
    assert encode(packet_class(0x0201, reason_code), version) == expected


@pytest.mark.parametrize("version", [3, 4, 5])
def test_unsuback_reason_codes_only_in_5_0(version: int) -> None:
    """3.1.1 UNSUBACK has no payload (section 3.11.3); 5.0 has a code per filter (3.11.3)."""
    codes = [ReasonCode.SUCCESS, ReasonCode.NO_SUBSCRIPTION_EXISTED, ReasonCode.NOT_AUTHORIZED]
    wire = encode(UnsubAck(7, codes), version)
    if version < 5:
        assert wire == b"\xb0\x02\x00\x07"
    else:
        assert wire == b"\xb0\x06\x00\x07\x00\x00\x11\x87"


def test_session_present_not_sent_in_3_1() -> None:
    assert encode(ConnAck(True, ReasonCode.SUCCESS), 3) == b"\x20\x02\x00\x00"
    assert encode(ConnAck(True, ReasonCode.SUCCESS), 4) == b"\x20\x02\x01\x00"


def test_auth_has_no_3_1_1_encoding() -> None:
    with pytest.raises(ValueError, match="AUTH"):
        encode(Auth(), 4)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_encode_publish_matches_encode_of_a_publish(version: int, qos: int) -> None:
    props = {PropertyId.USER_PROPERTY: [("k", "v")]} if version == 5 else {}
    packet_id = 9 if qos else None
    packet = Publish("x/y", b"z" * 300, qos, True, False, packet_id, props)
    wire = encode_publish("x/y", b"z" * 300, qos, True, False, packet_id, props, version)
    assert wire == encode(packet, version)
    assert PacketDecoder(protocol_version=version).feed(wire) == [packet]


def test_encode_publish_without_packet_id_for_qos1_is_refused() -> None:
    with pytest.raises(ValueError, match="packet identifier"):
        encode_publish("t", b"", 1, False, False, None, None, 4)


def test_strings_longer_than_65535_bytes_are_refused_section_1_5_4() -> None:
    with pytest.raises(ValueError, match="65535"):
        encode_publish("t" * 70_000, b"", 0, False, False, None, None, 4)
    with pytest.raises(ValueError, match="65535"):
        encode(SubAck(1, [0], {PropertyId.REASON_STRING: "r" * 70_000}), 5)


def test_unknown_property_identifier_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown property"):
        encode(PubAck(1, ReasonCode.UNSPECIFIED_ERROR, {0x7F: 1}), 5)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize(
    "reason_code",
    [ReasonCode.SUCCESS, ReasonCode.NO_MATCHING_SUBSCRIBERS, ReasonCode.NOT_AUTHORIZED],
)
@pytest.mark.parametrize("packet_class", [PubAck, PubRec, PubRel, PubComp])
def test_encode_ack_is_the_packet_encoding_without_an_object(
    packet_class: type, reason_code: ReasonCode, version: int
) -> None:
    packet = packet_class(513, reason_code)
    wire = encode_ack(packet.packet_type, 513, reason_code, version)
    assert wire == encode(packet, version)
    assert PacketDecoder(protocol_version=version).feed(wire) == [
        packet_class(513, reason_code if version == 5 else 0)
    ]
