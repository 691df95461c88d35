"""Stored records: every record type survives encoding to columns and back, bytes included."""

from __future__ import annotations

import dataclasses
import inspect
import math
import sqlite3
import typing
from enum import IntEnum

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.message import Message, stored_message
from store.base import IN_FLIGHT_STAGES, SessionMeta, StoredDelivery, StoredSubscription
from store.records import (
    DELIVERY_COLUMNS,
    DELIVERY_FIELDS,
    MESSAGE_COLUMNS,
    MESSAGE_FIELDS,
    META_COLUMNS,
    decode_properties,
    delivery_from_put,
    delivery_from_record,
    delivery_to_record,
    encode_properties,
    message_from_record,
    message_to_record,
    meta_from_record,
    meta_to_record,
    put_record,
)

mqtt_strings = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
uint16 = st.integers(1, 65535)

# MQTT 5 PUBLISH properties with the value types the codec produces (MQTT 5.0 3.3.2.3).
publish_properties = st.fixed_dictionaries(
    {},
    optional={
        1: st.integers(0, 1),  # Payload Format Indicator
        2: st.integers(0, 2**32 - 1),  # Message Expiry Interval
        3: mqtt_strings,  # Content Type
        8: mqtt_strings,  # Response Topic
        9: st.binary(max_size=64),  # Correlation Data
        11: st.lists(st.integers(1, 268_435_455), min_size=1, max_size=3),  # Subscription Id
        35: uint16,  # Topic Alias
        38: st.lists(st.tuples(mqtt_strings, mqtt_strings), max_size=4),  # User Property
    },
)

messages = st.builds(
    Message,
    topic=mqtt_strings.filter(bool),
    payload=st.binary(max_size=256),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    publisher=st.none() | mqtt_strings,
    username=st.none() | mqtt_strings,
    timestamp=st.floats(0, 4e9),
    properties=publish_properties,
    message_id=st.integers(1, 2**62),
)


@st.composite
def deliveries(draw: st.DrawFn) -> StoredDelivery:
    in_flight = draw(st.booleans())
    return StoredDelivery(
        message=draw(messages),
        qos=draw(st.integers(0, 2)),
        retain=draw(st.booleans()),
        subscription_ids=tuple(draw(st.lists(st.integers(1, 268_435_455), max_size=3))),
        packet_id=draw(uint16) if in_flight else None,
        stage=draw(st.sampled_from(sorted(IN_FLIGHT_STAGES))) if in_flight else None,
    )


subscriptions = st.builds(
    StoredSubscription,
    qos=st.integers(0, 2),
    no_local=st.booleans(),
    retain_as_published=st.booleans(),
    retain_handling=st.integers(0, 2),
    subscription_id=st.none() | st.integers(1, 268_435_455),
)

metas = st.builds(
    SessionMeta,
    protocol_version=st.sampled_from([3, 4, 5]),
    expiry_interval=st.floats(0, 2**32) | st.just(math.inf),
    disconnected_at=st.none() | st.floats(0, 4e9),
    next_packet_id=uint16,
    subscriptions=st.dictionaries(mqtt_strings.filter(bool), subscriptions, max_size=4),
    awaiting_rel=st.frozensets(uint16, max_size=5),
)

SQLITE_VALUE_TYPES = (str, int, float, bytes, type(None))


def _through_sqlite(record: tuple[object, ...]) -> tuple[object, ...]:
    """Store a record in an SQLite row and read it back, as the store does."""
    connection = sqlite3.connect(":memory:")
    columns = ", ".join(f"c{index}" for index in range(len(record)))
    connection.execute(f"CREATE TABLE t ({columns})")
    connection.execute(f"INSERT INTO t VALUES ({', '.join('?' * len(record))})", record)
    row: tuple[object, ...] = connection.execute("SELECT * FROM t").fetchone()
    connection.close()
    return row


@settings(max_examples=60, deadline=None)
@given(messages)
def test_message_round_trip_through_an_sqlite_row(message: Message) -> None:
    record = message_to_record(message)
    assert len(record) == len(MESSAGE_COLUMNS)
    assert all(isinstance(value, SQLITE_VALUE_TYPES) for value in record)
    assert message_from_record(_through_sqlite(record)) == message


@settings(max_examples=60, deadline=None)
@given(deliveries())
def test_delivery_round_trip_through_an_sqlite_row(entry: StoredDelivery) -> None:
    record = delivery_to_record(entry)
    assert len(record) == len(DELIVERY_COLUMNS)
    assert delivery_from_record(_through_sqlite(record)) == entry


