"""Bridges in a cluster (docs/bridges.md "In a cluster"): every node has the same `[[bridges]]`
table, and each bridge runs on one node at a time, which hands it to another when it dies.

Real brokers over a real nats-server, Debian's Mosquitto as the remote, paho clients; each
test runs with one process per node and with a pool of two workers per node (the
integration suite's modes)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from bridge.placement import runner_node
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import PahoCollector, unique
from tests.support.cluster import (
    PEER_TIMEOUT,
    drain,
    kill_node,
    linked,
    needs_nats_server,
    node_config,
    nodes_of,
)
from tests.support.mosquitto import MOSQUITTO, start_mosquitto
from tests.support.nats_server import NatsServer
from tests.support.tcp_proxy import TcpProxy

pytestmark = [
    needs_nats_server,
    pytest.mark.skipif(not Path(MOSQUITTO).exists(), reason="mosquitto not installed"),
]

COUNT = 20  # messages per direction and publishing node


def _bridge(port: int) -> str:
    """Bridge "m" to Mosquitto on `port`: `up/#` out, `down/#` in, QoS 1, quick retries."""
    return (
        f'[[bridges]]\nname = "m"\naddresses = ["127.0.0.1:{port}"]\n'
        "reconnect_delay = 0.2\nmax_reconnect_delay = 1.0\n"
        '[[bridges.topics]]\npattern = "up/#"\ndirection = "out"\nqos = 1\n'
        '[[bridges.topics]]\npattern = "down/#"\ndirection = "in"\nqos = 1\n'
    )


def _runners(nodes: dict[str, BrokerProcess]) -> list[str]:
    """The nodes whose last word on bridge "m" is that it is connected."""
    running = []
    for name, node in nodes.items():
        said = [line for line in node.log().splitlines() if "bridge 'm':" in line]
        if said and "connected to" in said[-1]:
            running.append(name)
    return running


def _one_runner(nodes: dict[str, BrokerProcess], timeout: float = 10.0) -> str:
    """The one node that runs the bridge, once it has run it alone for a while."""
    deadline = time.monotonic() + timeout
    while True:
        runners = _runners(nodes)
        if len(runners) == 1:
            time.sleep(PEER_TIMEOUT)  # placed for good: the same after the nodes settled
            if _runners(nodes) == runners:
                return runners[0]
        assert time.monotonic() < deadline, f"bridge runners: {runners}"
        time.sleep(0.1)


def _both_ways(nodes: dict[str, BrokerProcess], remote: BrokerProcess, tag: str) -> None:
    """Messages published on every node reach the remote once each, and messages published
    at the remote reach a subscriber on every node once each."""
    far = PahoCollector(remote, unique("far"))
    far.subscribe("up/#", 1)
    near = {name: PahoCollector(node, unique(f"near-{name}")) for name, node in nodes.items()}
    for collector in near.values():
        collector.subscribe("down/#", 1)
    time.sleep(0.5)  # the subscriptions known on every node
    for name, collector in near.items():
        for index in range(COUNT):
            collector.publish(f"up/{tag}/{name}", b"%d" % index, 1)
    got = sorted((m.topic, int(m.payload)) for m in drain(far, COUNT * len(nodes), timeout=15))
    assert got == sorted((f"up/{tag}/{name}", i) for name in nodes for i in range(COUNT))
    for index in range(COUNT):
        far.publish(f"down/{tag}", b"%d" % index, 1)
    for name, collector in near.items():
        payloads = [int(m.payload) for m in drain(collector, COUNT, timeout=15)]
        assert payloads == list(range(COUNT)), (name, payloads)
    for collector in [far, *near.values()]:
        collector.close()


def test_one_node_runs_a_bridge_and_another_takes_it_when_that_node_dies(
    tmp_path: Path, nats: NatsServer
) -> None:
    remote = start_mosquitto(tmp_path)
    try:
        with nodes_of(tmp_path, nats, dict.fromkeys("abc", _bridge(remote.port))) as nodes:
            cluster = re.search(r'name = "([^"]+)"', node_config(tmp_path, "a"))
            assert cluster is not None
            # Whichever node runs it, the remote sees one client: "<cluster>.m".
            connected = f"as {cluster[1]}.m ("
            runner = _one_runner(nodes)
            connections = remote.log().count(connected)
            assert connections >= 1, remote.log()
            _both_ways(nodes, remote, "first")
            # The nodes that do not run the bridge stay away from the remote: its one
            # connection stayed (three would take every message in thrice).
            assert remote.log().count(connected) == connections, remote.log()
            kill_node(nodes[runner])
            survivors = {name: node for name, node in nodes.items() if name != runner}
            taker = _one_runner(survivors, timeout=15)
            assert taker != runner
            connections = remote.log().count(connected)
            _both_ways(survivors, remote, "after")
            assert remote.log().count(connected) == connections, remote.log()
    finally:
        remote.stop()


def test_a_bridge_configured_on_one_node_runs_there(tmp_path: Path, nats: NatsServer) -> None:
    """Only node b has the bridge: b runs it, for the whole cluster, although "m" ranks
    another node first (each node says in its heartbeats which bridges it has)."""
    assert runner_node("m", ["a", "b", "c"]) != "b"
    remote = start_mosquitto(tmp_path)
    try:
        nodes_config = {"a": "", "b": _bridge(remote.port), "c": ""}
        with nodes_of(tmp_path, nats, nodes_config) as nodes:
            assert _one_runner(nodes) == "b"
            _both_ways(nodes, remote, "only-b")
    finally:
        remote.stop()


def test_a_node_back_from_a_cut_hears_the_others_before_it_places_a_bridge(
    tmp_path: Path,
) -> None:
    """Node c cut off from NATS (a silent partition) takes the others for gone; when it is
    back it waits to hear them again, instead of starting every bridge as the only node
    left and taking the bridge's remote connection from the node that runs it."""
    remote = start_mosquitto(tmp_path)
    server = NatsServer()
    server.start()
    proxy = TcpProxy(server.port)
    proxy.start()
    bridge = _bridge(remote.port)
    try:
        with nodes_of(tmp_path, server, {"a": bridge, "b": bridge}) as nodes:
            config = node_config(tmp_path, "a", "c").replace(server.url, proxy.url)
            (tmp_path / "c").mkdir()
            nodes["c"] = start_broker(tmp_path / "c", config)
            linked(nodes)
            _one_runner(nodes)
            proxy.cut()
            wait_for_log(nodes["c"], "cluster: no NATS for", timeout=10)
            _one_runner({name: nodes[name] for name in "ab"})
            takeovers = remote.log().count("already connected")
            proxy.heal()
            wait_for_log(nodes["c"], "cluster: NATS is back", timeout=15)
            time.sleep(PEER_TIMEOUT + 1.0)
            assert remote.log().count("already connected") == takeovers, remote.log()
            _one_runner(nodes)
            _both_ways(nodes, remote, "healed")
    finally:
        proxy.close()
        server.remove()
        remote.stop()
