"""Conversion of stored objects to plain column tuples and back (the on-disk record format).

A record is a tuple of SQLite-ready values: str, int, float, bytes or None. The payload stays
bytes (a BLOB); the structured parts (MQTT 5 properties, subscriptions, id lists) are JSON text
written with orjson. The `*_COLUMNS` tuples name the columns in record order, so the SQL in
`store.sqlite_store` and the records cannot drift apart.

MQTT 5 property values are not all JSON types: Correlation Data is binary and User Property is
a list of (name, value) tuples. Each value is therefore written with a tag where JSON would
lose its type: bytes as {"b": base64}, tuples as {"t": [...]}; lists, str, int, float, bool
and None as themselves. Properties are a list of [id, value] pairs, since JSON object keys
are strings only. Decoding gives the same values back, with plain int property ids.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from core.message import Message, stored_message
from store.base import SessionMeta, StoredDelivery, StoredSubscription

MESSAGE_COLUMNS = (
    "topic",
    "payload",
    "msg_qos",
    "msg_retain",
    "publisher",
    "username",
    "timestamp",
    "properties",
    "message_id",
)
DELIVERY_COLUMNS = (
    *MESSAGE_COLUMNS,
    "qos",
    "retain",
    "subscription_ids",
    "packet_id",
    "stage",
)
META_COLUMNS = (
    "protocol_version",
    "expiry_interval",
    "disconnected_at",
    "next_packet_id",
    "subscriptions",
    "awaiting_rel",
)

_PLAIN_TYPES = (str, int, float, bool, type(None))


def _encode_value(value: Any) -> Any:
    if isinstance(value, _PLAIN_TYPES):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"b": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return {"t": [_encode_value(item) for item in value]}
    if isinstance(value, list):
        return [_encode_value(item) for item in value]
    raise TypeError(f"cannot store a property value of type {type(value).__name__}: {value!r}")


def _decode_value(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_value(item) for item in value]
    if isinstance(value, dict):
        if "b" in value:
            return base64.b64decode(value["b"])
        return tuple(_decode_value(item) for item in value["t"])
    return value


def encode_properties(properties: Mapping[int, Any]) -> str | None:
    """JSON text for MQTT 5 properties; None when there are none (3.x messages)."""
    if not properties:
        return None
    pairs = [[int(key), _encode_value(value)] for key, value in properties.items()]
    return orjson.dumps(pairs).decode()


def decode_properties(text: str | None) -> dict[int, Any]:
    if text is None:
        return {}
    return {key: _decode_value(value) for key, value in orjson.loads(text)}


def message_to_record(message: Message) -> tuple[Any, ...]:
    return (
        message.topic,
        bytes(message.payload),
        message.qos,
        int(message.retain),
        message.publisher,
        message.username,
        message.timestamp,
        encode_properties(message.properties),
        message.message_id,
    )


def message_from_record(record: Sequence[Any]) -> Message:
    topic, payload, qos, retain, publisher, username, timestamp, properties, message_id = record
    return stored_message(
        topic,
        bytes(payload),
        qos,
        bool(retain),
        publisher,
        username,
        timestamp,
        decode_properties(properties),
        message_id,
    )


def delivery_to_record(entry: StoredDelivery) -> tuple[Any, ...]:
    return (
        *message_to_record(entry.message),
        entry.qos,
        int(entry.retain),
        orjson.dumps(entry.subscription_ids).decode() if entry.subscription_ids else None,
        entry.packet_id,
        entry.stage,
    )


def delivery_from_record(record: Sequence[Any]) -> StoredDelivery:
    message_part = len(MESSAGE_COLUMNS)
    qos, retain, subscription_ids, packet_id, stage = record[message_part:]
    return StoredDelivery(
        message=message_from_record(record[:message_part]),
        qos=qos,
        retain=bool(retain),
        subscription_ids=tuple(orjson.loads(subscription_ids)) if subscription_ids else (),
        packet_id=packet_id,
        stage=stage,
    )


def _subscription_fields(options: StoredSubscription) -> dict[str, Any]:
    return {
        "qos": options.qos,
        "no_local": options.no_local,
        "retain_as_published": options.retain_as_published,
        "retain_handling": options.retain_handling,
        "subscription_id": options.subscription_id,
    }


def _subscription_from_fields(fields: Mapping[str, Any]) -> StoredSubscription:
    # Missing keys take their defaults, so options added later need no schema migration.
    return StoredSubscription(
        qos=fields["qos"],
        no_local=fields.get("no_local", False),
        retain_as_published=fields.get("retain_as_published", False),
        retain_handling=fields.get("retain_handling", 0),
        subscription_id=fields.get("subscription_id"),
    )


def meta_to_record(meta: SessionMeta) -> tuple[Any, ...]:
    subscriptions = {name: _subscription_fields(opts) for name, opts in meta.subscriptions.items()}
    return (
        meta.protocol_version,
        float(meta.expiry_interval),
        meta.disconnected_at,
        meta.next_packet_id,
        orjson.dumps(subscriptions).decode(),
        orjson.dumps(sorted(meta.awaiting_rel)).decode(),
    )


def meta_from_record(record: Sequence[Any]) -> SessionMeta:
    protocol_version, expiry, disconnected_at, next_packet_id, subscriptions, awaiting = record
    return SessionMeta(
        protocol_version=protocol_version,
        expiry_interval=expiry,
        disconnected_at=disconnected_at,
        next_packet_id=next_packet_id,
        subscriptions={
            name: _subscription_from_fields(fields)
            for name, fields in orjson.loads(subscriptions).items()
        },
        awaiting_rel=frozenset(orjson.loads(awaiting)),
    )
