"""An in-process byte stream between two parts of one worker: no socket, no system call.

`pipe()` gives two connected ends. Each end is used as a non-blocking socket by the broker's
connection code (`net.connection`, `net.transport`): `send` takes what fits in the other
end's buffer (`CAPACITY` bytes, as a socket's buffer) or raises BlockingIOError, `recv`
gives what is buffered or raises BlockingIOError, b"" once the other end closed and its
bytes are read; a send to a closed end raises BrokenPipeError. Instead of a file descriptor
an end has watchers (`watcher`, what `watch` gives for it): they call their callback on a
later turn of the event loop while the end is readable (bytes or the end of the stream) or
writable (room, or the other end closed), as libev's level-triggered I/O watchers do.

`GreenEnd` wraps an end for a greenlet that waits, as a gevent socket does: its `send`
waits for room, its `recv` for bytes (the bridge's local link, `bridge.local_link`).
Closing an end wakes whatever waits on either end.
"""

from __future__ import annotations

import errno
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
from gevent.hub import Waiter

CAPACITY = 262144  # bytes an end buffers before `send` to it stops taking them
READ, WRITE = 1, 2  # the watcher masks, libev's values


class PipeEnd:
    """One end of an in-process stream: what it reads is what the other end sent."""

    __slots__ = ("_buffered", "_inbox", "_watchers", "closed", "other")

    def __init__(self) -> None:
        self._inbox: deque[bytes] = deque()
        self._buffered = 0  # bytes in `_inbox`
        self._watchers: list[Watcher] = []  # the started ones
        self.closed = False
        self.other: PipeEnd = self  # set by `pipe`

    # ----- the socket side ----------------------------------------------------------------

    def send(self, data: bytes | memoryview) -> int:
        """Give the other end as much of `data` as fits; how much. Raises BlockingIOError
        (no room), BrokenPipeError (the other end closed) or OSError (this end closed)."""
        if self.closed:
            raise OSError(errno.EBADF, "the stream is closed")
        other = self.other
        if other.closed:
            raise BrokenPipeError(errno.EPIPE, "the other end is closed")
        room = CAPACITY - other._buffered
        if room <= 0:
            raise BlockingIOError(errno.EAGAIN, "the other end's buffer is full")
        size = len(data)
        if size > room:
            data, size = data[:room], room
        was_empty = not other._buffered
        other._inbox.append(bytes(data))
        other._buffered += size
        if was_empty:
            other._notify(READ)
        return size

    def recv(self, size: int) -> bytes:
        """Up to `size` bytes the other end sent; b"" once it closed and all is read. Raises
        BlockingIOError (nothing yet) or OSError (this end closed)."""
        if self.closed:
            raise OSError(errno.EBADF, "the stream is closed")
        inbox = self._inbox
        if not inbox:
            if self.other.closed:
                return b""
            raise BlockingIOError(errno.EAGAIN, "nothing to read")
        was_full = self._buffered >= CAPACITY
        if len(inbox) == 1 and len(inbox[0]) <= size:
            data = inbox.popleft()
        else:
            parts = []
            taken = 0
            while inbox and taken < size:
                chunk = inbox.popleft()
                if taken + len(chunk) > size:
                    inbox.appendleft(chunk[size - taken :])
                    chunk = chunk[: size - taken]
                parts.append(chunk)
                taken += len(chunk)
            data = b"".join(parts)
        self._buffered -= len(data)
        if was_full:
            self.other._notify(WRITE)
        if inbox:
            self._notify(READ)  # level-triggered: still readable
        return data

    def setblocking(self, flag: bool) -> None:
        """Always non-blocking (the socket call the listener's set-up makes)."""

    def shutdown(self, how: int) -> None:
        """Close (the socket call a transport makes before `close`)."""
        if how == socket.SHUT_RDWR:
            self.close()

    def close(self) -> None:
        """End the stream: the other end reads what is buffered, then b""; its sends fail."""
        if self.closed:
            return
        self.closed = True
        self._inbox.clear()
        self._buffered = 0
        self._notify(READ | WRITE)
        self.other._notify(READ | WRITE)

    # ----- readiness ----------------------------------------------------------------------

    @property
    def readable(self) -> bool:
        return bool(self._inbox) or self.closed or self.other.closed

    @property
    def writable(self) -> bool:
        return self.other._buffered < CAPACITY or self.closed or self.other.closed

    def ready(self, mask: int) -> bool:
        return bool((mask & READ and self.readable) or (mask & WRITE and self.writable))

    def _notify(self, mask: int) -> None:
        for watcher in self._watchers:
            if watcher.mask & mask:
                watcher.wake()


