"""The operations surface across nodes in-process (cluster/ops.py): node a's `ClusterOps`
and the other nodes' workers joined by a loopback that carries every frame through the real
codec, on one gevent hub; and the pure parts: the parts by node and the nodes left out,
`$SYS/cluster/...` from gathered counts, and the line `ctl` prints for what was left out.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
import pytest

from actors.sys_topics import cluster_values
from admin.ctl import left_out
from cluster.ops import ClusterOps, by_node
from pool.frames.codec import Frame, FrameDecoder, encode_frame

NAMES = {1: "b.0", 2: "b.1", 3: "c.0"}  # node a's peer numbers for the other nodes' workers


class Cluster:
    """Node a's worker 0 (`asker`) and the workers of nodes b and c (`workers`, each with
    a's number for it); `linked` says which links are up."""

    def __init__(self) -> None:
        self.linked = dict.fromkeys(NAMES, True)
        self.asker = ClusterOps(self._to_worker, self._peers, lambda: dict(NAMES))
        self.workers = {
            number: ClusterOps(self._to_asker(number), lambda: {0}, lambda: {0: "a.0"})
            for number in NAMES
        }
        for number, ops in self.workers.items():
            ops.answer = lambda op, args, name=NAMES[number]: [{"op": op, "at": name, **args}]

    def _peers(self) -> set[int]:
        return {number for number, up in self.linked.items() if up}

    def _to_worker(self, worker: int, frame: Frame) -> bool:
        if not self.linked[worker]:
            return False
        (decoded,) = FrameDecoder().feed(encode_frame(frame))  # as NATS carries it
        gevent.spawn(self.workers[worker].frame_received, 0, decoded)
        return True

    def _to_asker(self, number: int) -> Any:
        def send(_worker: int, frame: Frame) -> bool:
            (decoded,) = FrameDecoder().feed(encode_frame(frame))
            gevent.spawn(self.asker.frame_received, number, decoded)
            return True

        return send


def test_gather_asks_every_worker_of_every_node_and_returns_the_parts_by_node() -> None:
    cluster = Cluster()
    parts, missing = cluster.asker.gather("clients", {"clientid": "x"})
    assert parts == {
        "b": [
            [{"op": "clients", "at": "b.0", "clientid": "x"}],
            [{"op": "clients", "at": "b.1", "clientid": "x"}],
        ],
        "c": [[{"op": "clients", "at": "c.0", "clientid": "x"}]],
    }
    assert missing == []


def test_a_node_with_a_silent_worker_is_named_missing_after_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster()
    cluster.workers[2].answer = lambda _op, _args: gevent.sleep(5) or []
    started = time.monotonic()
    parts, missing = cluster.asker.gather("sessions", {}, timeout=0.2)
    assert time.monotonic() - started < 1
    assert missing == ["b"]
    assert parts["b"] == [[{"op": "sessions", "at": "b.0"}]]  # what answered is kept
    assert set(parts) == {"b", "c"}
    assert "nodes ['b'] gave no full answer to 'sessions'" in caplog.text


def test_a_node_heard_of_but_not_linked_is_named_missing_at_once() -> None:
    cluster = Cluster()
    cluster.linked[3] = False  # c was killed, and taken for gone
    started = time.monotonic()
    parts, missing = cluster.asker.gather("clients", {}, timeout=5)
    assert time.monotonic() - started < 1
    assert (sorted(parts), missing) == (["b"], ["c"])


def test_a_worker_going_down_ends_the_wait() -> None:
    cluster = Cluster()
    cluster.workers[3].answer = lambda _op, _args: gevent.sleep(5) or []
    gevent.spawn_later(0.05, cluster.asker.peer_down, 3)
    started = time.monotonic()
    _parts, missing = cluster.asker.gather("clients", {}, timeout=5)
    assert time.monotonic() - started < 1
    assert missing == ["c"]


def test_another_node_may_not_ask_for_a_reload(caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster()
    asked: list[str] = []
    cluster.workers[3].answer = lambda op, _args: asked.append(op) or [{"done": True}]
    parts, missing = cluster.asker.gather("reload", {})
    assert (parts["c"], missing, asked) == ([[]], [], [])
    assert "asked 'reload', which another node may not ask" in caplog.text


def test_by_node_keeps_the_answered_and_names_every_node_with_a_workerleft_out() -> None:
    rows = {1: [{"r": 1}], 3: [{"r": 3}]}
    linked = {1, 2, 3}
    assert by_node(rows, NAMES, linked, {1, 3}) == (
        {"b": [[{"r": 1}]], "c": [[{"r": 3}]]},
        ["b"],  # b.1 was asked and did not answer
    )
    assert by_node({}, NAMES, set(), set()) == ({}, ["b", "c"])
    assert by_node({}, {}, set(), set()) == ({}, [])


def test_sys_cluster_values_add_the_other_nodes_counts_to_this_nodes() -> None:
    others = {
        "b": [[{"connected": 2, "sessions": 3}], [{"connected": 1, "sessions": 1}]],
        "c": [[{"connected": 0, "sessions": 4}]],
    }
    assert dict(cluster_values((5, 6), others)) == {
        "$SYS/cluster/nodes": "3",
        "$SYS/cluster/clients/connected": "8",
        "$SYS/cluster/clients/disconnected": "6",
        "$SYS/cluster/clients/total": "14",
    }
    assert dict(cluster_values((1, 1), {}))["$SYS/cluster/nodes"] == "1"


def test_ctl_names_what_a_tableleft_out() -> None:
    assert left_out({"data": []}) == ""
    assert left_out({"missing_nodes": ["b", "c"]}) == "\nleft out (no answer in time): nodes b, c"
    assert (
        left_out({"missing_workers": [1], "missing_nodes": ["c"]})
        == "\nleft out (no answer in time): workers [1]; nodes c"
    )
