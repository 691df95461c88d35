"""Property tests of the codec with hypothesis, for every packet type and protocol version.

- decode(encode(p)) == p;
- any chunking of a stream decodes to the same packets as the whole stream;
- arbitrary or mutated bytes give packets or an MqttError, never another exception, never a
  hang, and never more buffered bytes than the maximum packet size.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mqtt import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    MqttError,
    Packet,
    PacketDecoder,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    encode,
)
from mqtt.packets import PacketType
from mqtt.properties import PROPERTY_SPECS, WILL, DataType, PropertyId

SETTINGS = settings(max_examples=100, deadline=None)

_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
texts = st.text(_chars, max_size=8)
_level = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/+#"), max_size=4
)
topic_names = st.lists(_level, min_size=1, max_size=4).map("/".join).filter(bool)
topic_filters = (
    st.tuples(st.lists(st.one_of(_level, st.just("+")), min_size=1, max_size=4), st.booleans())
    .map(lambda parts: "/".join(parts[0] + (["#"] if parts[1] else [])))
    .filter(bool)
)
packet_ids = st.integers(1, 0xFFFF)
bytes_values = st.binary(max_size=16)

_VALUES: dict[DataType, st.SearchStrategy[Any]] = {
    DataType.BYTE: st.integers(0, 1),
    DataType.TWO_BYTE_INT: st.integers(1, 0xFFFF),
    DataType.FOUR_BYTE_INT: st.integers(1, 0xFFFFFFFF),
    DataType.VARINT: st.integers(1, 268_435_455),
    DataType.UTF8_STRING: texts,
    DataType.STRING_PAIR: st.tuples(texts, texts),
    DataType.BINARY: bytes_values,
}


def properties(packet_type: int) -> st.SearchStrategy[dict[int, Any]]:
    optional: dict[int, st.SearchStrategy[Any]] = {}
    for prop_id, spec in PROPERTY_SPECS.items():
        if packet_type not in spec.packet_types:
            continue
        value = _VALUES[spec.data_type]
        if prop_id == PropertyId.USER_PROPERTY:
            value = st.lists(value, min_size=1, max_size=3)
        elif prop_id == PropertyId.SUBSCRIPTION_IDENTIFIER:
            repeat = 3 if packet_type == PacketType.PUBLISH else 1
            value = st.lists(value, min_size=1, max_size=repeat)
        optional[prop_id] = value
    return st.fixed_dictionaries({}, optional=optional)  # type: ignore[arg-type]


def _props(version: int, packet_type: int) -> st.SearchStrategy[dict[int, Any]]:
    return properties(packet_type) if version == 5 else st.just({})


def _reason(version: int) -> st.SearchStrategy[int]:
    return st.integers(0, 255) if version == 5 else st.just(0)


def _wills(version: int) -> st.SearchStrategy[Will | None]:
    will = st.builds(
        Will, topic_names, bytes_values, st.integers(0, 2), st.booleans(), _props(version, WILL)
    )
    return st.none() | will


def _connects(version: int) -> st.SearchStrategy[Connect]:
    credentials = st.tuples(st.none() | texts, st.none() | bytes_values)
    if version < 5:  # [MQTT-3.1.2-22]
        credentials = credentials.filter(lambda pair: pair[0] is not None or pair[1] is None)
    return st.builds(
        lambda cid, clean, keepalive, creds, will, props: Connect(
            cid,
            version,
            clean,
            keepalive,
            creds[0],
            creds[1],
            will,
            props,
            "MQIsdp" if version == 3 else "MQTT",
        ),
        texts,
        st.booleans(),
        st.integers(0, 0xFFFF),
        credentials,
        _wills(version),
        _props(version, PacketType.CONNECT),
    )


def _publishes(version: int) -> st.SearchStrategy[Publish]:
    return st.integers(0, 2).flatmap(
        lambda qos: st.builds(
            Publish,
            topic_names,
            bytes_values,
            st.just(qos),
            st.booleans(),
            st.booleans(),
            packet_ids if qos else st.none(),
            _props(version, PacketType.PUBLISH),
        )
    )


def _subscriptions(version: int) -> st.SearchStrategy[Subscription]:
    if version < 5:
        return st.builds(Subscription, topic_filters, st.integers(0, 2))
    return st.builds(
        Subscription,
        topic_filters,
        st.integers(0, 2),
        st.booleans(),
        st.booleans(),
        st.integers(0, 2),
    )


def _acks(cls: type, version: int, packet_type: int) -> st.SearchStrategy[Packet]:
    return st.builds(cls, packet_ids, _reason(version), _props(version, packet_type))


def packets(version: int) -> st.SearchStrategy[Packet]:
    """Every valid packet of `version`."""
    suback_codes = st.integers(0, 255) if version == 5 else st.sampled_from([0, 1, 2, 0x80])
    choices: list[st.SearchStrategy[Any]] = [
        _connects(version),
        st.builds(
            ConnAck,
            st.booleans() if version >= 4 else st.just(False),
            st.integers(0, 255) if version == 5 else st.integers(0, 5),
            _props(version, PacketType.CONNACK),
        ),
        _publishes(version),
        _acks(PubAck, version, PacketType.PUBACK),
        _acks(PubRec, version, PacketType.PUBREC),
        _acks(PubRel, version, PacketType.PUBREL),
        _acks(PubComp, version, PacketType.PUBCOMP),
        st.builds(
            Subscribe,
            packet_ids,
            st.lists(_subscriptions(version), min_size=1, max_size=3),
            _props(version, PacketType.SUBSCRIBE),
        ),
        st.builds(
            SubAck,
            packet_ids,
            st.lists(suback_codes, min_size=1, max_size=3),
            _props(version, PacketType.SUBACK),
        ),
        st.builds(
            Unsubscribe,
            packet_ids,
            st.lists(topic_filters, min_size=1, max_size=3),
            _props(version, PacketType.UNSUBSCRIBE),
        ),
        st.builds(
            UnsubAck,
            packet_ids,
            st.lists(st.integers(0, 255), max_size=3) if version == 5 else st.just([]),
            _props(version, PacketType.UNSUBACK),
        ),
        st.just(PingReq()),
        st.just(PingResp()),
        st.builds(Disconnect, _reason(version), _props(version, PacketType.DISCONNECT)),
    ]
    if version == 5:
        choices.append(st.builds(Auth, _reason(version), _props(version, PacketType.AUTH)))
    return st.one_of(choices)


_PACKETS = {version: packets(version) for version in (3, 4, 5)}
versioned_packets = st.one_of(
    [st.tuples(st.just(version), strategy) for version, strategy in _PACKETS.items()]
)
versioned_streams = st.one_of(
    [
        st.tuples(
            st.just(version),
            st.lists(strategy.filter(lambda p: not isinstance(p, Connect)), max_size=5),
        )
        for version, strategy in _PACKETS.items()
    ]
)


@SETTINGS
@given(versioned_packets)
def test_decode_of_encode_is_identity(case: tuple[int, Packet]) -> None:
    version, packet = case
    wire = encode(packet, version)
    assert PacketDecoder(max_packet_size=len(wire), protocol_version=version).feed(wire) == [packet]


@SETTINGS
@given(versioned_streams, st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_any_chunking_gives_the_same_packets(
    case: tuple[int, list[Packet]], chunk_sizes: list[int]
) -> None:
    version, sent = case
    stream = b"".join(encode(packet, version) for packet in sent)
    decoder = PacketDecoder(protocol_version=version)
    received: list[Packet] = []
    pos = 0
    index = 0
    while pos < len(stream):
        size = chunk_sizes[index % len(chunk_sizes)]
        received += decoder.feed(stream[pos : pos + size])
        pos += size
        index += 1
    assert received == sent
    assert decoder.buffered == 0


def _feed_all(decoder: PacketDecoder, chunks: list[bytes]) -> None:
    """Feed until the first error; only MqttError may escape, the bound must hold."""
    for chunk in chunks:
        try:
            decoder.feed(chunk)
        except MqttError:
            return
        assert decoder.buffered < decoder.max_packet_size


@SETTINGS
@given(
    st.sampled_from([None, 3, 4, 5]),
    st.integers(2, 64),
    st.lists(st.binary(max_size=40), max_size=8),
)
def test_arbitrary_bytes_give_packets_or_mqtt_error(
    version: int | None, max_size: int, chunks: list[bytes]
) -> None:
    _feed_all(PacketDecoder(max_packet_size=max_size, protocol_version=version), chunks)


@SETTINGS
@given(versioned_packets, st.data())
def test_mutated_valid_packets_give_packets_or_mqtt_error(
    case: tuple[int, Packet], data: st.DataObject
) -> None:
    version, packet = case
    wire = bytearray(encode(packet, version))
    index = data.draw(st.integers(0, len(wire) - 1))
    wire[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(wire)))
    decoder = PacketDecoder(max_packet_size=256, protocol_version=version)
    _feed_all(decoder, [bytes(wire[:cut]), bytes(wire[cut:])])
