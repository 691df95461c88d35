"""Routes and figures of the whole cluster from any node (docs/cluster.md "Operations"),
three brokers over a real NATS server: node c's `GET /api/v1/routes` lists the filters
subscribed on nodes a and b with their subscriber counts and nodes, its `GET
/api/v1/stats` adds every node's figures up in a `cluster` part beside its own and ranks
every node's top topics there, `ctl`
prints both, and a node that died is named missing in both answers, which come within the
gathering's timeout.

Each test runs with one process per node and with a pool of two workers per node (the
integration suite's two modes): a node's clients are then spread over its workers, and
every worker of every node answers for itself."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mqtt.packets import PubAck, Publish, UnsubAck, Unsubscribe
from tests.support.admin import Admin, ctl, http_config
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, subscribe_raw, unique
from tests.support.cluster import kill_node, needs_nats_server, nodes_of
from tests.support.nats_server import NatsServer
from tests.support.ports import free_port
from tests.support.raw_client import RawClient

pytestmark = needs_nats_server

GATHERING = 2.0  # seconds: pool.ops.GATHER_TIMEOUT, which the cluster's gathering uses too


class Cluster:
    """Nodes a, b and c, with the admin API on c."""

    def __init__(self, nodes: dict[str, BrokerProcess], port: int) -> None:
        self.nodes = nodes
        self.admin = Admin(nodes["c"], port)


@pytest.fixture
def cluster(tmp_path: Path, nats: NatsServer) -> Iterator[Cluster]:
    port = free_port()
    with nodes_of(tmp_path, nats, {"a": "", "b": "", "c": http_config(port)}) as nodes:
        yield Cluster(nodes, port)


def eventually(read: Callable[[], Any], wanted: Any, timeout: float = 5.0) -> Any:
    """`read()` once it equals `wanted` (the figures are a reading up to a second old)."""
    deadline = time.monotonic() + timeout
    while (value := read()) != wanted:
        assert time.monotonic() < deadline, (value, wanted)
        time.sleep(0.1)
    return value


def routes(admin: Admin, base: str) -> dict[str, tuple[int, list[str]]]:
    """The routes of the test's filters as the node's API lists them: filter -> (count,
    nodes); the answer must leave no node out."""
    answer = admin.get("/api/v1/routes?limit=10000")
    assert "missing_nodes" not in answer and "missing_workers" not in answer, answer
    return {
        row["topic"]: (row["subscribers"], row["nodes"])
        for row in answer["data"]
        if row["topic"].startswith(base)
    }


def unsubscribe(client: RawClient, packet_id: int, topic_filter: str) -> None:
    client.send(Unsubscribe(packet_id, [topic_filter]))
    unsuback = client.expect()
    assert isinstance(unsuback, UnsubAck) and unsuback.packet_id == packet_id, unsuback


def publish_acknowledged(client: RawClient, topic: str, count: int) -> None:
    """`count` QoS 1 messages, each acknowledged: counted as received by its worker."""
    for packet_id in range(1, count + 1):
        client.send(Publish(topic, b"m", qos=1, packet_id=packet_id))
        puback = client.expect()
        assert isinstance(puback, PubAck) and puback.packet_id == packet_id, puback


def status_line(name: str, value: object) -> str:
    """A line of `ctl status`."""
    return f"{name:<16} {value}"


def test_routes_on_any_node_list_every_nodes_filters_with_counts_and_nodes(
    cluster: Cluster,
) -> None:
    base = unique("routes")
    everything, x, y = f"{base}/#", f"{base}/x", f"{base}/+/y"
    on_a = [connect_raw(cluster.nodes["a"], f"{base}-a{n}") for n in range(2)]
    on_b = connect_raw(cluster.nodes["b"], f"{base}-b")
    subscribe_raw(on_a[0], 1, (everything, 0), (x, 1))
    subscribe_raw(on_a[1], 1, (everything, 1))
    subscribe_raw(on_b, 1, (everything, 0), (y, 0))
    # Node c subscribes to none of them: every row comes from the other nodes.
    assert routes(cluster.admin, base) == {
        everything: (3, ["a", "b"]),
        x: (1, ["a"]),
        y: (1, ["b"]),
    }
    unsubscribe(on_b, 2, everything)
    unsubscribe(on_a[0], 2, x)
    assert routes(cluster.admin, base) == {everything: (2, ["a"]), y: (1, ["b"])}
    # ctl against node c prints the nodes column.
    printed = ctl(cluster.admin, "routes")
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].split() == ["TOPIC", "SUBSCRIBERS", "NODES"], printed.stdout
    assert {tuple(line.split()) for line in lines[1:3]} == {(everything, "2", "a"), (y, "1", "b")}
    for client in [*on_a, on_b]:
        client.close()


def test_stats_on_any_node_add_up_every_nodes_figures_beside_its_own(cluster: Cluster) -> None:
    base = unique("stats")
    sent = {"a": 3, "b": 5, "c": 2}
    publishers = {node: connect_raw(cluster.nodes[node], f"{base}-{node}") for node in sent}
    for node, count in sent.items():
        publish_acknowledged(publishers[node], f"{base}/{node}", count)

    def figures() -> tuple[Any, ...]:
        stats = cluster.admin.get("/api/v1/stats")
        whole = stats["cluster"]
        return (
            (stats["node"], stats["messages_received"], stats["connections"]),
            (whole["nodes"], whole["missing_nodes"]),
            (whole["messages_received"], whole["received_by_qos"], whole["connections"]),
        )

    eventually(figures, (("c", 2, 1), (["a", "b", "c"], []), (10, [0, 10, 0], 3)))
    # ctl status against node c prints the cluster's figures after the node's.
    printed = ctl(cluster.admin, "status")
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    cluster_at = lines.index(status_line("cluster", "a, b, c"))
    assert status_line("messages in", 2) in lines[:cluster_at], printed.stdout
    assert status_line("  messages in", 10) in lines[cluster_at:], printed.stdout
    for client in publishers.values():
        client.close()


def test_stats_rank_every_nodes_top_topics_in_the_cluster_part(cluster: Cluster) -> None:
    # One publish batch in 16 has its topics counted, per worker: 32 acknowledged
    # publishes, each a batch of its own on one worker, count at least twice.
    topic = unique("ranked")
    publisher = connect_raw(cluster.nodes["a"], f"{topic}-pub")
    publish_acknowledged(publisher, topic, 32)

    def ranked() -> tuple[bool, bool]:
        stats = cluster.admin.get("/api/v1/stats")
        return (
            any(row["topic"] == topic for row in stats["top_topics"]),  # node c's own
            any(row["topic"] == topic for row in stats["cluster"]["top_topics"]),
        )

    eventually(ranked, (False, True))
    publisher.close()


def test_a_killed_node_is_named_missing_in_routes_and_stats_within_the_timeout(
    cluster: Cluster,
) -> None:
    base = unique("dead")
    on_a = connect_raw(cluster.nodes["a"], f"{base}-a")
    on_b = connect_raw(cluster.nodes["b"], f"{base}-b")
    subscribe_raw(on_a, 1, (f"{base}/#", 0))
    subscribe_raw(on_b, 1, (f"{base}/#", 0))
    assert routes(cluster.admin, base) == {f"{base}/#": (2, ["a", "b"])}
    kill_node(cluster.nodes["b"])
    # Node c still takes b for linked: each answer waits for the gathering's timeout, no more.
    started = time.monotonic()
    answer = cluster.admin.get("/api/v1/routes")
    assert time.monotonic() - started < GATHERING + 1.5, "routes waited past the timeout"
    assert answer["missing_nodes"] == ["b"], answer
    assert [(row["topic"], row["subscribers"], row["nodes"]) for row in answer["data"]] == [
        (f"{base}/#", 1, ["a"])
    ]
    started = time.monotonic()
    stats = cluster.admin.get("/api/v1/stats")
    assert time.monotonic() - started < GATHERING + 1.5, "stats waited past the timeout"
    assert (stats["cluster"]["nodes"], stats["cluster"]["missing_nodes"]) == (["a", "c"], ["b"])
    assert stats["cluster"]["connections"] == 1, stats["cluster"]  # a's subscriber
    printed = ctl(cluster.admin, "status")
    assert printed.returncode == 0, printed.stderr
    assert status_line("  left out", "nodes b") in printed.stdout.splitlines(), printed.stdout
    on_a.close()
    on_b.close()