@settings(max_examples=60, deadline=None)
@given(metas)
def test_session_meta_round_trip_through_an_sqlite_row(meta: SessionMeta) -> None:
    record = meta_to_record(meta)
    assert len(record) == len(META_COLUMNS)
    assert meta_from_record(_through_sqlite(record)) == meta


@settings(max_examples=60, deadline=None)
@given(deliveries())
def test_delivery_round_trip_through_the_message_log_json(entry: StoredDelivery) -> None:
    record = orjson.loads(orjson.dumps(put_record("c", 7, entry)))
    assert record[:4] == ["put", "c", 7, len(entry.message.payload)]
    assert len(record) == 4 + len(DELIVERY_COLUMNS) - 1  # the payload travels apart
    assert delivery_from_put(record, entry.message.payload) == entry


def test_the_declared_message_fields_are_the_message_s_in_stored_message_order() -> None:
    """The declaration names every field of Message (less the derived `wire`), with its type,
    in the order `stored_message` takes them: a field added to Message must be declared."""
    hints = typing.get_type_hints(Message)
    init_fields = [field.name for field in dataclasses.fields(Message) if field.init]
    assert [field.attribute for field in MESSAGE_FIELDS] == init_fields
    assert [*init_fields, "wire"] == list(inspect.signature(stored_message).parameters)
    assert [field.type for field in MESSAGE_FIELDS] == [hints[name] for name in init_fields]


def test_the_declared_delivery_fields_are_the_message_s_then_stored_delivery_s() -> None:
    hints = typing.get_type_hints(StoredDelivery)
    own = [field.name for field in dataclasses.fields(StoredDelivery)][1:]  # after `message`
    message_part, own_part = (
        DELIVERY_FIELDS[: len(MESSAGE_FIELDS)],
        DELIVERY_FIELDS[len(MESSAGE_FIELDS) :],
    )
    assert [f.attribute for f in message_part] == [f"message.{f.attribute}" for f in MESSAGE_FIELDS]
    assert [f.attribute for f in own_part] == own
    assert [f.type for f in own_part] == [hints[name] for name in own]
    assert DELIVERY_COLUMNS[-2:] == ("packet_id", "stage")  # the log marks these in place


def test_properties_are_json_text_with_binary_values_base64_encoded() -> None:
    correlation = bytes(range(256))  # not valid UTF-8
    text = encode_properties({9: correlation, 38: [("a", "1"), ("a", "2")], 11: [7]})
    assert isinstance(text, str)
    decoded_json = orjson.loads(text)
    assert [pair[0] for pair in decoded_json] == [9, 38, 11]
    assert decode_properties(text) == {9: correlation, 38: [("a", "1"), ("a", "2")], 11: [7]}


def test_user_property_pairs_come_back_as_tuples_in_order() -> None:
    properties = decode_properties(encode_properties({38: [("z", "1"), ("a", "2"), ("z", "3")]}))
    assert properties[38] == [("z", "1"), ("a", "2"), ("z", "3")]
    assert all(isinstance(pair, tuple) for pair in properties[38])


def test_no_properties_are_stored_as_null() -> None:
    assert encode_properties({}) is None
    assert decode_properties(None) == {}


def test_enum_property_ids_come_back_as_equal_ints() -> None:
    class PropertyId(IntEnum):
        CORRELATION_DATA = 9

    properties = decode_properties(encode_properties({PropertyId.CORRELATION_DATA: b"x"}))
    assert properties == {9: b"x"}
    assert properties[PropertyId.CORRELATION_DATA] == b"x"


def test_a_property_value_of_an_unknown_type_is_refused() -> None:
    with pytest.raises(TypeError, match="set"):
        encode_properties({38: {("a", "b")}})


def test_subscription_options_missing_from_an_older_record_take_their_defaults() -> None:
    record = (4, 60.0, None, 1, '{"a/#": {"qos": 1}}', "[]")
    assert meta_from_record(record).subscriptions == {"a/#": StoredSubscription(qos=1)}


@pytest.mark.parametrize(
    ("packet_id", "stage"),
    [(None, "await_puback"), (5, None), (5, "await_pubrel"), (None, "queued")],
)
def test_a_delivery_needs_packet_id_and_a_known_stage_together(
    packet_id: int | None, stage: str | None
) -> None:
    with pytest.raises(ValueError, match="stage"):
        StoredDelivery(
            message=Message(topic="t", payload=b""),
            qos=1,
            retain=False,
            packet_id=packet_id,
            stage=stage,
        )
