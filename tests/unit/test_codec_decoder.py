"""PacketDecoder framing: size bound, partial input, protocol version discovery, input types."""

from __future__ import annotations

import pytest

from mqtt import (
    MAX_PACKET_SIZE,
    MalformedPacketError,
    Packet,
    PacketDecoder,
    PacketTooLargeError,
    ProtocolError,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    UnsupportedProtocolVersionError,
    encode,
    encode_publish,
)
from mqtt.reason_codes import ReasonCode
from tests.fixtures.wire_packets import h


def test_oversized_packet_rejected_from_the_fixed_header_before_the_body() -> None:
    """A remaining length above the maximum fails as soon as the varint is complete."""
    decoder = PacketDecoder(max_packet_size=100, protocol_version=4)
    assert decoder.feed(b"\x30") == []
    with pytest.raises(PacketTooLargeError, match="101 bytes exceeds"):
        decoder.feed(b"\x63")  # remaining length 99 + 2 header bytes = 101


def test_packet_of_exactly_max_size_is_accepted_and_one_more_byte_is_not() -> None:
    wire = encode(Publish("t", b"x" * 95), 4)
    assert len(wire) == 100
    assert PacketDecoder(max_packet_size=100, protocol_version=4).feed(wire)[0].payload == (
        b"x" * 95
    )
    decoder = PacketDecoder(max_packet_size=99, protocol_version=4)
    with pytest.raises(PacketTooLargeError) as caught:
        decoder.feed(wire[:2])
    assert caught.value.reason_code == ReasonCode.PACKET_TOO_LARGE
    assert decoder.buffered == 0


def test_large_remaining_length_rejected_without_buffering_body() -> None:
    decoder = PacketDecoder(max_packet_size=1_048_576, protocol_version=4)
    header = b"\x30\xff\xff\xff\x7f"  # 268,435,455
    with pytest.raises(PacketTooLargeError):
        decoder.feed(header)


def test_remaining_length_over_four_bytes_is_malformed() -> None:
    decoder = PacketDecoder(max_packet_size=MAX_PACKET_SIZE, protocol_version=4)
    assert decoder.feed(b"\x30\x80\x80\x80") == []
    with pytest.raises(MalformedPacketError, match="4 bytes"):
        decoder.feed(b"\x80")


def test_partial_body_is_held_and_completed_later() -> None:
    wire = encode_publish("a/b", b"p" * 300, 1, False, False, 7, None, 4)
    decoder = PacketDecoder(protocol_version=4)
    assert decoder.feed(wire[:150]) == []
    assert decoder.buffered == 150
    assert decoder.feed(wire[150:] + wire[:3]) == [
        Publish("a/b", b"p" * 300, 1, False, False, 7, {})
    ]
    assert decoder.buffered == 3


def test_accepts_bytearray_and_memoryview_input() -> None:
    wire = encode(Publish("a", b"x"), 4)
    assert PacketDecoder(protocol_version=4).feed(bytearray(wire))[0].payload == b"x"
    packet = PacketDecoder(protocol_version=4).feed(memoryview(wire))[0]
    assert type(packet.payload) is bytes


def test_protocol_version_learned_from_connect() -> None:
    decoder = PacketDecoder()
    assert decoder.protocol_version is None
    decoder.feed(h("10 0f 0004 4d515454 05 02 003c 00 0002 6331"))
    assert decoder.protocol_version == 5


def test_protocol_version_set_even_when_the_rest_of_connect_fails() -> None:
    """The broker must answer a bad CONNECT in the client's version (CONNACK 0x81 in 5.0)."""
    decoder = PacketDecoder()
    with pytest.raises(MalformedPacketError):
        decoder.feed(h("10 0f 0004 4d515454 05 03 003c 00 0002 6331"))  # reserved flag set
    assert decoder.protocol_version == 5


def test_unsupported_version_error_carries_what_the_client_sent_mqtt_3_1_2_2() -> None:
    decoder = PacketDecoder()
    with pytest.raises(UnsupportedProtocolVersionError) as caught:
        decoder.feed(h("10 0e 0004 4d515454 07 02 003c 0002 6331"))
    assert (caught.value.protocol_name, caught.value.protocol_level) == ("MQTT", 7)
    assert caught.value.reason_code == 0x84
    assert decoder.protocol_version is None


def test_publish_payload_is_an_independent_bytes_object() -> None:
    wire = encode(Publish("a", b"xyz"), 4) * 2
    first, second = PacketDecoder(protocol_version=4).feed(wire)
    assert type(first.payload) is bytes
    assert first == second


