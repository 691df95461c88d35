"""StoreWriter: group commit, callbacks after commit in order, commits that yield, retries,
flush, crash safety."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import gevent
import pytest

from core.message import Message
from store import (
    MemoryStore,
    Op,
    PutMessage,
    PutSession,
    SessionMeta,
    SqliteStore,
    StoredDelivery,
    StoreError,
    StoreUnavailableError,
)
from store import writer as writer_module
from store.writer import StoreWriter

META = SessionMeta(protocol_version=4, expiry_interval=3600.0)


def _delivery(number: int) -> StoredDelivery:
    return StoredDelivery(
        message=Message(topic=f"t/{number}", payload=b"p%d" % number, qos=1), qos=1, retain=False
    )


class RecordingStore(MemoryStore):
    """A MemoryStore that records each transaction, can fail, can be slow: `apply_seconds`
    blocks the thread, `yield_seconds` yields to the loop (as ProcessStore waits)."""

    def __init__(
        self, failures: int = 0, apply_seconds: float = 0.0, yield_seconds: float = 0.0
    ) -> None:
        super().__init__()
        self.batches: list[list[Op]] = []
        self.failures_left = failures
        self.apply_seconds = apply_seconds
        self.yield_seconds = yield_seconds
        self.spans: list[tuple[float, float]] = []  # (start, end) of each apply, monotonic
        self.closed = False

    def __repr__(self) -> str:
        return "RecordingStore()"

    def apply(self, ops: Sequence[Op]) -> None:
        started = time.monotonic()
        time.sleep(self.apply_seconds)
        gevent.sleep(self.yield_seconds)
        self.spans.append((started, time.monotonic()))
        if self.failures_left:
            self.failures_left -= 1
            raise StoreError("disk full (simulated)")
        super().apply(ops)
        self.batches.append(list(ops))

    def close(self) -> None:
        self.closed = True
        super().close()


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "FIRST_RETRY_DELAY", 0.001)


@pytest.mark.parametrize("max_delay", [0.0, 0.005])
def test_submissions_from_many_greenlets_share_few_transactions(max_delay: float) -> None:
    store = RecordingStore()
    writer = StoreWriter(store, max_delay=max_delay)
    committed: list[tuple[int, int]] = []
    submitted: list[tuple[int, int]] = []

    def publisher(client: int) -> None:
        writer.submit([PutSession(f"c{client}", META)])
        for seq in range(50):
            submitted.append((client, seq))
            writer.submit(
                [PutMessage(f"c{client}", seq, _delivery(seq))],
                lambda key=(client, seq): committed.append(key),
            )
            if seq % 10 == 0:
                gevent.sleep(0)

    gevent.joinall([gevent.spawn(publisher, client) for client in range(20)])
    writer.flush(timeout=5)
    assert committed == submitted  # every callback, in submission order
    assert writer.committed_ops == 20 * 51
    assert writer.transactions == len(store.batches) <= 20
    sessions = store.load().sessions
    assert all(len(sessions[f"c{client}"].messages) == 50 for client in range(20))
    writer.close()


def test_callbacks_run_only_after_their_ops_are_committed() -> None:
    store = RecordingStore()
    writer = StoreWriter(store)
    seen_in_store: list[bool] = []
    for seq in range(30):
        writer.submit(
            [PutSession("c", META), PutMessage("c", seq, _delivery(seq))],
            lambda seq=seq: seen_in_store.append(
                seq in {op.seq for b in store.batches for op in b if isinstance(op, PutMessage)}
            ),
        )
    assert seen_in_store == []  # submit never runs a callback itself
    writer.flush(timeout=5)
    assert seen_in_store == [True] * 30
    writer.close()


def test_batches_hold_whole_submissions_up_to_max_batch_ops() -> None:
    store = RecordingStore()
    writer = StoreWriter(store, max_batch_ops=10, max_delay=0.01)
    for seq in range(20):
        writer.submit([PutSession("c", META), PutMessage("c", seq, _delivery(seq))])
    writer.submit([PutSession(f"big{n}", META) for n in range(25)])  # alone over the limit
    writer.flush(timeout=5)
    sizes = [len(batch) for batch in store.batches]
    assert sum(sizes) == 20 * 2 + 25
    assert 25 in sizes
    assert all(size <= 10 for size in sizes if size != 25)
    assert all(size % 2 == 0 for size in sizes if size != 25)  # submissions are never split
    writer.close()


def _loop_ticks_during_commit(store: RecordingStore) -> tuple[list[float], float]:
    """Tick every 10 ms while two submissions are committed; return the ticks and how long
    the submit calls took."""
    writer = StoreWriter(store, max_delay=0)
    ticks: list[float] = []

    def ticker() -> None:
        for _ in range(10):
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    ticking = gevent.spawn(ticker)
    gevent.sleep(0)
    started = time.monotonic()
    writer.submit([PutSession("c", META)])
    writer.submit([PutSession("d", META)])
    submit_seconds = time.monotonic() - started
    ticking.join()
    writer.close()
    return ticks, submit_seconds


def test_a_commit_that_waits_for_its_store_lets_the_loop_run() -> None:
    store = RecordingStore(yield_seconds=0.2)
    ticks, submit_seconds = _loop_ticks_during_commit(store)
    assert submit_seconds < 0.05  # submit never waits for the store
    assert len(ticks) == 10
    # The loop ran during the commit: a tick fell inside the store's apply (whatever the
    # machine's load stretches the ticks to).
    ((started, ended),) = store.spans
    assert any(started < tick < ended for tick in ticks), (started, ended, ticks)
    assert store.batches == [[PutSession("c", META), PutSession("d", META)]]


def test_submissions_during_a_commit_form_the_next_batch() -> None:
    store = RecordingStore(yield_seconds=0.05)
    writer = StoreWriter(store)
    writer.submit([PutSession("a", META)])
    gevent.sleep(0.01)  # the writer is now waiting for the store
    writer.submit([PutSession("b", META)])
    writer.submit([PutSession("c", META)])
    writer.flush(timeout=5)
    assert store.batches == [
        [PutSession("a", META)],
        [PutSession("b", META), PutSession("c", META)],
    ]
    writer.close()


def test_a_failed_commit_is_logged_and_retried_before_any_callback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RecordingStore(failures=3)
    writer = StoreWriter(store)
    done: list[str] = []
    with caplog.at_level(logging.ERROR, logger="store.writer"):
        writer.submit([PutSession("c", META)], lambda: done.append("c"))
        writer.flush(timeout=5)
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 3
    assert all("RecordingStore()" in line and "disk full" in line for line in failures)
    assert done == ["c"]
    assert store.batches == [[PutSession("c", META)]]
    writer.close()


class AwayStore(RecordingStore):
    """A store whose process is away until `back_at` (monotonic time), as ProcessStore is
    while its store process restarts."""

    def __init__(self, away_for: float) -> None:
        super().__init__()
        self.back_at = time.monotonic() + away_for
        self.attempts = 0

    def apply(self, ops: Sequence[Op]) -> None:
        self.attempts += 1
        if time.monotonic() < self.back_at:
            raise StoreUnavailableError("the store process is not back yet (simulated)")
        super().apply(ops)


def test_a_store_that_is_away_is_retried_quietly_and_soon_after_it_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = AwayStore(away_for=1.2)
    writer = StoreWriter(store)
    done: list[float] = []
    with caplog.at_level(logging.INFO, logger="store.writer"):
        writer.submit([PutSession("c", META)], lambda: done.append(time.monotonic()))
        gevent.sleep(0.3)
        assert writer.failing and not done
        writer.flush(timeout=5)
    # The retries come at least every MAX_UNAVAILABLE_RETRY_DELAY, not every 5 s.
    assert done[0] - store.back_at < writer_module.MAX_UNAVAILABLE_RETRY_DELAY + 0.1
    assert not writer.failing
    assert store.batches == [[PutSession("c", META)]]
    lines = [r.getMessage() for r in caplog.records]
    assert not [line for line in lines if "commit of" in line], lines  # the store said it
    assert len([line for line in lines if "commits succeed again" in line]) == 1
    assert store.attempts > 3
    writer.close()


def test_flush_times_out_while_the_store_keeps_failing() -> None:
    store = RecordingStore(failures=10**9)
    writer = StoreWriter(store)
    done: list[bool] = []
    writer.submit([PutSession("c", META)], lambda: done.append(True))
    with pytest.raises(StoreError, match=r"not committed within 0\.1 s"):
        writer.flush(timeout=0.1)
    assert done == []
    store.failures_left = 0
    writer.flush(timeout=5)
    assert done == [True]
    writer.close()


def test_failing_is_set_while_commits_fail_and_cleared_by_the_next_success(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RecordingStore(failures=10**9)
    writer = StoreWriter(store)
    assert not writer.failing
    writer.submit([PutSession("c", META)])
    with pytest.raises(StoreError):
        writer.flush(timeout=0.05)
    assert writer.failing
    store.failures_left = 0
    with caplog.at_level(logging.WARNING, logger="store.writer"):
        writer.flush(timeout=5)
    assert not writer.failing
    assert any("commits succeed again" in r.getMessage() for r in caplog.records)
    writer.close()


def test_a_failing_callback_is_logged_and_the_next_ones_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = StoreWriter(RecordingStore())
    done: list[int] = []

    def broken() -> None:
        raise RuntimeError("callback bug")

    writer.submit([PutSession("a", META)], broken)
    writer.submit([PutSession("b", META)], lambda: done.append(2))
    with caplog.at_level(logging.ERROR, logger="store.writer"):
        writer.flush(timeout=5)
    assert done == [2]
    assert any("callback failed" in record.getMessage() for record in caplog.records)
    writer.close()


def test_lazy_submissions_gather_until_lazy_delay() -> None:
    store = RecordingStore()
    writer = StoreWriter(store, lazy_delay=0.1)
    started = time.monotonic()
    writer.submit([PutSession("a", META)], lazy=True)
    gevent.sleep(0.02)
    writer.submit([PutSession("b", META)], lazy=True)
    gevent.sleep(0.05)
    assert store.batches == []  # nobody waits: they may gather
    while not store.batches:
        gevent.sleep(0.005)
    assert time.monotonic() - started >= 0.1
    assert store.batches == [[PutSession("a", META), PutSession("b", META)]]
    writer.close()


def test_a_prompt_submission_commits_the_lazy_ones_with_it_at_once() -> None:
    store = RecordingStore()
    writer = StoreWriter(store, lazy_delay=10.0)
    done: list[bool] = []
    writer.submit([PutSession("a", META)], lazy=True)
    gevent.sleep(0.01)
    writer.submit([PutSession("b", META)], lambda: done.append(True))
    started = time.monotonic()
    while not done:
        gevent.sleep(0.001)
    assert time.monotonic() - started < 1.0
    assert store.batches == [[PutSession("a", META), PutSession("b", META)]]
    writer.close()


def test_close_commits_what_was_submitted_and_closes_the_store() -> None:
    store = RecordingStore()
    writer = StoreWriter(store, max_delay=10.0, lazy_delay=10.0)
    writer.submit([PutSession("c", META)], lazy=True)
    writer.close()
    assert store.batches == [[PutSession("c", META)]]
    assert store.closed
    with pytest.raises(StoreError, match="writer is closed"):
        writer.submit([PutSession("d", META)])


# A child broker stand-in: commits PutMessage batches through the writer and reports each
# committed seq on stdout from the commit callback, as the broker would send a PUBACK.
CHILD = """
import os, sys
from pathlib import Path
import gevent
from core.message import Message
from store import PutMessage, PutSession, SessionMeta, SqliteStore, StoredDelivery
from store.writer import StoreWriter

writer = StoreWriter(SqliteStore(Path(sys.argv[1])))
writer.submit([PutSession("sub", SessionMeta(protocol_version=4, expiry_interval=60.0))])

def acked(seq):
    os.write(1, b"%d\\n" % seq)

for seq in range(1_000_000):
    message = Message(topic="t", payload=b"x" * 100, qos=1)
    entry = StoredDelivery(message=message, qos=1, retain=False)
    writer.submit([PutMessage("sub", seq, entry)], lambda seq=seq: acked(seq))
    if seq % 50 == 0:
        gevent.sleep(0.001)
"""


def test_every_acknowledged_message_survives_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "crash.sqlite3"
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE,
    )
    acknowledged: list[int] = []
    assert child.stdout is not None
    try:
        while len(acknowledged) < 3000:
            line = child.stdout.readline()
            assert line, "the child ended before acknowledging enough messages"
            acknowledged.append(int(line))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    store = SqliteStore(path)
    stored = {seq for seq, _ in store.load().sessions["sub"].messages}
    store.close()
    assert set(acknowledged) <= stored
    assert acknowledged == sorted(acknowledged)
