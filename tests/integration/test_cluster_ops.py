"""Operations across a cluster of three brokers over a real NATS server (docs/cluster.md
"Operations"): one node's admin API, `ctl` and `$SYS` see the clients of every node, a
kick through one node closes a connection on another, and a node that died is reported
missing instead of hanging the answer.

Each test runs with one process per node and with a pool of two workers per node (the
integration suite's two modes): the client on a node is then on the last worker when the
pool spreads connections, and every worker of every node answers for itself."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqtt.packets import Disconnect
from mqtt.reason_codes import ReasonCode
from tests.support.admin import Admin, ctl, http_config
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.cluster import kill_node, needs_nats_server, nodes_of
from tests.support.nats_server import NatsServer
from tests.support.ports import free_port
from tests.support.raw_client import RawClient

pytestmark = needs_nats_server

SYS = "[sys]\ninterval = 0.3\n"


class Cluster:
    """Nodes a, b and c, with the admin API on a and b."""

    def __init__(self, nodes: dict[str, BrokerProcess], ports: dict[str, int]) -> None:
        self.nodes = nodes
        self.admin = {node: Admin(nodes[node], port) for node, port in ports.items()}


@pytest.fixture
def cluster(tmp_path: Path, nats: NatsServer) -> Iterator[Cluster]:
    ports = {"a": free_port(), "b": free_port()}
    extra = {
        "a": http_config(ports["a"]) + SYS,
        "b": http_config(ports["b"]) + SYS,
        "c": SYS,
    }
    with nodes_of(tmp_path, nats, extra) as nodes:
        yield Cluster(nodes, ports)


def listed(admin: Admin, search: str) -> dict[str, str]:
    """The clients whose id contains `search`, as the node's API lists them: id -> node."""
    answer = admin.get(f"/api/v1/clients?clientid={search}")
    assert "missing_nodes" not in answer and "missing_workers" not in answer, answer
    assert answer["meta"]["count"] == len(answer["data"]), answer
    return {row["clientid"]: row["node"] for row in answer["data"]}


def test_a_client_on_node_c_is_listed_found_and_kicked_through_node_a(cluster: Cluster) -> None:
    base = unique("ops")
    clients: dict[str, RawClient] = {}
    for node in ("a", "b", "c"):
        for index in range(2):
            client_id = f"{base}-{node}{index}"
            clients[client_id] = connect_raw(cluster.nodes[node], client_id, version=5)
    expected = {client_id: client_id.rsplit("-", 1)[1][0] for client_id in clients}
    # The list on any node holds the clients of all nodes, each with its node.
    assert listed(cluster.admin["a"], base) == expected
    assert listed(cluster.admin["b"], base) == expected
    # Paging runs over the cluster-wide table: page 2 of 4 per page is the last two ids.
    page = cluster.admin["a"].get(f"/api/v1/clients?clientid={base}&limit=4&page=2")
    assert [row["clientid"] for row in page["data"]] == sorted(expected)[4:]
    assert page["meta"]["count"] == 6 and not page["meta"]["hasnext"]
    # One client's detail, from the node it is on.
    victim_id = f"{base}-c1"
    subscribe_raw(clients[victim_id], 1, (f"{base}/t", 1))
    detail = cluster.admin["a"].get(f"/api/v1/clients/{victim_id}")
    assert (detail["node"], detail["subscriptions"]) == ("c", {f"{base}/t": 1})
    sessions = cluster.admin["a"].get(f"/api/v1/sessions?clientid={base}")
    assert {row["clientid"]: row["node"] for row in sessions["data"]} == expected
    subscriptions = cluster.admin["b"].get(f"/api/v1/subscriptions?clientid={victim_id}")
    assert subscriptions["data"] == [
        {"clientid": victim_id, "node": "c", "topic": f"{base}/t", "qos": 1}
    ]
    # ctl against node b shows them, with the node column.
    printed = ctl(cluster.admin["b"], "clients", "list", "--search", base)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].split()[:2] == ["CLIENTID", "NODE"], printed.stdout
    assert {tuple(line.split()[:2]) for line in lines[1:7]} == set(expected.items())
    # A kick through node a closes the connection on node c as a local kick does.
    assert cluster.admin["a"].request("DELETE", f"/api/v1/clients/{victim_id}").status == 204
    disconnect = clients[victim_id].expect()
    assert isinstance(disconnect, Disconnect)
    assert disconnect.reason_code == ReasonCode.ADMINISTRATIVE_ACTION
    assert clients[victim_id].is_closed_by_broker()
    deadline = time.monotonic() + 5
    while victim_id in listed(cluster.admin["a"], base):
        assert time.monotonic() < deadline, "the kicked client is still listed"
        time.sleep(0.1)
    # A clean-start session ends with its connection [MQTT-3.1.2-4]: no session either.
    sessions = cluster.admin["a"].get(f"/api/v1/sessions?clientid={victim_id}")
    assert sessions["data"] == []
    gone = cluster.admin["a"].request("GET", f"/api/v1/clients/{victim_id}")
    assert gone.status == 404, gone.body
    assert cluster.admin["a"].request("DELETE", f"/api/v1/clients/{victim_id}").status == 404
    for client_id, client in clients.items():
        if client_id != victim_id:
            client.close()


