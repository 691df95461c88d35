"""The bound on one connection's unprocessed input: what the reader handed over, not yet handled.

The socket reader decodes a whole read at once and tells the packets to the client actor (or
acknowledgements to the session actor). Without a bound, a client that writes faster than
the broker handles its packets fills the actors' mailboxes without limit (a QoS 0 flood
reached 3.8 GB in 15 s). With it, the reader adds each batch here, the actor that handles
the batch calls `done`, and while more than `max_packets` packets or `max_bytes` bytes
(`limits.max_unprocessed_packets` / `max_unprocessed_bytes`) are outstanding the reader waits
instead of reading: the socket's receive buffer fills and TCP slows the client down.
"""

from __future__ import annotations

import gevent.event


class Intake:
    __slots__ = ("_resume", "bytes", "closed", "max_bytes", "max_packets", "packets")

    def __init__(self, max_packets: int, max_bytes: int) -> None:
        self.max_packets = max_packets
        self.max_bytes = max_bytes
        self.packets = 0
        self.bytes = 0
        self.closed = False
        self._resume: gevent.event.Event | None = None  # created by the first wait

    def add(self, packets: int, size: int) -> None:
        """The reader handed over `packets` packets decoded from `size` bytes."""
        self.packets += packets
        self.bytes += size

    def done(self, packets: int, size: int) -> None:
        """An actor handled a batch that `add` counted; wakes the reader once below the bound."""
        self.packets -= packets
        self.bytes -= size
        if self._resume is not None and not self.full():
            self._resume.set()

    def full(self) -> bool:
        return self.packets >= self.max_packets or self.bytes >= self.max_bytes

    def wait(self, timeout: float) -> bool:
        """Block the reader until the actors caught up or the connection closed.

        False if `timeout` passed first."""
        if not self.full() or self.closed:
            return True
        if self._resume is None:
            self._resume = gevent.event.Event()
        self._resume.clear()
        return self._resume.wait(timeout)

    def close(self) -> None:
        """The connection is closing: nothing will call `done` any more; release the reader."""
        self.closed = True
        if self._resume is not None:
            self._resume.set()
