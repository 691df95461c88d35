"""The admin listener's connections: pywsgi with timeouts, a cap, and one line per bad request.

pywsgi alone gives every connection a greenlet of the server's pool for as long as the
client keeps it open, waits for a request's bytes without limit and prints a traceback for
some malformed requests: a few dozen idle or half-sent requests (slowloris) would fill the
pool and leave `/api/v1/health` unanswered while they are held. Here:

- a connection waiting for its next request (or, with TLS, for its handshake to finish:
  `admin.server` defers it to the first read) is closed after `[http] idle_timeout` seconds;
- a request's line and headers must arrive within `[http] header_timeout` seconds of its
  first byte (else the connection is closed, one INFO line); `admin.server` gives its body
  as long again;
- at most `[http] max_connections` connections are open (the pool's size); when a new one
  takes the last slot, the connection that has waited longest for a request (idle, or with
  a request still arriving) is closed, so a new client is always served while any
  connection merely waits: a probe gets its answer however many connections an attacker
  holds, as long as they send nothing complete. Connections running a request are never
  closed for a newcomer (they wait in the accept backlog instead);
- a malformed request (over 100 headers, a header line over 64 KiB, a bad request line) is
  answered 431 or 400 and logged as one INFO line, without a traceback;
- the rest of a body a request did not read (a 413, a 401 before the body) is not parsed:
  after the answer the connection is shut for sending, and what the client still sends is
  read and dropped for up to LINGER_SECONDS (and LINGER_BYTES) before it is closed. Closing
  with unread bytes would make the kernel answer with a reset, which reaches a client still
  writing its body before it reads the answer (http.client, `requests`): it saw a broken
  pipe instead of the 413. This is Apache's and nginx's lingering close;
- answers are sent without Nagle's delay (TCP_NODELAY).
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import time
from typing import Any

import gevent
import orjson
from gevent import pywsgi

logger = logging.getLogger(__name__)

CAP_WARNING_INTERVAL = 60.0  # seconds between two "at the cap" warnings
LINGER_SECONDS = 2.0  # reading and dropping an unread body after the answer, at most
LINGER_BYTES = 16 * 1_048_576  # and at most this much of it


class _TooSlow(BaseException):
    """A timer of this module fired in the handler's greenlet (BaseException: pywsgi's
    `except Exception` around reading the request must not take it for bad input)."""


class ConnectionTable:
    """The listener's open connections and, for those waiting for a request, since when."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._open: set[AdminHandler] = set()
        self._waiting: dict[AdminHandler, float] = {}  # insertion order: oldest first
        self._warned_at = -CAP_WARNING_INTERVAL

    def opened(self, handler: AdminHandler) -> AdminHandler | None:
        """Count `handler` in; at the cap, the connection to close for it (the one that has
        waited longest for a request), if any waits."""
        self._open.add(handler)
        self.waiting(handler)
        if len(self._open) < self.cap:
            return None
        victim = next((h for h in self._waiting if h is not handler), None)
        now = time.monotonic()
        if now - self._warned_at >= CAP_WARNING_INTERVAL:
            self._warned_at = now
            logger.warning(
                "admin HTTP: %d connections open, the cap ([http] max_connections); closing "
                "the one that waited longest for a request for each new one",
                len(self._open),
            )
        return victim

    def waiting(self, handler: AdminHandler) -> None:
        """`handler` waits for a request (or for the rest of one)."""
        self._waiting.pop(handler, None)
        self._waiting[handler] = time.monotonic()

    def serving(self, handler: AdminHandler) -> None:
        """`handler` has a whole request's head and runs it: not to be closed for others."""
        self._waiting.pop(handler, None)

    def closed(self, handler: AdminHandler) -> None:
        self._open.discard(handler)
        self._waiting.pop(handler, None)


class _UnreadInput(pywsgi.Input):
    """The request body, whose unread rest is not read after the answer: pywsgi would read
    (and wait for) a declared length in full; the handler closes the connection instead."""

    __slots__ = ()

    def _discard(self) -> None:
        return None


