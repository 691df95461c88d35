"""The store process's serving loop (store/store_process.py) over a real socket pair, with a
stand-in store, in this process: answers, failures, and upkeep between batches."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from store import PutSession, SessionMeta, StoreError
from store import store_process as store_process_module
from store.op_codec import decode_ops, encode_ops
from store.process_protocol import APPLY, CLOSE, DONE, FAILED, receive_frame, send_frame

META = SessionMeta(protocol_version=4, expiry_interval=60.0)


class UpkeepStore:
    """Records batches and upkeep; upkeep is due after every batch, and can fail."""

    def __init__(self, maintenance_failures: int = 0, apply_failures: int = 0) -> None:
        self.batches: list[list[object]] = []
        self.maintained = 0
        self.maintenance_failures_left = maintenance_failures
        self.apply_failures_left = apply_failures
        self.maintenance_due = False
        self.closed = False

    def __repr__(self) -> str:
        return "UpkeepStore()"

    def apply_encoded(self, batch: bytearray) -> None:
        if self.apply_failures_left:
            self.apply_failures_left -= 1
            raise StoreError("disk full (simulated)")
        self.batches.append(decode_ops(batch))
        self.maintenance_due = True

    def needs_maintenance(self) -> bool:
        return self.maintenance_due

    def maintain(self) -> None:
        if self.maintenance_failures_left:
            self.maintenance_failures_left -= 1
            raise StoreError("checkpoint failed (simulated)")
        self.maintained += 1
        self.maintenance_due = False

    def close(self) -> None:
        self.closed = True


class Served:
    def __init__(self, store: UpkeepStore) -> None:
        self.store = store
        self.broker_end, server_end = socket.socketpair()
        self.thread = threading.Thread(
            target=store_process_module._Server(store, server_end).serve,  # type: ignore[arg-type]
            daemon=True,
        )
        self.thread.start()

    def apply(self, client_id: str) -> tuple[int, bytes]:
        send_frame(self.broker_end, APPLY, encode_ops([PutSession(client_id, META)]))
        kind, body = receive_frame(self.broker_end)
        return kind, bytes(body)


@pytest.fixture
def served() -> Iterator[Served]:
    running = Served(UpkeepStore(maintenance_failures=1, apply_failures=1))
    yield running
    running.broker_end.close()
    running.thread.join(timeout=5)


def test_a_failed_batch_is_answered_failed_and_the_next_one_applies(served: Served) -> None:
    assert served.apply("a") == (FAILED, b"disk full (simulated)")
    assert served.apply("a") == (DONE, b"")
    assert served.store.batches == [[PutSession("a", META)]]


def test_upkeep_runs_between_batches_and_a_failure_pauses_it(
    served: Served, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(store_process_module, "MAINTENANCE_RETRY_DELAY", 0.2)
    served.store.apply_failures_left = 0
    with caplog.at_level(logging.ERROR, logger="store.store_process"):
        assert served.apply("a")[0] == DONE  # upkeep due: it fails
        assert served.apply("b")[0] == DONE  # within the pause: not tried
        time.sleep(0.1)
        assert served.store.maintained == 0
        time.sleep(0.15)
        assert served.apply("c")[0] == DONE  # after the pause: tried again, succeeds
        assert served.apply("d")[0] == DONE
    time.sleep(0.05)
    assert served.store.maintained == 2
    assert len(served.store.batches) == 4  # batches went on meanwhile
    [failure] = [r.getMessage() for r in caplog.records]
    assert "UpkeepStore()" in failure and "checkpoint failed" in failure


def test_close_closes_the_store_and_ends_the_loop(served: Served) -> None:
    send_frame(served.broker_end, CLOSE)
    assert receive_frame(served.broker_end) == (DONE, bytearray())
    served.thread.join(timeout=5)
    assert not served.thread.is_alive() and served.store.closed


def test_the_loop_ends_when_the_broker_closes_its_end(served: Served) -> None:
    served.broker_end.close()
    served.thread.join(timeout=5)
    assert not served.thread.is_alive()
