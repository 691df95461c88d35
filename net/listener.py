"""The MQTT listener: gevent's StreamServer, made to refuse connections it has no descriptor for.

Every accepted connection holds a file descriptor. Once the process has used up its limit
(RLIMIT_NOFILE: `accept` fails with EMFILE; ENFILE when the whole system's table is full), the
connection stays in the listen backlog. gevent's StreamServer then prints a traceback for each
failed `accept` and retries after a growing delay, while the client waits in the backlog for
nothing. `Listener` refuses it at once instead, the way libev's documentation and nginx do: it
keeps one spare descriptor open (on /dev/null); out of descriptors, it closes the spare,
accepts the waiting connection, closes it (the client sees the connection closed before a
CONNACK), and opens the spare again. It keeps watching the listening socket, so the first
connection after descriptors are freed is accepted as usual, and the connected clients are
served meanwhile. Refusals are logged at most once a second with counts
(`net.rate_limited_log`), naming the limit and what to change.

Other `accept` failures print no traceback either: failures of one connection (ECONNABORTED,
and the network errors accept(2) says to retry like EAGAIN) are logged at DEBUG and accepting
goes on; others (ENOBUFS, ENOMEM, EMFILE without a spare descriptor) are logged as a WARNING
and accepting pauses briefly, for 10 ms doubling up to 1 s while they persist; a broken
listening socket (EBADF, EINVAL, ENOTSOCK) stops the listener with an ERROR line, as gevent
itself would.

With `max_connection_rate` (connections per second, a token bucket: `core.rate_limit`), a
connection beyond the rate waits in the listen backlog: accepting stops until the bucket has
a token again, and is logged at most once a second. In a pool of `workers` processes, each
accepting on its own SO_REUSEPORT socket to which the kernel hashes about 1/`workers` of the
connections, each worker's bucket fills at its 1/`workers` part of the rate (and holds
1/`workers` of the burst), so the pool as a whole accepts at about the configured rate
(docs/pool.md).

Every configured listener is one `Listener` (tcp, tls, ws, wss on an address; unix on a
socket file made by `bind_unix`, removed again on close); what differs between them is in
the handler's `net.endpoint.Endpoint`. An accepted connection is handed to the handler as a
plain stdlib socket, in the accepting callback itself (`do_handle`): no greenlet is spawned per
connection, and the handler, not the server, closes the socket.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import socket as stdlib_socket
import stat
from collections.abc import Callable
from typing import Any

from gevent import socket
from gevent.server import StreamServer

from core.rate_limit import TokenBucket
from net.rate_limited_log import RateLimitedLog

logger = logging.getLogger(__name__)

OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
# accept(2): "the application should detect the network errors defined for the protocol after
# accept() and treat them like EAGAIN by retrying"; plus an aborted connection and a firewall
# rule (EPERM). Each concerns one connection only.
CONNECTION_ERRORS = frozenset(
    getattr(errno, name)
    for name in (
        "ECONNABORTED",
        "EPERM",
        "EPROTO",
        "ENETDOWN",
        "ENOPROTOOPT",
        "EHOSTDOWN",
        "ENONET",
        "EHOSTUNREACH",
        "EOPNOTSUPP",
        "ENETUNREACH",
    )
    if hasattr(errno, name)
)
MIN_PAUSE = 0.01  # seconds accepting pauses after a failure; doubles while failures go on
MAX_PAUSE = 1.0


class Listener(StreamServer):
    """A StreamServer that refuses connections at once when out of file descriptors."""

    _reserve: int | None = None  # the spare descriptor; a class default for close() in __init__

    def __init__(
        self,
        address: tuple[str, int] | socket.socket,
        handle: Callable[[Any, Any], object],
        backlog: int | None,
        connection_rate: float = 0.0,
        workers: int = 1,
    ) -> None:
        super().__init__(address, handle, backlog=backlog)
        self._log = RateLimitedLog(logger)
        self._pause = MIN_PAUSE
        self._configured_rate = connection_rate  # the listener's, per second; 0: unlimited
        self._workers = workers
        self._connection_rate = connection_rate / workers  # this process's part of it
        self._bucket: TokenBucket | None = None  # made on the first accept (the loop's clock)

    def init_socket(self) -> None:
        """Bind and listen (gevent), and open the spare descriptor."""
        super().init_socket()
        if self.socket.family in (socket.AF_INET, socket.AF_INET6):
            # MQTT packets are small and latency counts: no Nagle delay. Set on the listening
            # socket, every accepted connection inherits it (Linux): one system call per
            # listener instead of one per connection.
            self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._reserve is None:
            self._reserve = _open_reserve()

    def close(self) -> None:
        """Stop accepting, close the listening socket and the spare descriptor."""
        unix_path = self.address if isinstance(self.address, str) and self.address else None
        try:
            super().close()
        finally:
            if self._reserve is not None:
                os.close(self._reserve)
                self._reserve = None
            if unix_path is not None:
                with contextlib.suppress(OSError):  # replaced meanwhile: not ours any more
                    _remove_socket_file(unix_path)

    def do_read(self) -> tuple[stdlib_socket.socket, Any] | None:  # type: ignore[override]
        """Accept one connection: (socket, address), or None if none is to be handled now.

        Out of descriptors, it refuses waiting connections (up to `max_accept` of them) until
        one can be accepted or none is left.

        Called by gevent's `_do_read` up to `max_accept` times per wake-up of the listening
        socket; it never raises OSError, so gevent neither prints tracebacks nor stops
        accepting on its own.
        """
        sock = self.socket
        for _ in range(self.max_accept):
            if self._connection_rate and self._over_connection_rate():
                return None
            try:
                fd, address = sock._accept()  # type: ignore[attr-defined]  # gevent's raw accept
            except BlockingIOError:
                return None  # nothing waiting
            except OSError as error:
                if error.errno in OUT_OF_DESCRIPTORS and self._reserve is not None:
                    if self._refuse_one(error):
                        continue  # the next waiting connection may be refused too
                    return None
                if error.errno in CONNECTION_ERRORS:
                    self._log.note(
                        "failed connections",
                        1,
                        f"a connection to {self._where()} failed before it was accepted "
                        f"({_describe(error)}); the client can retry",
                        logging.DEBUG,
                    )
                    continue
                self._accept_failed(error)
                return None
            self._pause = MIN_PAUSE
            if self._bucket is not None:
                self._bucket.take(1, self.loop.now())
            if self._reserve is None:
                self._reserve = _open_reserve()  # after a failure: descriptors may be free again
            return stdlib_socket.socket(sock.family, sock.type, sock.proto, fileno=fd), address
        return None

    def _over_connection_rate(self) -> bool:
        """True if accepting must wait for the connection rate; then it waits (a timer)."""
        now = self.loop.now()
        if self._bucket is None:
            self._bucket = TokenBucket(self._connection_rate, now)
        wait = self._bucket.wait(1, now)
        if wait <= 0:
            return False
        share = f", {self._connection_rate:g}/s on each of {self._workers} workers"
        self._log.note(
            "connection rate",
            1,
            f"listener {self._where()} is over max_connection_rate "
            f"({self._configured_rate:g}/s{share if self._workers > 1 else ''}): "
            f"accepting waits {wait:.3f} s",
            logging.INFO,
        )
        self.stop_accepting()
        self._timer = self.loop.timer(wait)
        self._timer.start(self._start_accepting_if_started)  # type: ignore[attr-defined,call-arg]  # gevent internals
        return True

    def do_handle(self, *args: Any) -> None:
        """Call the handler in the accepting callback, with no greenlet: it only sets the
        connection up (watchers, actors) and returns; the socket is its to close."""
        self._handle(*args)  # type: ignore[attr-defined]  # gevent's handler attribute

    def _refuse_one(self, error: OSError) -> bool:
        """Out of descriptors: close the oldest waiting connection using the spare descriptor.

        True if one was refused; False if none was waiting or accepting failed again (then
        it was logged and accepting pauses).
        """
        assert self._reserve is not None
        os.close(self._reserve)
        self._reserve = None
        try:
            fd, address = self.socket._accept()  # type: ignore[attr-defined]
        except OSError as again:
            self._reserve = _open_reserve()
            if not isinstance(again, BlockingIOError):
                self._accept_failed(again)
            return False
        os.close(fd)
        self._reserve = _open_reserve()
        peer = f"{address[0]}:{address[1]}"
        text = f"refused connection from {peer}: {_limit_advice(error)}"
        self._log.note("refused connections", 1, text, logging.WARNING)
        return True

    def _accept_failed(self, error: OSError) -> None:
        """Log a failure of `accept` (no traceback) and pause or stop accepting."""
        if self.is_fatal_error(error):
            logger.error(
                "listener on %s stopped: accept() failed with %s; the listening socket is "
                "unusable and the broker accepts no more connections: restart it",
                self._where(),
                _describe(error),
            )
            self.close()
            return
        if error.errno in OUT_OF_DESCRIPTORS:
            text = (
                f"listener on {self._where()}: out of descriptors and no spare one to refuse "
                f"connections with, they wait in the listen backlog: {_limit_advice(error)}"
            )
        elif error.errno in (errno.ENOBUFS, errno.ENOMEM):
            text = (
                f"accept() on {self._where()} failed: {_describe(error)}: the socket buffers "
                "are out of memory; lower listener.max_connections or free memory"
            )
        else:
            text = f"accept() on {self._where()} failed: {_describe(error)}"
        self._log.note(
            "accept failures",
            1,
            f"{text} (accepting pauses for {self._pause:.2f} s)",
            logging.WARNING,
        )
        self.stop_accepting()
        self._timer = self.loop.timer(self._pause)
        self._timer.start(self._start_accepting_if_started)  # type: ignore[attr-defined,call-arg]  # gevent internals
        self._pause = min(MAX_PAUSE, self._pause * 2)

    def _where(self) -> str:
        if isinstance(self.address, str):
            return self.address  # a unix socket's path
        return f"{self.address[0]}:{self.address[1]}"


def bind_unix(path: str, backlog: int) -> socket.socket:
    """A listening unix socket on `path`. A socket file left by a previous run is replaced;
    one another process listens on is an error (EADDRINUSE), as is any other file (EEXIST)."""
    if os.path.exists(path) and _accepts_connections(path):
        raise OSError(errno.EADDRINUSE, "Address already in use (another process listens on it)")
    _remove_socket_file(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def _accepts_connections(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _remove_socket_file(path: str) -> None:
    """Remove the socket file at `path` if there is one; refuse to remove anything else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(errno.EEXIST, f"{path} exists and is not a socket", path)
    os.unlink(path)


def _open_reserve() -> int | None:
    """The spare descriptor, or None if the process has none to spare either."""
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None


def _describe(error: OSError) -> str:
    """The error's symbolic name (EMFILE...) and, but for EMFILE/ENFILE, its message."""
    code = error.errno
    name = errno.errorcode.get(code, str(code)) if code is not None else type(error).__name__
    if code in OUT_OF_DESCRIPTORS or not error.strerror:
        return name
    return f"{name}: {error.strerror}"


def _limit_advice(error: OSError) -> str:
    """What ran out (EMFILE: this process's RLIMIT_NOFILE; ENFILE: the system's table), and
    what to change."""
    if error.errno == errno.ENFILE:
        return (
            "the system-wide open file table is full (ENFILE); raise fs.file-max (sysctl) or "
            "lower listener.max_connections"
        )
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f"the broker has used up its file descriptor limit (EMFILE, RLIMIT_NOFILE {soft}); "
        "raise it (`ulimit -n` before starting the broker, LimitNOFILE= under systemd) or lower "
        "listener.max_connections below it"
    )
