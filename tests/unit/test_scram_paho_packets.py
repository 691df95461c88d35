"""The AUTH packets of the paho SCRAM adapter (`plugins.auth_scram.paho_client`), checked
against the project's own codec (`mqtt/`) both ways: what the adapter builds decodes to the
intended AUTH, and what the broker's encoder sends decodes to the intended fields."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt.packettypes import PacketTypes

from mqtt import PacketDecoder, encode
from mqtt.packets import Auth, ConnAck
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from plugins.auth_scram.paho_client import (
    AuthFields,
    MalformedAnswerError,
    auth_fields,
    auth_packet,
)
from plugins.auth_scram.scram import METHOD, ScramClient

REASONS = st.sampled_from(
    [ReasonCode.SUCCESS, ReasonCode.CONTINUE_AUTHENTICATION, ReasonCode.RE_AUTHENTICATE]
)
METHOD_ID, DATA_ID = PropertyId.AUTHENTICATION_METHOD, PropertyId.AUTHENTICATION_DATA


def decode_one(wire: bytes) -> object:
    packets = PacketDecoder(protocol_version=5).feed(wire)
    assert len(packets) == 1, packets
    return packets[0]


def body_of(wire: bytes) -> bytes:
    """What follows the fixed header: skip the type byte and the remaining length."""
    position = 1
    while wire[position] & 0x80:
        position += 1
    return wire[position + 1 :]


def test_client_final_packet_bytes() -> None:
    # 0xF0, remaining length, reason 0x18, properties length, 0x15 method, 0x16 data.
    wire = auth_packet(0x18, b"c=biws")
    method = METHOD.encode()
    properties = b"\x15" + len(method).to_bytes(2, "big") + method + b"\x16\x00\x06c=biws"
    assert wire == b"\xf0" + bytes([2 + len(properties), 0x18, len(properties)]) + properties
    assert decode_one(wire) == Auth(
        ReasonCode.CONTINUE_AUTHENTICATION, {METHOD_ID: METHOD, DATA_ID: b"c=biws"}
    )


def test_a_real_client_first_as_re_authenticate() -> None:
    client_first = ScramClient("alice", b"pw").first()
    assert decode_one(auth_packet(0x19, client_first)) == Auth(
        ReasonCode.RE_AUTHENTICATE, {METHOD_ID: METHOD, DATA_ID: client_first}
    )


@given(reason=REASONS, data=st.binary(max_size=400))
def test_any_data_decodes_to_the_same_auth(reason: ReasonCode, data: bytes) -> None:
    # Up to 400 bytes: the remaining length takes one or two bytes.
    assert decode_one(auth_packet(reason, data)) == Auth(reason, {METHOD_ID: METHOD, DATA_ID: data})


@given(reason=REASONS, data=st.binary(max_size=400))
def test_the_brokers_auth_decodes_to_its_fields(reason: ReasonCode, data: bytes) -> None:
    wire = encode(Auth(reason, {METHOD_ID: METHOD, DATA_ID: data}), 5)
    assert auth_fields(body_of(wire), PacketTypes.AUTH) == AuthFields(int(reason), METHOD, data)


def test_the_brokers_connack_decodes_to_its_fields() -> None:
    wire = encode(ConnAck(False, ReasonCode.SUCCESS, {METHOD_ID: METHOD, DATA_ID: b"v=xyz"}), 5)
    assert auth_fields(body_of(wire)[1:], PacketTypes.CONNACK) == AuthFields(0, METHOD, b"v=xyz")


def test_an_empty_auth_is_success_without_properties() -> None:
    # Section 3.15.2.1: remaining length 0 means reason 0x00 and no properties.
    assert encode(Auth(ReasonCode.SUCCESS), 5) == b"\xf0\x00"
    assert auth_fields(b"", PacketTypes.AUTH) == AuthFields(0, None, b"")


@pytest.mark.parametrize(
    "body",
    [
        b"\x18\x05\x15\x00",  # properties shorter than their length
        b"\x18\x02\x01\x00",  # Payload Format Indicator: not an AUTH property
        b"\x18\x02\x7f\x00",  # no such property
        b"\x18\x03\x15\x00\x02",  # method string runs past the end
    ],
)
def test_malformed_properties_are_reported_not_raised_as_anything_else(body: bytes) -> None:
    with pytest.raises(MalformedAnswerError):
        auth_fields(body, PacketTypes.AUTH)
