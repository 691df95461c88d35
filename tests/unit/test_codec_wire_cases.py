"""The shared wire-fixture table through the codec: decode, encode, chunking, rejections."""

from __future__ import annotations

import pytest

from mqtt import MqttError, PacketDecoder, encode
from tests.fixtures.wire_packets import BAD_CASES, WIRE_CASES, BadWireCase, WireCase, decoder_for


def _case_id(case: WireCase | BadWireCase) -> str:
    return f"v{case.version}-{case.name}-{case.spec_ref}"


@pytest.mark.parametrize("case", WIRE_CASES, ids=_case_id)
def test_fixture_decodes_to_its_packet(case: WireCase) -> None:
    decoder = decoder_for(case.version, case.wire)
    assert decoder.feed(case.wire) == [case.packet]
    assert decoder.buffered == 0


@pytest.mark.parametrize("case", [c for c in WIRE_CASES if c.round_trip], ids=_case_id)
def test_packet_encodes_to_fixture_bytes(case: WireCase) -> None:
    assert encode(case.packet, case.version) == case.wire


@pytest.mark.parametrize("case", WIRE_CASES, ids=_case_id)
def test_byte_by_byte_feed_equals_whole_feed(case: WireCase) -> None:
    decoder = decoder_for(case.version, case.wire)
    packets = []
    for index in range(len(case.wire)):
        packets += decoder.feed(case.wire[index : index + 1])
    assert packets == [case.packet]


@pytest.mark.parametrize("version", [3, 4, 5])
def test_stream_of_all_cases_of_a_version_splits_into_the_same_packets(version: int) -> None:
    cases = [c for c in WIRE_CASES if c.version == version and c.wire[0] != 0x10]
    stream = b"".join(c.wire for c in cases)
    whole = PacketDecoder(protocol_version=version).feed(stream)
    chunked_decoder = PacketDecoder(protocol_version=version)
    chunked = []
    for start in range(0, len(stream), 7):
        chunked += chunked_decoder.feed(stream[start : start + 7])
    assert whole == chunked == [c.packet for c in cases]


@pytest.mark.parametrize("case", BAD_CASES, ids=_case_id)
def test_bad_packet_is_rejected_with_its_reason_code(case: BadWireCase) -> None:
    decoder = decoder_for(case.version, case.wire)
    with pytest.raises(case.error) as caught:
        decoder.feed(case.wire)
    assert type(caught.value) is case.error
    assert caught.value.reason_code == case.error.default_reason_code
    spec_number = case.spec_ref.removeprefix("MQTT-")
    assert spec_number in str(caught.value), "the message should cite the rule it enforces"


@pytest.mark.parametrize("case", BAD_CASES[:5], ids=_case_id)
def test_decoder_is_unusable_after_an_error(case: BadWireCase) -> None:
    decoder = decoder_for(case.version, case.wire)
    with pytest.raises(MqttError):
        decoder.feed(case.wire)
    with pytest.raises(MqttError, match="unusable"):
        decoder.feed(b"\xc0\x00")