class AdminHandler(pywsgi.WSGIHandler):
    """pywsgi's handler with the timeouts, the table and the answers to bad requests."""

    server: AdminWSGIServer
    _evicted = False
    _header_timer: gevent.Timeout | None = None

    def handle(self) -> None:
        # pywsgi writes an answer's head and body in two sends: with Nagle's algorithm the
        # body waits for the client's delayed ACK of the head (40 ms per request).
        with contextlib.suppress(OSError):  # a unix socket has no TCP options
            self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        table = self.server.table
        victim = table.opened(self)
        if victim is not None:
            victim.evict()
        try:
            super().handle()
        finally:
            table.closed(self)

    def evict(self) -> None:
        """Close the connection for a newcomer: its greenlet reads the end of the stream."""
        self._evicted = True
        logger.debug("admin HTTP: closing the idle connection from %s for a new one", self._peer)
        with contextlib.suppress(OSError, AttributeError):  # closed, or gone (no attribute)
            self.socket.shutdown(socket.SHUT_RDWR)

    @property
    def _peer(self) -> str:
        address = self.client_address
        return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)

    def handle_one_request(self) -> Any:
        server = self.server
        server.table.waiting(self)
        try:
            with gevent.Timeout(server.idle_timeout, _TooSlow):
                first = self.rfile.peek(1)
        except _TooSlow:
            logger.debug(
                "admin HTTP: closed the connection from %s: no request within %g s "
                "([http] idle_timeout)",
                self._peer,
                server.idle_timeout,
            )
            return None
        except OSError:
            return None
        if not first or self._evicted:
            return None
        timer = self._header_timer = gevent.Timeout(server.header_timeout, _TooSlow)
        timer.start()
        try:
            return super().handle_one_request()
        except _TooSlow:
            if self._evicted:
                return None
            logger.info(
                "admin HTTP: closed the connection from %s: its request's line and headers "
                "did not arrive within %g s ([http] header_timeout)",
                self._peer,
                server.header_timeout,
            )
            return None
        finally:
            timer.close()

    def read_request(self, raw_requestline: str) -> Any:
        result = super().read_request(raw_requestline)
        if self._evicted:  # the head ended where the stream was cut: not a request
            raise _TooSlow
        if self._header_timer is not None:
            self._header_timer.close()
        self.server.table.serving(self)
        return result

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        self.wsgi_input.__class__ = _UnreadInput
        return environ

    def handle_one_response(self) -> None:
        super().handle_one_response()
        body = self.wsgi_input
        if body is None:
            return
        if body.chunked_input or body.position < (body.content_length or 0):
            self.close_connection = True
            self._linger()

    def _linger(self) -> None:
        """Drop what the client still sends of a body nobody read, then let pywsgi close: the
        answer is already sent, and the shutdown tells the client no more comes."""
        dropped = 0
        with contextlib.suppress(OSError, _TooSlow), gevent.Timeout(LINGER_SECONDS, _TooSlow):
            self.socket.shutdown(socket.SHUT_WR)
            while dropped < LINGER_BYTES:
                chunk = self.rfile.read1(65536)
                if not chunk:
                    return
                dropped += len(chunk)
        logger.debug(
            "admin HTTP: closing the connection from %s with its body unread (%d bytes "
            "dropped after the answer)",
            self._peer,
            dropped,
        )

    def _handle_client_error(self, ex: BaseException) -> Any:
        if self._evicted:
            return None
        if isinstance(ex, http.client.HTTPException) or "Line too long" in str(ex):
            status, text = 431, "Request Header Fields Too Large"
            reason = f"{ex} (at most 100 header lines of up to 64 KiB each)"
        else:
            status, text = 400, "Bad Request"
            reason = str(ex) or type(ex).__name__
        logger.info(
            "admin HTTP: refused a malformed request from %s: %s (answered %d)",
            self._peer,
            reason[:200],
            status,
        )
        body = orjson.dumps({"error": f"malformed HTTP request: {reason[:200]}"})
        head = (
            f"HTTP/1.1 {status} {text}\r\nConnection: close\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return str(status), head.encode("latin-1") + body


class AdminWSGIServer(pywsgi.WSGIServer):
    """pywsgi's server with `AdminHandler`, its table and timeouts; the pool is the cap."""

    handler_class = AdminHandler

    def __init__(
        self,
        listener: Any,
        application: Any,
        *,
        max_connections: int,
        idle_timeout: float,
        header_timeout: float,
        **kwargs: Any,
    ) -> None:
        super().__init__(listener, application, spawn=max_connections, **kwargs)
        self.table = ConnectionTable(max_connections)
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
