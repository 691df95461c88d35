"""The bound on one connection's unprocessed input: what was read, not yet handled.

The socket side decodes a whole read at once and hands the packets to the actors. Without a
bound, a client that writes faster than the broker handles its packets fills the actors'
mailboxes without limit (a QoS 0 flood reached 3.8 GB in 15 s). With it, every batch read is
`add`ed here, the actor that handles the batch calls `done`, and while more than
`max_packets` packets or `max_bytes` bytes (`limits.max_unprocessed_packets` /
`max_unprocessed_bytes`) are outstanding the connection stops reading: the socket's receive
buffer fills and TCP slows the client down. `on_room` is called when a `done` brings the
count back under the bound, so the reader can resume.

Flow control (`core.flow`) uses the same pause: a session over its high-water mark, or the
worker's memory alarm, `hold`s the intake of a connection that publishes to it, and the
connection does not read while any hold is on; the last `release` calls `on_room`.
"""

from __future__ import annotations

from collections.abc import Callable

from core.flow import FlowState

_BLOCKED = FlowState.BLOCKED


class Intake:
    __slots__ = (
        "__weakref__",  # a pool's flow control names publishers by weak reference
        "blocked",
        "bytes",
        "closed",
        "held",
        "max_bytes",
        "max_packets",
        "on_room",
        "packets",
    )

    def __init__(self, max_packets: int, max_bytes: int) -> None:
        self.max_packets = max_packets
        self.max_bytes = max_bytes
        self.packets = 0
        self.bytes = 0
        self.closed = False
        self.held = 0  # flow-control holds (sessions over high water, the memory alarm)
        self.blocked = 0  # of which the memory alarm's
        self.on_room: Callable[[], None] | None = None  # set while the reader waits for room

    def add(self, packets: int, size: int) -> None:
        """The reader handed over `packets` packets decoded from `size` bytes."""
        self.packets += packets
        self.bytes += size

    def done(self, packets: int, size: int) -> None:
        """An actor handled a batch that `add` counted; calls `on_room` once below the bound."""
        self.packets -= packets
        self.bytes -= size
        on_room = self.on_room
        if on_room is not None and not self.full():
            self.on_room = None
            on_room()

    def full(self) -> bool:
        return self.packets >= self.max_packets or self.bytes >= self.max_bytes or self.held > 0

    @property
    def state(self) -> FlowState:
        """running, flow or blocked (docs/overload.md)."""
        if self.blocked:
            return FlowState.BLOCKED
        return FlowState.FLOW if self.held else FlowState.RUNNING

    def hold(self, why: FlowState) -> None:
        """Flow control: stop reading until the matching `release`."""
        self.held += 1
        if why is _BLOCKED:
            self.blocked += 1

    def release(self, why: FlowState) -> None:
        self.held -= 1
        if why is _BLOCKED:
            self.blocked -= 1
        on_room = self.on_room
        if on_room is not None and not self.full():
            self.on_room = None
            on_room()

    def close(self) -> None:
        """The connection is closing: nothing will call `done` any more."""
        self.closed = True
        self.on_room = None
