"""Encoder: version down-levelling, reason-code mapping, encode_publish, input limits."""

from __future__ import annotations

import pytest

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
    assert encode(PubAck(5, 0x10, props), 4) == b"\x40\x02\x00\x05"
    assert encode(Disconnect(0x04, {}), 4) == b"\xe0\x00"
    assert encode(UnsubAck(2, [0x11], props), 4) == b"\xb0\x02\x00\x02"
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


def test_suback_failure_codes_become_0x80_in_3_1_1_mqtt_3_9_3_2() -> None:
    assert (
        encode(SubAck(1, [0, 2, ReasonCode.NOT_AUTHORIZED]), 4) == b"\x90\x05\x00\x01\x00\x02\x80"
    )


def test_session_present_not_sent_in_3_1() -> None:
    assert encode(ConnAck(True, 0), 3) == b"\x20\x02\x00\x00"
    assert encode(ConnAck(True, 0), 4) == b"\x20\x02\x01\x00"


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
        encode(PubAck(1, 0x80, {0x7F: 1}), 5)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("reason_code", [0, 0x10, 0x87])
@pytest.mark.parametrize("packet_class", [PubAck, PubRec, PubRel, PubComp])
def test_encode_ack_is_the_packet_encoding_without_an_object(
    packet_class: type, reason_code: int, version: int
) -> None:
    packet = packet_class(513, reason_code)
    wire = encode_ack(packet.packet_type, 513, reason_code, version)
    assert wire == encode(packet, version)
    assert PacketDecoder(protocol_version=version).feed(wire) == [
        packet_class(513, reason_code if version == 5 else 0)
    ]
