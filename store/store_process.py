"""The store process: serves one `SqliteStore` to one broker over a socket.

The broker starts it (`store.process_store`) as `python -m store.store_process`, with one end
of a socket pair. It opens the store, answers READY (or FAILED with the reason and exits 1),
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
import logging
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
        while True:
            try:
                kind, body = receive_frame(self._socket)
            except EOFError:
                logger.info("%r: the broker closed the connection", self._store)
                return
            if kind == CLOSE:
                self._store.close()
                send_frame(self._socket, DONE)
                return
            try:
                answer = self._answer(kind, body)
            except (StoreError, ValueError) as error:
                send_frame(self._socket, FAILED, str(error).encode())
                continue
            send_frame(self._socket, DONE, answer)
            if kind == APPLY:
                self._maintain_if_due()

    def _answer(self, kind: int, body: bytearray) -> bytes:
        if kind == APPLY:
            self._store.apply_encoded(body)
            return b""
        if kind == LOAD:
            with gc_paused():
                return self._store.load_encoded()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="the SQLite file")
    parser.add_argument("--socket-fd", type=int, required=True, help="inherited socket")
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


if __name__ == "__main__":
    sys.exit(main())
