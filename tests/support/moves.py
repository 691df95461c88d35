"""Test doubles of a session's move (pool.session_moves, cluster.move_forwarding), for the
in-process tests of both: a session ref that records what it is told, numbered deliveries,
and `RoutesSync` rounds answered when the test says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka

from core.message import Message
from core.session_state import Delivery


class Session:
    """An actor ref that records what it is told (`alive` False: it has stopped)."""

    def __init__(self) -> None:
        self.told: list[Any] = []
        self.alive = True

    def tell(self, message: Any) -> None:
        if not self.alive:
            raise pykka.ActorDeadError("stopped")
        self.told.append(message)


class Rounds:
    """`RoutesSync` rounds asked for (`append` is the `WhenRoutesKnown`), answered by
    `complete`."""

    def __init__(self) -> None:
        self.waiting: list[Callable[[], object]] = []

    def append(self, then: Callable[[], object]) -> None:
        self.waiting.append(then)

    def complete(self) -> None:
        waiting, self.waiting = self.waiting, []
        for then in waiting:
            then()


def delivery(number: int, seq: int = 0) -> Delivery:
    """A QoS 1 delivery of message `number` (its payload and its id), stored as `seq`."""
    message = Message(topic="t", payload=b"%d" % number, qos=1, timestamp=0.0, message_id=number)
    return Delivery(message, 1, False, (), None, seq)
