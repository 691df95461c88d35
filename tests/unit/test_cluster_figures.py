"""The cluster part of `/api/v1/stats` in-process: `add_up_nodes` adds this node's pool
figures and the other nodes' workers' (as they come over NATS, `figures_to_wire` rows) up
with the pool's rules, the store added up over the nodes, and leaves out a node whose
answer is not whole."""

from __future__ import annotations

import logging
from dataclasses import replace

import orjson
import pytest

from actors.figures import Figures, WorkerUsage, figures_to_wire
from admin.cluster_figures import add_up_nodes

ZERO = Figures(
    worker=0,
    uptime=0.0,
    connections=0,
    connections_total=0,
    connections_max=0,
    connected_by_version={},
    connections_by_listener={},
    sessions=0,
    messages_received=0,
    received_by_qos=[0, 0, 0],
    messages_sent=0,
    messages_dropped=0,
    deliveries_dropped=0,
    dropped_by_reason={},
    bytes_received=0,
    bytes_sent=0,
    subscriptions=0,
    topic_filters=0,
    retained=0,
    queued=0,
    inflight=0,
    banned=0,
    connects_banned=0,
    store_bytes=0,
    store_commits=None,
)


def worker(number: int, received: int, **values: object) -> Figures:
    """A worker's figures: `received` messages (QoS 1), a connection per 10 of them, a
    store of 1000 bytes, 2 retained messages, and `values`."""
    base = replace(
        ZERO,
        worker=number,
        uptime=30.0,
        connections=received // 10,
        connected_by_version={5: received // 10},
        messages_received=received,
        received_by_qos=[0, received, 0],
        retained=2,
        store_bytes=1000,
        cpu_seconds=1.0,
        usage=[WorkerUsage(number, 1.0, 100, 50)],
    )
    return replace(base, **values)  # type: ignore[arg-type]


def wire(*figures: Figures) -> list[list[dict[str, object]]]:
    """Workers' answers as another node's `OpsReply`s bring them: one part per worker."""
    return [[orjson.loads(orjson.dumps(figures_to_wire(f)))] for f in figures]


def test_the_nodes_add_up_with_the_pools_rules_and_the_stores_over_the_nodes() -> None:
    own = worker(0, 20)  # this node's pool figures, already added up
    others = {
        "b": wire(worker(0, 30), worker(1, 40, uptime=90.0)),
        "c": wire(worker(0, 50, retained=3)),
    }
    whole = add_up_nodes("a", own, others, [])
    assert (whole.nodes, whole.missing_nodes) == (["a", "b", "c"], [])
    figures = whole.figures
    assert figures.messages_received == 20 + 30 + 40 + 50
    assert figures.received_by_qos == [0, 140, 0]
    assert figures.connections == 2 + 3 + 4 + 5
    assert figures.connected_by_version == {5: 14}
    assert figures.cpu_seconds == 4.0
    # Held the same by every worker of every node: taken once (the largest), as in a pool.
    assert (figures.retained, figures.uptime) == (3, 90.0)
    # One store per node: b's two workers share theirs, the nodes' stores add up.
    assert figures.store_bytes == 3000
    answer = whole.as_json()
    assert answer["nodes"] == ["a", "b", "c"] and answer["missing_nodes"] == []
    assert answer["messages_received"] == 140
    assert "worker" not in answer and "usage" not in answer  # one process of this node
    assert "store_commits" not in answer and "hook_latency" not in answer


def test_a_node_left_out_by_the_gathering_is_not_added_even_in_part() -> None:
    others = {"b": wire(worker(0, 30)), "c": wire(worker(0, 50))}  # c: one worker of two
    whole = add_up_nodes("a", worker(0, 20), others, ["c", "d"])
    assert (whole.nodes, whole.missing_nodes) == (["a", "b"], ["c", "d"])
    assert whole.figures.messages_received == 50


def test_figures_that_do_not_parse_leave_their_node_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = wire(worker(0, 30))
    del broken[0][0]["messages_received"]
    others = {"b": broken, "c": wire(worker(0, 50)), "d": [[]]}  # d: its answer failed
    with caplog.at_level(logging.WARNING, "admin.cluster_figures"):
        whole = add_up_nodes("a", worker(0, 20), others, [])
    assert (whole.nodes, whole.missing_nodes) == (["a", "c"], ["b", "d"])
    assert whole.figures.messages_received == 70
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "cluster: node b sent figures that do not parse",
        "cluster: node d sent figures that do not parse",
    ]


def test_without_other_nodes_the_cluster_is_this_node() -> None:
    own = worker(0, 20, store_bytes=5000)
    whole = add_up_nodes("a", own, {}, [])
    assert (whole.nodes, whole.missing_nodes, whole.figures) == (["a"], [], own)
