"""The pool's operations surface in-process (pool/ops.py): two workers' `PoolOps`
joined by a loopback link that carries every frame through the real codec, on one gevent hub.

Gathering the other worker's rows, leaving out a worker that is silent, unlinked or goes
down, and bans replicated both ways with only worker 0 keeping the file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gevent
import orjson
import pytest

from actors.admission import Admission
from actors.config import FlappingConfig
from core.bans import Ban, BanKind
from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.ops import PoolOps
from tests.unit.test_ops_units import client


class Pool:
    """Two workers' PoolOps; `linked` says which links are up."""

    def __init__(self, bans_file: Path | None = None) -> None:
        self.linked = {0: True, 1: True}
        self.ops = [PoolOps(w, 2, self._sender(w), self._broadcaster(w)) for w in (0, 1)]
        self.admissions = [
            Admission(FlappingConfig(), bans_file),
            Admission(FlappingConfig(), None),
        ]
        for ops, admission in zip(self.ops, self.admissions, strict=True):
            ops.admission = admission
            admission.replica = ops

    def _sender(self, sender: int) -> Any:
        def send(worker: int, frame: Frame) -> bool:
            if not self.linked[worker]:
                return False
            (decoded,) = FrameDecoder().feed(encode_frame(frame))  # as a link carries it
            gevent.spawn(self.ops[worker].frame_received, sender, decoded)
            return True

        return send

    def _broadcaster(self, sender: int) -> Any:
        send = self._sender(sender)
        return lambda frame: send(1 - sender, frame)


def settle() -> None:
    gevent.sleep(0.01)


def test_gather_returns_the_other_workers_rows_for_the_arguments() -> None:
    pool = Pool()
    pool.ops[1].answer = lambda op, args: [{"op": op, "worker": 1, **args}]
    rows, missing = pool.ops[0].gather("clients", {"clientid": "abc"})
    assert rows == {1: [{"op": "clients", "worker": 1, "clientid": "abc"}]}
    assert missing == []


def test_a_silent_worker_is_left_out_after_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    pool = Pool()

    def slow(_op: str, _args: dict[str, Any]) -> list[dict[str, Any]]:
        gevent.sleep(5)
        return []

    pool.ops[1].answer = slow
    started = time.monotonic()
    rows, missing = pool.ops[0].gather("sessions", {}, timeout=0.2)
    assert (rows, missing) == ({}, [1])
    assert time.monotonic() - started < 1
    assert "workers [1] gave no answer to 'sessions'" in caplog.text


def test_an_unlinked_worker_is_left_out_at_once() -> None:
    pool = Pool()
    pool.linked[1] = False
    started = time.monotonic()
    assert pool.ops[0].gather("clients", {}, timeout=5) == ({}, [1])
    assert time.monotonic() - started < 1


def test_a_worker_going_down_ends_the_wait() -> None:
    pool = Pool()
    pool.ops[1].answer = lambda _op, _args: gevent.sleep(5) or []
    gevent.spawn_later(0.05, pool.ops[0].peer_down, 1)
    started = time.monotonic()
    assert pool.ops[0].gather("clients", {}, timeout=5) == ({}, [1])
    assert time.monotonic() - started < 1


def test_a_failing_answer_is_an_empty_part_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    pool = Pool()

    def broken(_op: str, _args: dict[str, Any]) -> list[dict[str, Any]]:
        raise RuntimeError("boom")

    pool.ops[1].answer = broken
    assert pool.ops[0].gather("clients", {}) == ({1: []}, [])
    assert "answering 'clients' for worker 0 failed" in caplog.text


def test_a_worker_with_no_answer_yet_sends_an_empty_part_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = Pool()  # worker 1's answer is not set: it is still starting
    assert pool.ops[0].gather("clients", {}) == ({1: []}, [])
    assert "pool: worker 0 asked 'clients' before this worker could answer" in caplog.text


def test_bans_hold_on_every_worker_and_only_worker_0_writes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bans.json"
    pool = Pool(path)
    now = time.time()
    # A ban made on worker 1 (flapping detection there, say) reaches worker 0 and its file.
    pool.admissions[1].add(Ban(BanKind.CLIENT_ID, "loop", now + 60, "flapping", now))
    settle()
    assert pool.admissions[0].check(client("loop")) is not None
    assert [b["value"] for b in orjson.loads(path.read_bytes())] == ["loop"]
    # One made on worker 0 (the admin API) reaches worker 1; lifted there, lifted here.
    pool.admissions[0].add(Ban(BanKind.PEER, "10.0.0.0/8", None, "", now))
    settle()
    assert pool.admissions[1].table.get(BanKind.PEER, "10.0.0.0/8") is not None
    assert pool.admissions[0].remove(BanKind.CLIENT_ID, "loop")
    settle()
    assert pool.admissions[1].check(client("loop")) is None
    assert [b["value"] for b in orjson.loads(path.read_bytes())] == ["10.0.0.0/8"]


def test_a_worker_whose_link_comes_up_gets_the_bans_it_lacks(tmp_path: Path) -> None:
    pool = Pool(tmp_path / "bans.json")
    pool.linked[1] = False  # worker 1 is down meanwhile: it misses the BanSet
    pool.admissions[0].add(Ban(BanKind.USERNAME, "mallory", None, "", time.time()))
    pool.linked[1] = True
    pool.ops[0].peer_up(1)
    settle()
    assert pool.admissions[1].table.get(BanKind.USERNAME, "mallory") is not None
    assert len(pool.admissions[0].table) == 1  # worker 1's snapshot added nothing new
