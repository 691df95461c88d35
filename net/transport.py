"""The write side of one client socket: never blocks whoever writes, holds no greenlet.

`Transport.write` tries a plain non-blocking `send`. Whatever the kernel does not take goes
into a backlog, and a write watcher on the event loop sends it when the socket is writable
again, so a slow client never stalls its client actor, its session actor, or the publishers
writing to it. `backlog_bytes` lets the session drop QoS 0 traffic to a client that is not
keeping up, and the reader pause (`limits.max_write_buffer`); `last_progress` says when the
client last took any bytes.

On a tls, ws or wss listener the connection has a `LayeredTransport`: `write` first passes
the MQTT bytes through the connection's stream layers (encryption, WebSocket framing), and
`close` writes their closing bytes (a WebSocket close frame, TLS close_notify) before the
socket is shut; `write_raw` is for the reader's layer answers (handshake records), already in
socket form. A plain `Transport` (tcp, unix) has no layer code on its path.

Several actors write to one transport (the client actor for acknowledgements, the session
actor for deliveries); gevent never preempts between two statements, and `write` never
yields, so writes are never interleaved mid-packet.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

from net.inprocess import WRITE, PipeEnd, watch
from net.stream_layers import StreamLayer

logger = logging.getLogger(__name__)

CLOSE_FLUSH_TIMEOUT = 2.0  # seconds a closing transport waits for its backlog to drain
COALESCE = 65536  # small backlog chunks are joined up to this size per send


class Transport:
    __slots__ = (
        "_backlog",
        "_close_timer",
        "_close_when_flushed",
        "_loop",
        "_sock",
        "_writer",
        "backlog_bytes",
        "closed",
        "last_progress",
        "on_closing",
        "on_error",
        "on_flushed",
        "peer",
    )

    def __init__(self, sock: socket.socket | PipeEnd, peer: str, loop: Any) -> None:
        self._sock = sock  # non-blocking
        self._loop = loop  # gevent's event loop: the write watcher and close timer live there
        self.peer = peer
        self._backlog: deque[bytes] | None = None  # only while bytes wait
        self.backlog_bytes = 0
        self._writer: Any = None  # the write watcher, while bytes wait
        self._close_timer: Any = None
        self._close_when_flushed = False
        self.closed = False
        self.last_progress = 0.0  # loop time the client last took bytes (while some wait)
        # Called once when a send fails, before anything else happens (before `on_closing`):
        # whoever owns the connection hears why it ended, then the socket is closed.
        self.on_error: Callable[[OSError], None] | None = None
        self.on_flushed: Callable[[], None] | None = None  # called once the backlog is out
        # Called before the socket is closed: the reader stops watching its descriptor first
        # (libev must not watch a closed descriptor, whose number the kernel reuses).
        self.on_closing: Callable[[], None] | None = None

    def write(self, data: bytes) -> bool:
        """Queue `data` for the socket; False if the transport is closed (data discarded)."""
        if self.closed or self._close_when_flushed:
            return False
        if self._backlog is not None:  # bytes already wait: keep the stream in order
            self._backlog.append(data)
            self.backlog_bytes += len(data)
            return True
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as error:
            self._fail(error)
            return False
        if sent < len(data):
            rest = data[sent:]
            self._backlog = deque((rest,))
            self.backlog_bytes = len(rest)
            self.last_progress = self._loop.now()
            self._writer = watch(self._loop, self._sock, WRITE)
            self._writer.start(self._on_writable)
        return True

    # Bytes already in socket form: the same as `write` without stream layers.
    write_raw = write

    def close(self) -> None:
        """Close after the backlog is written (bounded by CLOSE_FLUSH_TIMEOUT)."""
        if self.closed or self._close_when_flushed:
            return
        if self._backlog is not None:
            self._close_when_flushed = True
            self._close_timer = self._loop.timer(CLOSE_FLUSH_TIMEOUT)
            self._close_timer.start(self._close_now)
            return
        self._close_now()

    def _on_writable(self) -> None:
        backlog = self._backlog
        if backlog is None or self.closed:
            return
        sock = self._sock
        while backlog:
            chunk = backlog[0]
            if len(chunk) < COALESCE and len(backlog) > 1:
                parts = [backlog.popleft()]
                size = len(chunk)
                while backlog and size + len(backlog[0]) <= COALESCE:
                    size += len(backlog[0])
                    parts.append(backlog.popleft())
                chunk = b"".join(parts)
                backlog.appendleft(chunk)
            try:
                sent = sock.send(chunk)
            except BlockingIOError:
                return
            except OSError as error:
                self._fail(error)
                return
            self.backlog_bytes -= sent
            self.last_progress = self._loop.now()
            if sent < len(chunk):
                backlog[0] = chunk[sent:]
                return
            backlog.popleft()
        self._writer.stop()
        self._writer = None
        self._backlog = None
        self.backlog_bytes = 0
        if self._close_when_flushed:
            self._close_now()
        elif self.on_flushed is not None:
            on_flushed, self.on_flushed = self.on_flushed, None
            on_flushed()

    def _close_now(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.on_closing is not None:
            on_closing, self.on_closing = self.on_closing, None
            on_closing()
        self._backlog = None
        self.backlog_bytes = 0
        for watcher in (self._writer, self._close_timer):
            if watcher is not None:
                watcher.stop()
        self._writer = self._close_timer = None
        self.on_flushed = None
        with contextlib.suppress(OSError):  # already disconnected by the peer
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def _fail(self, error: OSError) -> None:
        """A send failed (the peer reset, say): report it, then close. The report comes
        first: `on_closing` may make the owner stop listening, and a loss nobody hears of
        leaves a client that is connected to nothing (its will never sent, still counted)."""
        logger.debug("write to %s failed: %s", self.peer, error)
        on_error, self.on_error = self.on_error, None
        if on_error is not None:
            on_error(error)
        self._close_now()


class LayeredTransport(Transport):
    """A transport whose MQTT bytes pass through stream layers (tls, ws, wss listeners)."""

    __slots__ = ("_layers",)

    def __init__(
        self, sock: socket.socket | PipeEnd, peer: str, loop: Any, layers: StreamLayer
    ) -> None:
        super().__init__(sock, peer, loop)
        self._layers = layers

    def write(self, data: bytes) -> bool:
        """Queue MQTT bytes: the layers' form of them goes to the socket."""
        if self.closed or self._close_when_flushed:
            return False
        return super().write(self._layers.send(data))

    def write_raw(self, data: bytes) -> bool:
        """Queue bytes already in socket form (the layers' own answers)."""
        return super().write(data)

    def close(self) -> None:
        """Write the layers' closing bytes, then close as a Transport does."""
        if not self.closed and not self._close_when_flushed:
            farewell = self._layers.close()
            if farewell:
                super().write(farewell)
        super().close()