class Watcher:
    """A libev-style I/O watcher of a `PipeEnd`: `start(callback, *args)`, `stop()`, `active`.

    While started, `callback(*args)` runs on a later turn of `loop` (a loop callback) each
    time the end became ready for `mask`, and again after each call while it stays ready."""

    __slots__ = ("_args", "_callback", "_end", "_loop", "_pending", "active", "mask")

    def __init__(self, loop: Any, end: PipeEnd, mask: int) -> None:
        self._loop = loop
        self._end = end
        self.mask = mask
        self._callback: Callable[..., Any] | None = None
        self._args: tuple[Any, ...] = ()
        self._pending = False  # a loop callback is scheduled
        self.active = False

    def start(self, callback: Callable[..., Any], *args: Any) -> None:
        self._callback = callback
        self._args = args
        if not self.active:
            self.active = True
            self._end._watchers.append(self)
        if self._end.ready(self.mask):
            self.wake()

    def stop(self) -> None:
        if self.active:
            self.active = False
            self._end._watchers.remove(self)

    def wake(self) -> None:
        if not self._pending:
            self._pending = True
            self._loop.run_callback(self._fire)

    def _fire(self) -> None:
        self._pending = False
        if not self.active or not self._end.ready(self.mask):
            return
        callback = self._callback
        assert callback is not None
        callback(*self._args)
        if self.active and self.mask & WRITE and self._end.writable:
            self.wake()  # level-triggered: still writable


def pipe() -> tuple[PipeEnd, PipeEnd]:
    """Two connected ends."""
    first, second = PipeEnd(), PipeEnd()
    first.other, second.other = second, first
    return first, second


def watch(loop: Any, sock: Any, mask: int) -> Any:
    """An I/O watcher of `sock` on `loop` for `mask` (READ, WRITE): libev's for a socket,
    a `Watcher` for a `PipeEnd`. Not started."""
    if type(sock) is PipeEnd:
        return Watcher(loop, sock, mask)
    return loop.io(sock.fileno(), mask)


class GreenEnd:
    """A `PipeEnd` for a greenlet: `send` and `recv` wait (gevent) as a gevent socket's do."""

    __slots__ = ("_end", "_reader", "_writer")

    def __init__(self, end: PipeEnd) -> None:
        self._end = end
        loop = gevent.get_hub().loop
        self._reader = Watcher(loop, end, READ)
        self._writer = Watcher(loop, end, WRITE)

    def send(self, data: bytes | memoryview) -> int:
        """Send some of `data`, waiting for room; how much. Raises OSError."""
        while True:
            try:
                return self._end.send(data)
            except BlockingIOError:
                _wait(self._writer)

    def recv(self, size: int) -> bytes:
        """Up to `size` bytes, waiting for some; b"" at the end. Raises OSError."""
        while True:
            try:
                return self._end.recv(size)
            except BlockingIOError:
                _wait(self._reader)

    def close(self) -> None:
        self._end.close()


def _wait(watcher: Watcher) -> None:
    """Until `watcher`'s end is ready (or closed): the loop callback switches back here."""
    waiter: Waiter[Any] = Waiter()
    watcher.start(waiter.switch, None)
    try:
        waiter.get()
    finally:
        watcher.stop()
