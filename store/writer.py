"""`StoreWriter`: group commit of op batches on gevent, with callbacks after each commit.

Theory of operation. `submit(ops, on_commit)` only appends to a deque and wakes the writer
greenlet, so it never blocks. The writer runs when the gevent loop next schedules it (so
every submission made in the same loop iteration joins the batch), waits until the oldest
pending submission is `max_delay` old, or `lazy_delay` when every pending submission is
lazy (see `submit`), or until `max_batch_ops` ops are pending or `flush()` is called, takes
whole submissions up to `max_batch_ops` ops, and applies them as ONE transaction. After
the commit the callbacks of the batch run in the writer greenlet, in submission order;
this is where the broker sends PUBACK/PUBREC for messages it has made durable
(write-ahead). Submissions that arrive meanwhile form the next batch.

The writer calls `Store.apply` from its greenlet. The SQLite store runs in a process of its
own (`store.process_store`): `apply` sends the batch and yields to the loop until the answer
comes, so clients are served meanwhile and the next batch gathers; the disk is never waited
for on the loop. (gevent's thread pool is not used: a pool thread must win the GIL from the
busy loop twice per task; measured: with an empty task per commit in the pool, QoS 1
delivery to a persistent subscriber fell by a fifth.)

A failed commit is logged (naming the store and the failure) and retried with exponential
backoff, the batch unchanged, until it succeeds; no callback of the batch runs before that.
Meanwhile `failing` is True, so the broker refuses new work that needs the store (a full
disk, an I/O error: docs/overload.md); the first commit that succeeds again clears it and
is logged. While the store process is away (`StoreUnavailableError`, which the store logs
once) the attempts are not logged and come at least every MAX_UNAVAILABLE_RETRY_DELAY, so
the batch is committed soon after the store is back. `on_failing` hears each change of
`failing` (a pool worker tells the others).
Callbacks must not block (tell an actor, write to a socket buffer); one that raises is
logged and skipped. The store belongs to the writer once it is started: nobody else may call
it, and `close()` closes it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

import gevent
import gevent.event

from core.latency import LatencyHistogram
from store.base import Op, Store, StoreError, StoreUnavailableError

logger = logging.getLogger(__name__)

Callback = Callable[[], object]  # its result is ignored

FIRST_RETRY_DELAY = 0.01  # seconds; doubles after each failed commit
MAX_RETRY_DELAY = 5.0
# While the store process is away (StoreUnavailableError: killed, being restarted) an
# attempt costs a connect, and the sooner one succeeds the sooner acknowledgements flow again.
MAX_UNAVAILABLE_RETRY_DELAY = 0.1
# Seconds lazy submissions may gather before they are committed (see `submit`): a
# subscriber's QoS 1 acknowledgements, say. Committing each small batch of them at once
# cost the loop a commit per round trip to the subscriber.
LAZY_DELAY = 0.05


class StoreWriter:
    """Applies submitted op batches to `store` with group commit (see module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        max_batch_ops: int = 5000,
        max_delay: float = 0.0,
        lazy_delay: float = LAZY_DELAY,
    ) -> None:
        self._store = store
        self._max_batch_ops = max_batch_ops
        self._max_delay = max_delay
        self._lazy_delay = lazy_delay
        self._prompt = 0  # pending submissions that are not lazy
        self._flush_requested = False
        self._pending: deque[tuple[Sequence[Op], Callback | None, bool]] = deque()
        self._pending_ops = 0
        self._oldest_pending_at = 0.0
        self._has_work = gevent.event.Event()
        self._commit_now = gevent.event.Event()
        self._closing = False
        self.failing = False  # the last commit attempt failed
        # Told when `failing` changes (a pool tells the other workers: docs/pool.md).
        self.on_failing: Callable[[bool], object] | None = None
        self.transactions = 0  # commits made, for statistics and tests
        self.committed_ops = 0
        self.commit_latency = LatencyHistogram()  # seconds per successful commit (metrics)
        self._greenlet = gevent.spawn(self._run)

    def submit(
        self, ops: Sequence[Op], on_commit: Callback | None = None, *, lazy: bool = False
    ) -> None:
        """Queue `ops` for the next commit; `on_commit` runs in the gevent loop after it.

        `lazy` says that nothing waits for this commit (no acknowledgement hangs on it, and
        losing the ops in a crash costs only duplicates): they may gather for `lazy_delay`,
        unless a prompt submission or a full batch commits them sooner.
        """
        if self._closing:
            raise StoreError(f"{self._store!r}: the writer is closed; nothing more can be stored")
        if not self._pending:
            self._oldest_pending_at = time.monotonic()
        self._pending.append((ops, on_commit, lazy))
        self._pending_ops += len(ops)
        if not lazy:
            self._prompt += 1
            if self._prompt == 1:
                self._commit_now.set()  # the writer may be gathering lazy ops: not any more
        if self._pending_ops >= self._max_batch_ops:
            self._commit_now.set()
        self._has_work.set()

    def flush(self, timeout: float | None = None) -> None:
        """Block this greenlet until everything submitted so far is committed.

        Raises StoreError if that takes longer than `timeout` seconds. Never call it from a
        commit callback (the writer would wait for itself).
        """
        done = gevent.event.Event()
        self.submit((), done.set)
        self._flush_requested = True  # no max_delay wait: the caller is waiting
        self._commit_now.set()
        if not done.wait(timeout):
            raise StoreError(
                f"{self._store!r}: {self._pending_ops} submitted operations were not committed "
                f"within {timeout} s (see the errors logged before)"
            )

    def close(self, timeout: float | None = None) -> None:
        """Commit everything submitted, stop the writer and close the store."""
        if self._closing:
            return
        self.flush(timeout)
        self._closing = True
        self._has_work.set()
        self._greenlet.join()
        self._store.close()
        logger.info(
            "store %r closed after %d operations in %d transactions",
            self._store,
            self.committed_ops,
            self.transactions,
        )

    def _run(self) -> None:
        while True:
            self._has_work.wait()
            if not self._pending:
                if self._closing:
                    return
                self._has_work.clear()
                continue
            self._wait_until_due()
            batch = self._take_batch()
            ops = [op for submitted_ops, _on_commit, _lazy in batch for op in submitted_ops]
            if ops:
                self._commit(ops)
            for _ops, on_commit, _lazy in batch:
                if on_commit is not None:
                    self._run_callback(on_commit)

    def _wait_until_due(self) -> None:
        """Let the pending submissions gather until they are due: at once on flush or when
        they hold max_batch_ops ops; max_delay after the oldest when a prompt submission is
        pending; lazy_delay when all are lazy."""
        while not self._flush_requested and self._pending_ops < self._max_batch_ops:
            delay = self._max_delay if self._prompt else self._lazy_delay
            remaining = delay - (time.monotonic() - self._oldest_pending_at)
            if remaining <= 0:
                return
            self._commit_now.clear()
            self._commit_now.wait(remaining)

    def _take_batch(self) -> list[tuple[Sequence[Op], Callback | None, bool]]:
        """Pop whole submissions, at least one, up to max_batch_ops operations."""
        batch = [self._pending.popleft()]
        taken_ops = len(batch[0][0])
        while self._pending and taken_ops + len(self._pending[0][0]) <= self._max_batch_ops:
            batch.append(self._pending.popleft())
            taken_ops += len(batch[-1][0])
        self._pending_ops -= taken_ops
        self._prompt -= sum(1 for _ops, _on_commit, lazy in batch if not lazy)
        if self._pending:
            self._oldest_pending_at = 0.0  # the rest has waited long enough: commit it next
        else:
            self._flush_requested = False
            self._has_work.clear()
        return batch

    def _commit(self, ops: list[Op]) -> None:
        """Apply `ops` in one transaction, retrying until it succeeds."""
        delay = FIRST_RETRY_DELAY
        attempt = 1
        while True:
            started = time.monotonic()
            try:
                self._store.apply(ops)
            except StoreUnavailableError:
                self._set_failing(True)
                gevent.sleep(min(delay, MAX_UNAVAILABLE_RETRY_DELAY))
                delay = min(delay * 2, MAX_RETRY_DELAY)
                attempt += 1
                continue
            except Exception as error:  # StoreError, or a bug: either way, retry and say so
                self._set_failing(True)
                logger.error(
                    "store %r: commit of %d operations failed (attempt %d), retrying in %.2f s: %s",
                    self._store,
                    len(ops),
                    attempt,
                    delay,
                    error,
                )
                gevent.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                attempt += 1
                continue
            self.commit_latency.observe(time.monotonic() - started)
            self.transactions += 1
            self.committed_ops += len(ops)
            if self.failing:
                self._set_failing(False)
                logger.warning(
                    "store %r: commits succeed again after %d failed attempts: QoS 1/2 "
                    "publishes to persistent sessions are accepted again",
                    self._store,
                    attempt - 1,
                )
            return

    def _set_failing(self, failing: bool) -> None:
        if failing == self.failing:
            return
        self.failing = failing
        if self.on_failing is not None:
            self._run_callback(lambda: self.on_failing and self.on_failing(failing))

    def _run_callback(self, on_commit: Callback) -> None:
        try:
            on_commit()
        except Exception:
            logger.exception("store %r: a commit callback failed; it was skipped", self._store)