def test_sys_cluster_counts_the_clients_of_every_node(cluster: Cluster) -> None:
    base = unique("sys")
    others = [
        connect_raw(cluster.nodes[node], f"{base}-{node}{index}")
        for index, node in enumerate(("b", "b", "c"))
    ]
    watcher = connect_raw(cluster.nodes["a"], f"{base}-watch")
    subscribe_raw(watcher, 1, ("$SYS/cluster/#", 0), ("$SYS/broker/clients/connected", 0))
    wanted = {
        "$SYS/cluster/nodes": "3",
        "$SYS/cluster/clients/connected": "4",  # the watcher and the three others
        "$SYS/cluster/clients/total": "4",  # their sessions, none offline
        "$SYS/broker/clients/connected": "1",  # node a's own: the watcher
    }
    values: dict[str, str] = {}
    deadline = time.monotonic() + 10
    while {topic: values.get(topic) for topic in wanted} != wanted:
        assert time.monotonic() < deadline, values
        publish = expect_publish(watcher)
        values[publish.topic] = publish.payload.decode()
    watcher.close()
    for client in others:
        client.close()


def test_a_killed_node_is_reported_missing_instead_of_hanging_the_answer(
    cluster: Cluster,
) -> None:
    base = unique("dead")
    on_b = connect_raw(cluster.nodes["b"], f"{base}-b")
    on_c = connect_raw(cluster.nodes["c"], f"{base}-c")
    assert listed(cluster.admin["a"], base) == {f"{base}-b": "b", f"{base}-c": "c"}
    kill_node(cluster.nodes["c"])
    # At once (c is still taken for linked) and later (c is taken for gone): c is missing.
    for _ in range(2):
        started = time.monotonic()
        answer = cluster.admin["a"].get(f"/api/v1/clients?clientid={base}")
        assert time.monotonic() - started < 5, "the answer waited past the gathering's timeout"
        assert answer["missing_nodes"] == ["c"], answer
        assert [(row["clientid"], row["node"]) for row in answer["data"]] == [(f"{base}-b", "b")]
        # c may hold a client: not found is "ask again later" (503), not "not here" (404).
        finding = cluster.admin["a"].request("GET", f"/api/v1/clients/{base}-c")
        assert finding.status == 503, finding.body
        assert b"nodes ['c']" in finding.body
        time.sleep(1.5)  # past peer_timeout
    printed = ctl(cluster.admin["a"], "clients", "list", "--search", base)
    assert printed.returncode == 0, printed.stderr
    assert "left out (no answer in time): nodes c" in printed.stdout, printed.stdout
    on_b.close()
    on_c.close()
