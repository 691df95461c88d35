"""core.message: the fast builders give the same frozen `Message` the constructor gives."""

from __future__ import annotations

import dataclasses

import pytest

from core.message import Message, new_message, stored_message


def test_stored_message_is_the_constructor_s_message_and_as_frozen() -> None:
    built = stored_message("a/b", b"p", 1, True, "c", "u", 12.5, {1: 1}, 7)
    made = Message(
        topic="a/b",
        payload=b"p",
        qos=1,
        retain=True,
        publisher="c",
        username="u",
        timestamp=12.5,
        properties={1: 1},
        message_id=7,
    )
    assert type(built) is Message
    assert built == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.qos = 0  # type: ignore[misc]


def test_a_built_message_keeps_its_wire_and_replace_drops_it() -> None:
    built = stored_message("a", b"p", 0, False, None, None, 1.0, {}, 3, b"\x30\x06\x00\x01ap")
    assert built.wire == b"\x30\x06\x00\x01ap"
    assert dataclasses.replace(built, qos=1).wire is None


def test_new_message_stamps_now_and_the_next_id() -> None:
    first = new_message("t", b"", 0, False, "c", None, {})
    second = new_message("t", b"", 0, False, "c", None, {})
    assert second.message_id > first.message_id
    assert second.timestamp >= first.timestamp > 0
    assert type(first) is Message and first.wire is None
