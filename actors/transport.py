"""The write side of one client socket: never blocks the actor that writes.

`Transport.write` first tries a plain non-blocking `send` on the underlying socket (gevent's
`sendall` costs a `getsockopt` and a possible greenlet switch per call). Whatever the kernel
does not take goes into a backlog that a flusher greenlet drains with gevent's `sendall`,
so a slow client never stalls its client actor, its session actor, or the publishers writing
to it. `backlog_bytes` lets the session drop QoS 0 traffic to a client that is not keeping up
(`limits.max_write_buffer`).

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
from collections import deque
from collections.abc import Callable

import gevent
import gevent.event
from gevent import socket

from actors.stream_layers import StreamLayer

logger = logging.getLogger(__name__)

CLOSE_FLUSH_TIMEOUT = 2.0  # seconds a closing transport waits for its backlog to drain


class Transport:
    __slots__ = (
        "_backlog",
        "_close_when_flushed",
        "_closed_event",
        "_flusher",
        "_raw",
        "_sock",
        "backlog_bytes",
        "closed",
        "on_error",
        "peer",
    )

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self._sock = sock
        self._raw = sock._sock  # the stdlib socket under gevent's, already non-blocking
        self.peer = peer
        self._backlog: deque[bytes] | None = None  # only while a flusher runs
        self.backlog_bytes = 0
        self._flusher: gevent.Greenlet | None = None
        self._close_when_flushed = False
        self.closed = False
        self._closed_event: gevent.event.Event | None = None  # created when someone waits
        self.on_error: Callable[[OSError], None] | None = None

    def write(self, data: bytes) -> bool:
        """Queue `data` for the socket; False if the transport is closed (data discarded)."""
        if self.closed or self._close_when_flushed:
            return False
        if self._backlog is not None:  # bytes already wait: keep the stream in order
            self._backlog.append(data)
            self.backlog_bytes += len(data)
            return True
        try:
            sent = self._raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as error:
            self._fail(error)
            return False
        if sent < len(data):
            rest = data[sent:]
            self._backlog = deque((rest,))
            self.backlog_bytes += len(rest)
            self._flusher = gevent.spawn(self._flush_backlog)
        return True

    # Bytes already in socket form: the same as `write` without stream layers.
    write_raw = write

    def close(self) -> None:
        """Close after the backlog is written (bounded by CLOSE_FLUSH_TIMEOUT)."""
        if self.closed:
            return
        if self._flusher is not None:
            self._close_when_flushed = True
            gevent.spawn_later(CLOSE_FLUSH_TIMEOUT, self._close_now)
            return
        self._close_now()

    def wait_closed(self, timeout: float) -> None:
        """Block this greenlet until the transport is closed (or `timeout` passes)."""
        if self.closed:
            return
        if self._closed_event is None:
            self._closed_event = gevent.event.Event()
        self._closed_event.wait(timeout)

    def wait_flushed(self, timeout: float) -> bool:
        """Block this greenlet until the backlog is written; False if `timeout` passed first."""
        flusher = self._flusher
        if flusher is not None and not self.closed:
            flusher.join(timeout)
        return self._flusher is None or self.closed

    def _close_now(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._closed_event is not None:
            self._closed_event.set()
        self._backlog = None
        self.backlog_bytes = 0
        if self._flusher is not None and self._flusher is not gevent.getcurrent():
            self._flusher.kill(block=False)
        with contextlib.suppress(OSError):  # already disconnected by the peer
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def _flush_backlog(self) -> None:
        backlog = self._backlog
        assert backlog is not None
        try:
            while backlog and not self.closed:
                chunk = b"".join(backlog)
                backlog.clear()
                self._sock.sendall(chunk)
                self.backlog_bytes -= len(chunk)
        except OSError as error:
            self._fail(error)
            return
        finally:
            self._flusher = None
            self._backlog = None
        self.backlog_bytes = 0
        if self._close_when_flushed:
            self._close_now()

    def _fail(self, error: OSError) -> None:
        logger.debug("write to %s failed: %s", self.peer, error)
        callback = self.on_error
        self._close_now()
        if callback is not None:
            callback(error)


class LayeredTransport(Transport):
    """A transport whose MQTT bytes pass through stream layers (tls, ws, wss listeners)."""

    __slots__ = ("_layers",)

    def __init__(self, sock: socket.socket, peer: str, layers: StreamLayer) -> None:
        super().__init__(sock, peer)
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
