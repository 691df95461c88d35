"""The admin listener's connection table: which connection is closed for a newcomer."""

from __future__ import annotations

from typing import Any

from admin.http_handler import ConnectionTable


def handlers(count: int) -> list[Any]:
    return [object() for _ in range(count)]


def test_below_the_cap_nobody_is_closed() -> None:
    table = ConnectionTable(cap=3)
    a, b = handlers(2)
    assert table.opened(a) is None
    assert table.opened(b) is None


def test_at_the_cap_the_longest_waiting_is_closed_never_one_being_served() -> None:
    table = ConnectionTable(cap=3)
    a, b, c, d = handlers(4)
    table.opened(a)
    table.opened(b)
    table.serving(a)  # a runs a request: not to be closed
    assert table.opened(c) is b
    table.closed(b)
    table.waiting(a)  # a's request is done: it waits again, newer than c
    assert table.opened(d) is c


def test_when_every_other_connection_is_served_nobody_is_closed() -> None:
    table = ConnectionTable(cap=2)
    a, b = handlers(2)
    table.opened(a)
    table.serving(a)
    assert table.opened(b) is None  # nobody else waits: newcomers wait in the backlog
