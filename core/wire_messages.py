"""Forwarded messages held as the 3.x QoS 0 PUBLISH packets they came in.

A `Forward` frame that another worker or node sends in the packet layout (one connection's
batch of messages that each carry the 3.x QoS 0 PUBLISH without RETAIN it was published
with, `Message.wire`: `pool.frames.packets`) decodes to a `WireMessages`: those PUBLISH
packets, the frame's runs of one topic and its publishers, with the `Message` objects built
only when something asks for them. The receiving dispatcher fans such a frame out a run at
a time (`actors.dispatch`), and a 3.x subscriber's session that writes QoS 0 messages at
once writes the packets as they are (`actors.messages.DeliverWires`); anything else (a 5.0
subscriber, a `message.delivered` hook, a session offline, slow or moving) has the messages
built. Building them was about half of what a receiving worker spent per message of a QoS 0
fan-in across workers or nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import overload

from core.message import Message


class WireMessages(Sequence[Message]):
    """A sequence of messages, known by their PUBLISH packets until first read."""

    __slots__ = ("_build", "_messages", "publishers", "runs", "wires")

    def __init__(
        self,
        wires: list[bytes],
        runs: list[tuple[str, int, int]],
        publishers: set[str | None],
        build: Callable[[], tuple[Message, ...]],
    ) -> None:
        self.wires = wires  # each message's PUBLISH packet, in order
        self.runs = runs  # (topic, start, end): wires[start:end] are those of one topic
        self.publishers = publishers  # the client ids that published them (for No Local)
        self._build = build  # the messages, each with its `wire`, in order
        self._messages: tuple[Message, ...] | None = None

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages, built on first use."""
        if self._messages is None:
            self._messages = self._build()
        return self._messages

    def __len__(self) -> int:
        return len(self.wires)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...

    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        return self.messages[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same messages (a frame decoded is equal to the one
        encoded)."""
        if isinstance(other, Sequence):
            return self.messages == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as a tuple of `Message`s: not hashable

    def __repr__(self) -> str:
        return f"WireMessages({self.messages!r})"


# What a `Forward` frame carries (`pool.frames.forwarding`): its messages, or their packets.
ForwardedMessages = tuple[Message, ...] | WireMessages
