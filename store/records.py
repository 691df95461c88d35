"""The on-disk record format: stored objects as plain values and back, declared once.

A record is a sequence of SQLite-ready values: str, int, float, bytes or None. The payload
stays bytes (a BLOB); the structured parts (MQTT 5 properties, subscriptions, id lists) are
JSON text written with orjson.

A stored message and a stored delivery are declared once, as `MESSAGE_FIELDS` and
`DELIVERY_FIELDS`: for each field, in record order, its SQL column, the attribute it is
read from and its Python type. Everything else is derived from them: the column lists of
the SQL in `store.sqlite_store`, the SQL records (`message_to_record`, `delivery_to_record`
and back), the message log's put records (`put_record`, `delivery_from_put`, used by
`store.message_log`) and through those the op records of `store.op_codec`. A
field's type decides how each format holds it (`_SQL_FORMS`, `_LOG_FORMS`): SQLite has no
booleans, lists or mappings; the log is JSON, which has booleans and lists but no bytes.
Both formats are the released ones (tests/unit/test_sqlite_store.py opens stores written
before this declaration existed); a change to the declaration is a change of the on-disk
formats and needs a migration (`store.migrations`).

MQTT 5 property values are not all JSON types: Correlation Data is binary and User Property is
a list of (name, value) tuples. Each value is therefore written with a tag where JSON would
lose its type: bytes as {"b": base64}, tuples as {"t": [...]}; lists, str, int, float, bool
and None as themselves. Properties are a list of [id, value] pairs, since JSON object keys
are strings only. Decoding gives the same values back, with plain int property ids.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from core.message import Message, stored_message
from store.base import SessionMeta, StoredDelivery, StoredSubscription

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


Properties = dict[int, Any]
SubscriptionIds = tuple[int, ...]


class StoredField(NamedTuple):
    """One field of a stored message or delivery."""

    column: str  # its SQL column, and its name in every record format
    attribute: str  # where the value is read: an attribute path from the stored object
    type: object  # its Python type, which decides how each format holds it


# A stored message (`core.message.Message` less its `wire`), in record order: the order of
# the columns of `retained` and of the parameters of `core.message.stored_message`.
MESSAGE_FIELDS = (
    StoredField("topic", "topic", str),
    StoredField("payload", "payload", bytes),
    StoredField("msg_qos", "qos", int),
    StoredField("msg_retain", "retain", bool),
    StoredField("publisher", "publisher", str | None),
    StoredField("username", "username", str | None),
    StoredField("timestamp", "timestamp", float),
    StoredField("properties", "properties", Properties),
    StoredField("message_id", "message_id", int),
)
# A stored delivery (`store.base.StoredDelivery`): its message's fields, then its own in the
# order of its dataclass fields (the message log marks the last two in place).
DELIVERY_FIELDS = (
    *(field._replace(attribute=f"message.{field.attribute}") for field in MESSAGE_FIELDS),
    StoredField("qos", "qos", int),
    StoredField("retain", "retain", bool),
    StoredField("subscription_ids", "subscription_ids", SubscriptionIds),
    StoredField("packet_id", "packet_id", int | None),
    StoredField("stage", "stage", str | None),
)
# The log keeps a message's payload after the batch's JSON, not in its record.
_LOG_FIELDS = tuple(field for field in DELIVERY_FIELDS if field.type is not bytes)


def _columns(fields: Sequence[StoredField]) -> tuple[str, ...]:
    return tuple(field.column for field in fields)


MESSAGE_COLUMNS = _columns(MESSAGE_FIELDS)
DELIVERY_COLUMNS = _columns(DELIVERY_FIELDS)


def _ids_to_text(ids: SubscriptionIds) -> str | None:
    return orjson.dumps(ids).decode() if ids else None


def _ids_from_text(text: str | None) -> SubscriptionIds:
    return tuple(orjson.loads(text)) if text else ()


_Convert = Callable[[Any], Any] | None  # None: the value is held as it is
# How an SQLite column holds a value of each type it cannot hold as itself: (to, back).
_SQL_FORMS: dict[object, tuple[_Convert, _Convert]] = {
    bytes: (bytes, bytes),  # a BLOB (a memoryview or bytearray payload is stored as bytes)
    bool: (int, bool),
    Properties: (encode_properties, decode_properties),
    SubscriptionIds: (_ids_to_text, _ids_from_text),
}
# How the log's JSON holds them (orjson writes a tuple as a list).
_LOG_FORMS: dict[object, tuple[_Convert, _Convert]] = {
    Properties: (encode_properties, decode_properties),
    SubscriptionIds: (None, tuple),
}


def _converters(
    fields: Sequence[StoredField], forms: dict[object, tuple[_Convert, _Convert]], way: int
) -> dict[str, Callable[[Any], Any]]:
    """The conversions of `fields` in `forms` (`way` 0: to the format, 1: back), by the name
    the generated code calls them: `_<way>_<column>`."""
    converters = {}
    for field in fields:
        convert = forms.get(field.type, (None, None))[way]
        if convert is not None:
            converters[f"_{way}_{field.column}"] = convert
    return converters


def _compile(
    name: str, parameters: str, body: str, converters: dict[str, Callable[[Any], Any]]
) -> Callable[..., Any]:
    """`def name(parameters): body`, compiled with `converters` in its namespace.

    The record conversions run for every stored message, on the broker's loop for the log's,
    so they are generated from the declaration, as `dataclasses` generates `__init__`: they
    cost what hand-written ones do (a generic loop over the fields cost six times more).
    """
    namespace: dict[str, Any] = {
        "stored_message": stored_message,
        "StoredDelivery": StoredDelivery,
        **converters,
    }
    exec(f"def {name}({parameters}):\n    {body}\n", namespace)
    function: Callable[..., Any] = namespace[name]
    return function


def _values(
    fields: Sequence[StoredField], forms: dict[object, tuple[_Convert, _Convert]], source: str
) -> str:
    """The expressions of `fields` read from `source` and converted to the format."""
    return ", ".join(
        f"_0_{f.column}({source}.{f.attribute})"
        if forms.get(f.type, (None, None))[0] is not None
        else f"{source}.{f.attribute}"
        for f in fields
    ).replace(f"{source}.message.", "message.")  # read once: `message = entry.message`


def _objects(fields: Sequence[StoredField], forms: dict[object, tuple[_Convert, _Convert]]) -> str:
    """A constructor call building back the message (and delivery) of `fields`, from
    variables named by column."""

    def back(field: StoredField) -> str:
        convert = forms.get(field.type, (None, None))[1]
        return field.column if convert is None else f"_1_{field.column}({field.column})"

    message = f"stored_message({', '.join(back(f) for f in fields[:_MESSAGE_LENGTH])})"
    if len(fields) == _MESSAGE_LENGTH:
        return message
    return f"StoredDelivery({', '.join([message, *map(back, fields[_MESSAGE_LENGTH:])])})"


def _unpacked(names: Sequence[str], source: str) -> str:
    return f"({', '.join(names)},) = {source}; "


_MESSAGE_LENGTH = len(MESSAGE_FIELDS)

message_to_record: Callable[[Message], list[Any]] = _compile(
    "message_to_record",
    "message",
    f"return [{_values(MESSAGE_FIELDS, _SQL_FORMS, 'message')}]",
    _converters(MESSAGE_FIELDS, _SQL_FORMS, 0),
)
message_from_record: Callable[[Sequence[Any]], Message] = _compile(
    "message_from_record",
    "record",
    _unpacked(MESSAGE_COLUMNS, "record") + f"return {_objects(MESSAGE_FIELDS, _SQL_FORMS)}",
    _converters(MESSAGE_FIELDS, _SQL_FORMS, 1),
)
delivery_to_record: Callable[[StoredDelivery], list[Any]] = _compile(
    "delivery_to_record",
    "entry",
    f"message = entry.message; return [{_values(DELIVERY_FIELDS, _SQL_FORMS, 'entry')}]",
    _converters(DELIVERY_FIELDS, _SQL_FORMS, 0),
)
delivery_from_record: Callable[[Sequence[Any]], StoredDelivery] = _compile(
    "delivery_from_record",
    "record",
    _unpacked(DELIVERY_COLUMNS, "record") + f"return {_objects(DELIVERY_FIELDS, _SQL_FORMS)}",
    _converters(DELIVERY_FIELDS, _SQL_FORMS, 1),
)
# The message log's put record of a delivery: a head (the record kind PUT, the client id,
# the seq and the payload's length: the log keeps the payload after the batch's JSON), then
# the delivery's fields as JSON holds them; and back, given the payload.
PUT = "put"
LOG_RECORD_HEAD = ("kind", "client_id", "seq", "payload_length")
put_record: Callable[[str, int, StoredDelivery], list[Any]] = _compile(
    "put_record",
    "client_id, seq, entry",
    f"message = entry.message; return [{PUT!r}, client_id, seq, len(message.payload), "
    f"{_values(_LOG_FIELDS, _LOG_FORMS, 'entry')}]",
    _converters(_LOG_FIELDS, _LOG_FORMS, 0),
)
delivery_from_put: Callable[[Sequence[Any], bytes], StoredDelivery] = _compile(
    "delivery_from_put",
    "record, payload",
    _unpacked([*(f"_{name}" for name in LOG_RECORD_HEAD), *_columns(_LOG_FIELDS)], "record")
    + f"return {_objects(DELIVERY_FIELDS, _LOG_FORMS)}",
    _converters(DELIVERY_FIELDS, _LOG_FORMS, 1),
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
