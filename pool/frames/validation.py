"""The checks a peer's bytes pass before they become frames: a control frame's JSON values
against its fields' annotations, and the JSON parts of the message-carrying frames. Bytes
that fail raise `FrameError`: the link that sent them is broken and is closed (the peer runs
other code than this worker)."""

from __future__ import annotations

from dataclasses import Field
from typing import Any

# What each field of a control frame may hold, from its annotation: the types its JSON value
# may have and, for a tuple (a JSON list), the types of its items (None: not a tuple). A
# peer's frame with another type is refused, not carried into the broker.
_NONE = type(None)
_FIELD_SHAPES: dict[str, tuple[tuple[type, ...], tuple[type, ...] | None]] = {
    "int": ((int,), None),
    "bool": ((bool,), None),
    "str": ((str,), None),
    "int | None": ((int, _NONE), None),
    "str | None": ((str, _NONE), None),
    "tuple[str, ...]": ((list,), (str,)),
    "tuple[int, ...]": ((list,), (int,)),
    "dict[str, Any]": ((dict,), None),
    "tuple[dict[str, Any], ...]": ((list,), (dict,)),
}

# A control field's name, the JSON types its value may have, and those of its items.
FieldShape = tuple[str, tuple[type, ...], tuple[type, ...] | None]


class FrameError(ValueError):
    """Bytes that are not a valid frame: the link is broken and must be closed."""


def field_shape(field: Field[Any]) -> FieldShape:
    """How a control frame's field is checked, from its annotation (a string: the frame
    modules postpone annotations)."""
    return (field.name, *_FIELD_SHAPES[str(field.type)])


def checked_values(
    name: str, shape: tuple[FieldShape, ...], values: object, extra: int = 0
) -> list[Any]:
    """The field values of a control frame called `name` (lists as tuples), each of its
    field's type, and `extra` more values after them, unchecked; else FrameError."""
    if type(values) is not list or len(values) != len(shape) + extra:
        raise FrameError(f"a {name} frame holds {values!r}")
    for index, (field, types, items) in enumerate(shape):
        value = values[index]
        if type(value) not in types:
            raise FrameError(f"a {name} frame's {field} is {value!r}")
        if items is not None:
            if not all(type(item) in items for item in value):
                raise FrameError(f"a {name} frame's {field} is {value!r}")
            values[index] = tuple(value)
    return values


def checked_delivery_row(row: object) -> tuple[int, bool, tuple[int, ...], None, int]:
    """A delivery's row (QoS, retain, subscription ids, seq), checked; else FrameError."""
    if (
        type(row) is list
        and len(row) == 4
        and row[0] in (0, 1, 2)
        and type(row[1]) is bool
        and type(row[2]) is list
        and all(type(item) is int for item in row[2])
        and type(row[3]) is int
        and row[3] >= 0
    ):
        return row[0], row[1], tuple(row[2]), None, row[3]
    raise FrameError(f"a delivery's row is {row!r}")


def checked_string_table(strings: object) -> list[str | None]:
    """A message part's string table: `None` (index 0), then strings; else FrameError."""
    if not (
        type(strings) is list
        and strings
        and strings[0] is None
        and all(type(string) is str for string in strings[1:])
    ):
        raise FrameError(f"a message frame's string table is {strings!r}")
    return strings


def is_share_row(share: object) -> bool:
    """Whether a share mark's group row is [group, filter, [client id, ...]]."""
    return (
        type(share) is list
        and len(share) == 3
        and type(share[0]) is str
        and type(share[1]) is str
        and type(share[2]) is list
        and all(type(client_id) is str for client_id in share[2])
    )
