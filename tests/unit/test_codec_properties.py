"""Property table and property-block rules of MQTT 5.0 section 2.2.2; error family."""

from __future__ import annotations

import pytest

from mqtt import (
    MalformedPacketError,
    MqttError,
    PacketTooLargeError,
    PropertyId,
    ProtocolError,
    ReasonCode,
    TopicFilterInvalidError,
    TopicNameInvalidError,
    UnsupportedProtocolVersionError,
)
from mqtt.packets import PacketType
from mqtt.properties import PROPERTY_SPECS, WILL, DataType, encode_properties, read_properties


def test_every_property_of_table_2_4_is_described() -> None:
    assert len(PropertyId) == 27
    assert set(PROPERTY_SPECS) == set(PropertyId)
    assert PROPERTY_SPECS[PropertyId.SUBSCRIPTION_IDENTIFIER].data_type is DataType.VARINT
    assert PROPERTY_SPECS[PropertyId.WILL_DELAY_INTERVAL].packet_types == {WILL}
    assert PacketType.AUTH in PROPERTY_SPECS[PropertyId.USER_PROPERTY].packet_types


def test_user_properties_keep_order_and_repeat() -> None:
    props = {PropertyId.USER_PROPERTY: [("a", "1"), ("a", "2"), ("b", "3")]}
    block = encode_properties(props)
    assert read_properties(block, 0, len(block), PacketType.PUBLISH) == (props, len(block))


def test_single_subscription_identifier_is_still_a_list() -> None:
    block = bytes((2, 0x0B, 3))
    props, _ = read_properties(block, 0, 3, PacketType.SUBSCRIBE)
    assert props == {PropertyId.SUBSCRIPTION_IDENTIFIER: [3]}


def test_will_delay_interval_not_allowed_in_publish_section_2_2_2_2() -> None:
    block = encode_properties({PropertyId.WILL_DELAY_INTERVAL: 3})
    with pytest.raises(MalformedPacketError, match="not allowed in PUBLISH"):
        read_properties(block, 0, len(block), PacketType.PUBLISH)
    assert read_properties(block, 0, len(block), WILL)[0] == {PropertyId.WILL_DELAY_INTERVAL: 3}


def test_duplicate_content_type_in_will_is_protocol_error() -> None:
    body = b"\x03\x00\x01a\x03\x00\x01b"
    block = bytes((len(body),)) + body
    with pytest.raises(ProtocolError, match="more than once"):
        read_properties(block, 0, len(block), WILL)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (MalformedPacketError("x"), ReasonCode.MALFORMED_PACKET),
        (ProtocolError("x"), ReasonCode.PROTOCOL_ERROR),
        (PacketTooLargeError("x"), ReasonCode.PACKET_TOO_LARGE),
        (UnsupportedProtocolVersionError("x", "MQTT", 9), ReasonCode.UNSUPPORTED_PROTOCOL_VERSION),
        (TopicNameInvalidError("x"), ReasonCode.TOPIC_NAME_INVALID),
        (TopicFilterInvalidError("x"), ReasonCode.TOPIC_FILTER_INVALID),
    ],
)
def test_errors_carry_their_reason_code(error: MqttError, code: int) -> None:
    assert isinstance(error, MqttError)
    assert error.reason_code == code


def test_reason_code_aliases_share_values() -> None:
    assert ReasonCode.NORMAL_DISCONNECTION is ReasonCode.SUCCESS
    assert ReasonCode(0xA2) is ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED
