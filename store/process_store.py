"""`ProcessStore`: the SQLite store, run in a process of its own (`store.store_process`).

Why: applying ops to `SqliteStore` (the message log's index, the SQL) cost the broker's
event loop about 6 µs per message to a persistent session, a fifth of its time under QoS 1
load. In a process of its own that work runs on another core; the loop only encodes the ops
(`store.op_codec`, about 1 µs per message) and writes them to a socket. The store's upkeep
(checkpoints, compaction) runs there too, between batches, and so does every fsync:
`synchronous = "full"` makes commits wait for the disk but never blocks the loop.

The `StoreWriter` calls `apply` from its greenlet; waiting for the answer yields to the
gevent loop (a gevent socket), so clients are served meanwhile and the next batch gathers.
`load` and `close` work the same way. Requests go one at a time (the writer owns the store).

If the store process dies (killed, out of memory), the call in progress raises `StoreError`
and the next call starts a new process, which reopens the file: a transaction is atomic and
ops are idempotent, so the writer's retry of the batch is exact.

In a pool (docs/pool.md) the supervisor runs one store process for every worker:
`ProcessStore(path, connect=socket_path)` connects to it instead of starting one (and
connects again after a failure), and `load_session` fetches one client id's session for a
worker that takes that session over.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import gevent.lock
import gevent.socket
import gevent.subprocess

from store.base import Op, Snapshot, StoreError
from store.op_codec import decode_snapshot, encode_ops
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

logger = logging.getLogger(__name__)

_PROJECT_ROOT = Path(__file__).resolve().parent.parent  # so the child imports this `store`
CONNECT_TIMEOUT = 10.0  # seconds a pool worker keeps trying to reach the pool's store


class ProcessStore:
    """A `Store` whose `SqliteStore` runs in a child process (see the module docstring)."""

    def __init__(
        self, path: Path, *, synchronous: str = "normal", connect: Path | None = None
    ) -> None:
        self.path = path
        self._synchronous = synchronous
        self._connect_to = connect
        # The writer's greenlet applies batches; in a pool, session loads come from others.
        self._one_request = gevent.lock.Semaphore()
        self._process: gevent.subprocess.Popen | None = None
        self._socket: gevent.socket.socket | None = None
        self._closed = False
        self._start()

    def __repr__(self) -> str:
        return f"ProcessStore({str(self.path)!r})"

    @property
    def process_id(self) -> int | None:
        """The store process's pid; None while there is none (after a death, until the next
        call starts one)."""
        return None if self._process is None else self._process.pid

    def _start(self) -> None:
        if self._connect_to is not None:
            self._connect()
            return
        ours, theirs = socket.socketpair()
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, (str(_PROJECT_ROOT), environment.get("PYTHONPATH")))
        )
        command = [
            sys.executable,
            "-m",
            "store.store_process",
            "--socket-fd",
            str(theirs.fileno()),
            "--synchronous",
            self._synchronous,
            "--log-level",
            logging.getLevelName(logging.getLogger().getEffectiveLevel()),
            str(self.path),
        ]
        with theirs:
            try:
                self._process = gevent.subprocess.Popen(
                    command, pass_fds=(theirs.fileno(),), env=environment
                )
            except OSError as error:
                ours.close()
                raise StoreError(f"{self!r}: cannot start the store process: {error}") from error
        self._socket = gevent.socket.socket(fileno=ours.detach())
        kind, body = self._receive()
        if kind != READY:
            self._process.wait()
            self._discard_process()
            raise StoreError(body.decode(errors="replace"))
        logger.info("%r: the store process (pid %d) is ready", self, self._process.pid)

    def _connect(self) -> None:
        """Pool mode: connect to the supervisor's store process, waiting for it to listen."""
        assert self._connect_to is not None
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while True:
            sock = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(os.fspath(self._connect_to))
            except OSError as error:
                sock.close()
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"{self!r}: cannot reach the pool's store process at "
                        f"{self._connect_to}: {error}; see the supervisor's log lines"
                    ) from error
                gevent.sleep(0.05)
                continue
            self._socket = sock
            return

    def apply(self, ops: Sequence[Op]) -> None:
        try:
            batch = encode_ops(ops)
        except (KeyError, TypeError, ValueError) as error:
            raise StoreError(
                f"{self!r}: could not apply a batch of {len(ops)} operations: "
                f"{type(error).__name__}: {error}"
            ) from error
        self._request(APPLY, batch)

    def load(self) -> Snapshot:
        return decode_snapshot(self._request(LOAD))

    def load_session(self, client_id: str) -> Snapshot:
        """The stored session of `client_id` alone (no retained messages)."""
        return decode_snapshot(
            self._request(LOAD_SESSION, client_id.encode("utf-8", "surrogatepass"))
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._socket is None:
            return
        try:
            self._request(CLOSE)
        finally:
            if self._process is not None:
                self._process.wait()
            self._discard_process()

    def _request(self, kind: int, body: bytes = b"") -> bytearray:
        with self._one_request:
            return self._request_alone(kind, body)

    def _request_alone(self, kind: int, body: bytes) -> bytearray:
        if self._closed and kind != CLOSE:
            raise StoreError(f"{self!r} is closed")
        if self._socket is None:
            logger.warning(
                "%r: %s", self, "starting a new store process" if self._connect_to is None
                else "connecting to the pool's store process again"
            )
            self._start()
        assert self._socket is not None
        try:
            send_frame(self._socket, kind, body)
        except OSError as error:
            self._receive()  # the process is gone: this raises, saying how it ended
            raise StoreError(f"{self!r}: cannot reach the store process: {error}") from error
        answer, answer_body = self._receive()
        if answer == FAILED:
            raise StoreError(answer_body.decode(errors="replace"))
        if answer != DONE:
            raise StoreError(f"{self!r}: the store process answered with frame kind {answer}")
        return answer_body

    def _receive(self) -> tuple[int, bytearray]:
        assert self._socket is not None
        try:
            return receive_frame(self._socket)
        except (EOFError, OSError) as error:
            if self._process is None:  # pool mode: the shared store process went away
                self._discard_process()
                raise StoreError(
                    f"{self!r}: the pool's store process closed the connection ({error}); "
                    "the next attempt connects again"
                ) from error
            code = self._process.wait()
            self._discard_process()
            raise StoreError(
                f"{self!r}: the store process ended unexpectedly (exit code {code}: {error}); "
                "its log lines above say why. A new one is started at the next attempt"
            ) from error

    def _discard_process(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._process = None
