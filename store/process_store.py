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

If the store process dies (killed, out of memory), the call in progress raises
`StoreUnavailableError` and the loss is logged once ("... ended unexpectedly ...; starting a new
one"); the next call starts a new process, which reopens the file, and logs "the store
process is back after 0.4 s". A transaction is atomic and ops are idempotent, so the
writer's retry of the batch is exact, and it retries `StoreUnavailableError` quietly.

In a pool (docs/pool.md) the supervisor runs one store process for every worker, and
restarts it when it dies: `ProcessStore(path, connect=socket_path)` connects to it instead
of starting one. A lost connection is logged once ("... closed the connection ...;
connecting to it again"); each later call tries to connect once and raises
`StoreUnavailableError` while nobody listens, so the writer's retries (and with them the
pool-wide "store failing" state, docs/overload.md) last as long as the store is away and
end by themselves when it is back. `load_session` fetches one client id's session for a
worker that takes that session over, waiting at most a given time for the store to be back.
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

from store.base import Op, Snapshot, StoreError, StoreUnavailableError
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
CONNECT_TIMEOUT = 10.0  # seconds a starting pool worker keeps trying to reach the pool's store
RECONNECT_INTERVAL = 0.05  # seconds between a waiting `load_session`'s attempts


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
        self._process: gevent.subprocess.Popen[bytes] | None = None
        self._socket: gevent.socket.socket | None = None
        self._closed = False
        self._lost_at: float | None = None  # when the store process was lost, until it is back
        self._start(CONNECT_TIMEOUT)

    def __repr__(self) -> str:
        return f"ProcessStore({str(self.path)!r})"

    @property
    def process_id(self) -> int | None:
        """The store process's pid; None while there is none (after a death, until the next
        call starts one)."""
        return None if self._process is None else self._process.pid

    def _start(self, wait: float) -> None:
        """Connect (pool mode, trying for `wait` seconds) or start a store process."""
        if self._connect_to is not None:
            self._connect(wait)
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
        try:
            kind, body = receive_frame(self._socket)
        except (EOFError, OSError) as error:
            code = self._process.wait()
            self._discard_process()
            raise StoreError(
                f"{self!r}: the store process ended before it was ready (exit code {code}: "
                f"{error}); its log lines above say why"
            ) from None
        if kind != READY:
            self._process.wait()
            self._discard_process()
            raise StoreError(body.decode(errors="replace"))
        logger.info("%r: the store process (pid %d) is ready", self, self._process.pid)

    def _connect(self, wait: float) -> None:
        """Pool mode: connect to the supervisor's store process, trying for `wait` seconds.
        While it is lost (and being restarted) that is StoreUnavailableError, said once before."""
        assert self._connect_to is not None
        deadline = time.monotonic() + wait
        while True:
            sock = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(os.fspath(self._connect_to))
            except OSError as error:
                sock.close()
                if time.monotonic() >= deadline:
                    if self._lost_at is not None:
                        raise StoreUnavailableError(
                            f"{self!r}: the pool's store process is not back yet "
                            f"({error.strerror or error})"
                        ) from None
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

    def load_session(self, client_id: str, wait: float | None = None) -> Snapshot:
        """The stored session of `client_id` alone (no retained messages). With `wait`: the
        store process may be away (restarting) for up to `wait` seconds, and the whole call
        takes at most that long; StoreUnavailableError past it."""
        body = client_id.encode("utf-8", "surrogatepass")
        if wait is None:
            return decode_snapshot(self._request(LOAD_SESSION, body))
        deadline = time.monotonic() + wait
        timeout = gevent.Timeout(wait)
        timeout.start()
        try:
            while True:
                try:
                    return decode_snapshot(self._request(LOAD_SESSION, body))
                except StoreUnavailableError:
                    if time.monotonic() + RECONNECT_INTERVAL >= deadline:
                        raise
                gevent.sleep(RECONNECT_INTERVAL)
        except gevent.Timeout as expired:
            if expired is not timeout:
                raise
            raise StoreUnavailableError(
                f"{self!r}: no answer from the store process within {wait:.1f} s"
            ) from None
        finally:
            timeout.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._socket is None:
            return
        try:
            self._request(CLOSE)
        except StoreUnavailableError:
            pass  # gone already: the writer committed everything before, nothing is lost
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
            self._start(0.0)
            if self._lost_at is not None:
                logger.info(
                    "%r: the store process is back after %.1f s",
                    self,
                    time.monotonic() - self._lost_at,
                )
                self._lost_at = None
        assert self._socket is not None
        try:
            try:
                send_frame(self._socket, kind, body)
            except OSError as error:
                raise self._lost(error) from None
            answer, answer_body = self._receive()
        except gevent.Timeout:
            # The answer may still come: it must not be taken for the next request's.
            self._discard_process()
            raise
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
            raise self._lost(error) from None

    def _lost(self, error: Exception) -> StoreUnavailableError:
        """The store process went away: forget it, say so once, and the error to raise."""
        if self._process is None:  # pool mode: the supervisor restarts it
            how = f"the pool's store process closed the connection ({error})"
            then = "connecting to it again"
        else:
            code = self._process.wait()
            how = f"the store process ended unexpectedly (exit code {code}: {error})"
            then = "starting a new one (its log lines above say why it ended)"
        self._discard_process()
        if self._lost_at is None and not self._closed:
            self._lost_at = time.monotonic()
            logger.warning("%r: %s; %s", self, how, then)
        return StoreUnavailableError(f"{self!r}: {how}")

    def _discard_process(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._process = None