@pytest.mark.parametrize(("size", "version"), [(1, None), (MAX_PACKET_SIZE + 1, None), (10, 6)])
def test_constructor_rejects_bad_settings(size: int, version: int | None) -> None:
    with pytest.raises(ValueError):
        PacketDecoder(max_packet_size=size, protocol_version=version)


@pytest.mark.parametrize(
    ("wire", "version", "expected"),
    [
        ("40 02 1234", 4, PubAck(0x1234)),  # the 2-byte PUBACK the decoder reads directly
        ("40 02 1234", 5, PubAck(0x1234, 0, {})),  # 5.0: reason 0, no properties (3.4.2.1)
        ("40 03 1234 10", 5, PubAck(0x1234, 0x10, {})),  # longer ones take the full path
        ("40 04 1234 00 00", 5, PubAck(0x1234, 0, {})),
        ("50 02 1234", 4, PubRec(0x1234)),  # and the QoS 2 flow's three
        ("62 02 1234", 4, PubRel(0x1234)),
        ("70 02 1234", 5, PubComp(0x1234, 0, {})),
        ("62 03 1234 92", 5, PubRel(0x1234, 0x92, {})),
    ],
)
def test_acks_read_the_same_on_either_path(wire: str, version: int, expected: Packet) -> None:
    assert PacketDecoder(protocol_version=version).feed(h(wire) * 2) == [expected, expected]


@pytest.mark.parametrize(
    ("wire", "version", "error"),
    [
        ("42 02 1234", 4, MalformedPacketError),  # reserved flags set [MQTT-2.2.2-1]
        ("40 02 1234", None, ProtocolError),  # before CONNECT [MQTT-3.1.0-1]
        ("40 01 12", 4, MalformedPacketError),  # too short for its packet id
        ("40 03 1234 00", 4, MalformedPacketError),  # 3.1.1 has no reason code
        ("60 02 1234", 4, MalformedPacketError),  # PUBREL's flags must be 0b0010 [MQTT-3.6.1-1]
        ("52 02 1234", 5, MalformedPacketError),
        ("70 02 1234", None, ProtocolError),
    ],
)
def test_bad_acks_are_refused_as_before(
    wire: str, version: int | None, error: type[Exception]
) -> None:
    with pytest.raises(error):
        PacketDecoder(protocol_version=version).feed(h(wire))


# Packets only a server sends, each also broken in its flags or body (an unknown or
# misplaced property, a body where none belongs): the type decides first.
_SERVER_ONLY_WIRES = [
    ("20 02 0000", 4),  # CONNACK
    ("21 02 0000", 4),  # CONNACK with reserved flags set
    ("90 03 0001 00", 4),  # SUBACK
    ("b0 02 0001", 4),  # UNSUBACK
    ("d0 00", 4),  # PINGRESP
    ("d0 01 00", 4),  # PINGRESP with a body
    ("20 05 00 00 02 0100", 5),  # CONNACK with Payload Format Indicator, not a CONNACK property
    ("90 06 0001 02 0100 00", 5),  # SUBACK likewise
    ("b0 06 0001 02 0100 00", 5),  # UNSUBACK likewise
    ("90 05 0001 01 ff 00", 5),  # SUBACK with an unknown property
]


@pytest.mark.parametrize(("wire", "version"), _SERVER_ONLY_WIRES)
def test_a_brokers_decoder_refuses_server_only_packets_as_a_protocol_error(
    wire: str, version: int
) -> None:
    """The type alone is a Protocol Error (0x82) [MQTT-4.8.0-1], whatever the body holds:
    a bad property must not turn it into a Malformed Packet (0x81)."""
    decoder = PacketDecoder(protocol_version=version, from_client=True)
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(h(wire))
    assert type(caught.value) is ProtocolError
    assert caught.value.reason_code == ReasonCode.PROTOCOL_ERROR
    assert "sent only by a server" in str(caught.value)


def test_a_brokers_decoder_still_reads_what_clients_send() -> None:
    decoder = PacketDecoder(protocol_version=5, from_client=True)
    wire = h("c0 00 40 03 1234 10 e0 00")  # PINGREQ, PUBACK 0x10 (full path), DISCONNECT
    assert [type(packet).__name__ for packet in decoder.feed(wire)] == [
        "PingReq",
        "PubAck",
        "Disconnect",
    ]


def test_a_clients_decoder_reads_server_only_packets() -> None:
    """Without `from_client` (a client's decoder) CONNACK is decoded like any packet, and
    a broken one is what its body makes it."""
    assert len(PacketDecoder(protocol_version=4).feed(h("20 02 0000"))) == 1
    with pytest.raises(MalformedPacketError):  # Payload Format Indicator in CONNACK
        PacketDecoder(protocol_version=5).feed(h("20 05 00 00 02 0100"))
