"""The store process: serves one `SqliteStore` to one broker, or to a pool's workers.

A single broker starts it (`store.process_store`) as `python -m store.store_process`, with
one end of a socket pair. A pool's supervisor starts it with `--listen PATH` instead (and
starts another on the same path when it dies): it then listens on that Unix socket, every
worker connects (again after a restart of either), and each request is served whole in
turn, one writer for SQLite (docs/pool.md). In that mode it ends when the supervisor's
`--parent-fd` pipe closes and the last worker has disconnected, so the workers' last
commits during a shutdown still land.

With one broker it opens the store, answers READY (or FAILED with the reason and exits 1),
then applies each APPLY batch in one transaction and answers DONE, or FAILED with the
`StoreError` (nothing was changed; the broker retries). Between batches it runs the store's
upkeep (WAL checkpoints, compaction), so that never waits on the broker's event loop; a
failure there is logged and retried after MAINTENANCE_RETRY_DELAY, as nothing is lost.

It ends when the broker sends CLOSE or closes the socket (a broker killed with SIGKILL
closes it too), after closing the store. It ignores SIGINT, SIGTERM and SIGHUP: a Ctrl-C in
the terminal or a service manager signals the whole process group, and the broker must still
be able to commit its last batches while it shuts down.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

from store.base import StoreError
from store.op_codec import gc_paused
from store.process_protocol import (
    APPLY,
    CLOSE,
    DONE,
    FAILED,
    LOAD,
    LOAD_SESSION,
    READY,
    receive_frame,
    send_frame,
)
from store.sqlite_store import SYNCHRONOUS_MODES, SqliteStore

logger = logging.getLogger(__name__)

MAINTENANCE_RETRY_DELAY = 5.0  # seconds without upkeep after a failed attempt


class _Server:
    def __init__(self, store: SqliteStore, sock: socket.socket) -> None:
        self._store = store
        self._socket = sock
        self._maintenance_paused_until = 0.0

    def serve(self) -> None:
        while self.serve_one(self._socket, close_store=True):
            pass

    def serve_one(self, sock: socket.socket, *, close_store: bool) -> bool:
        """Answer the next request on `sock`; False once that connection is done with."""
        try:
            kind, body = receive_frame(sock)
        except (EOFError, OSError):
            logger.info("%r: a broker closed its connection", self._store)
            return False
        if kind == CLOSE:
            if close_store:
                self._store.close()
            send_frame(sock, DONE)
            return False
        try:
            answer = self._answer(kind, body)
        except (StoreError, ValueError) as error:
            send_frame(sock, FAILED, str(error).encode())
            return True
        send_frame(sock, DONE, answer)
        if kind == APPLY:
            self._maintain_if_due()
        return True

    def _answer(self, kind: int, body: bytearray) -> bytes:
        if kind == APPLY:
            self._store.apply_encoded(body)
            return b""
        if kind == LOAD:
            with gc_paused():
                return self._store.load_encoded()
        if kind == LOAD_SESSION:
            return self._store.load_session_encoded(body.decode("utf-8", "surrogatepass"))
        raise ValueError(f"unknown request kind {kind}")

    def _maintain_if_due(self) -> None:
        if time.monotonic() < self._maintenance_paused_until:
            return
        if not self._store.needs_maintenance():
            return
        try:
            self._store.maintain()
        except StoreError as error:
            self._maintenance_paused_until = time.monotonic() + MAINTENANCE_RETRY_DELAY
            logger.error(
                "%r: maintenance (checkpoint, compaction) failed, nothing was lost; "
                "retrying in %.0f s: %s",
                self._store,
                MAINTENANCE_RETRY_DELAY,
                error,
            )


def serve_pool(store: SqliteStore, listener: socket.socket, parent_fd: int) -> None:
    """Serve every worker that connects to `listener`, one request at a time, until the
    `parent_fd` pipe has closed and no worker is connected any more."""
    server = _Server(store, listener)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(parent_fd, selectors.EVENT_READ, "parent")
    connections: dict[int, socket.socket] = {}  # the workers' sockets by descriptor
    parent_alive = True
    while parent_alive or connections:
        for key, _events in selector.select():
            if key.data == "listener":
                sock, _address = listener.accept()
                sock.setblocking(True)
                selector.register(sock, selectors.EVENT_READ, "worker")
                connections[sock.fileno()] = sock
            elif key.data == "parent":
                selector.unregister(parent_fd)
                parent_alive = False
                logger.info("%r: the pool is stopping; serving its workers' last commits", store)
            else:
                sock = connections[key.fd]
                try:
                    alive = server.serve_one(sock, close_store=False)
                except OSError:
                    alive = False
                if not alive:
                    selector.unregister(sock)
                    del connections[key.fd]
                    sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="the SQLite file")
    parser.add_argument("--socket-fd", type=int, help="inherited socket (one broker)")
    parser.add_argument("--listen", type=Path, help="Unix socket for a pool's workers")
    parser.add_argument("--parent-fd", type=int, help="with --listen: ends when it closes")
    parser.add_argument("--synchronous", choices=SYNCHRONOUS_MODES, default="normal")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.listen is not None:
        return _main_pool(args)
    if args.socket_fd is None:
        parser.error("give --socket-fd (one broker) or --listen with --parent-fd (a pool)")
    with socket.socket(fileno=args.socket_fd) as sock:
        try:
            with gc_paused():  # opening replays the message log into its index
                store = SqliteStore(args.path, synchronous=args.synchronous)
        except StoreError as error:
            send_frame(sock, FAILED, str(error).encode())
            return 1
        send_frame(sock, READY)
        try:
            _Server(store, sock).serve()
        except OSError as error:  # the broker went away while we answered
            logger.info("%r: the connection to the broker broke: %s", store, error)
        finally:
            store.close()
    return 0


def _main_pool(args: argparse.Namespace) -> int:
    """--listen: open the store, listen, say READY on the parent pipe's partner, serve."""
    with contextlib.suppress(FileNotFoundError):
        args.listen.unlink()
    try:
        with gc_paused():
            store = SqliteStore(args.path, synchronous=args.synchronous)
    except StoreError as error:
        logger.error("cannot open the store: %s", error)
        return 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(args.listen))
    listener.listen(64)
    logger.info("%r: serving the pool's workers on %s", store, args.listen)
    try:
        serve_pool(store, listener, args.parent_fd)
    finally:
        listener.close()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
