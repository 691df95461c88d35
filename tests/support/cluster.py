"""Helpers of the cluster's tests: the mark that skips them without nats-server, nodes of
one cluster over a test NATS server (or a three-server NATS cluster) and a `cluster` fixture
of them, waiting for their links, restarting a node from its directory, pausing or killing a
node's whole process tree, publishing across a NATS restart, draining a subscriber."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from tests.support.broker_config import wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess, pool_mode, start_broker
from tests.support.clients import PahoCollector, unique
from tests.support.nats_server import NATS_SERVER, NatsCluster, NatsServer

needs_nats_server = pytest.mark.skipif(
    not Path(NATS_SERVER).exists(), reason="nats-server not installed (Debian package)"
)

PEER_TIMEOUT, HEARTBEAT = 1.0, 0.2  # seconds: the nodes' settings unless a test sets its own


def cluster_config(
    nats: NatsServer | NatsCluster,
    name: str,
    node: str,
    extra: str = "",
    *,
    peer_timeout: float = PEER_TIMEOUT,
) -> str:
    """A node's `[cluster]` table: every NATS server's URL, the bucket on all of them."""
    urls = ", ".join(f'"{url}"' for url in nats.urls)
    return (
        f'[cluster]\nname = "{name}"\nnode = "{node}"\nnats = [{urls}]\n'
        f"replicas = {len(nats.urls)}\nheartbeat = {HEARTBEAT}\npeer_timeout = {peer_timeout}\n"
        f"{extra}"
    )


def linked(nodes: dict[str, BrokerProcess]) -> None:
    """Wait until every worker of every node has linked to every worker of the others."""
    workers = pool_mode.workers
    for node, broker in nodes.items():
        for other in nodes:
            if other != node:
                for worker in range(workers):
                    wait_for_log_lines(
                        broker, f"cluster: linked to {other}.{worker}", workers, timeout=10
                    )


@contextlib.contextmanager
def nodes_of(
    tmp_path: Path,
    nats: NatsServer | NatsCluster,
    extra: dict[str, str],
    ports: dict[str, int] | None = None,
    *,
    peer_timeout: float = PEER_TIMEOUT,
) -> Iterator[dict[str, BrokerProcess]]:
    """Nodes named by `extra`'s keys (each with that configuration text added) in a
    cluster of their own, linked; stopped however the test ends. `ports` gives nodes a
    fixed MQTT port (to restart them on it), else each gets a free one."""
    name = unique("n").replace("-", "")[:40]
    nodes: dict[str, BrokerProcess] = {}
    try:
        for node, text in extra.items():
            directory = tmp_path / node
            directory.mkdir()
            port = () if ports is None else ("--port", str(ports[node]))
            config = cluster_config(nats, name, node, peer_timeout=peer_timeout) + text
            nodes[node] = start_broker(directory, config, port)
        linked(nodes)
        yield nodes
    finally:
        for broker in nodes.values():
            broker.stop()


def cluster_fixture(*names: str) -> Any:
    """A test module's `cluster` fixture: nodes `names`, plain, over the module's `nats`
    server (`cluster = cluster_fixture("a", "b")` in the module)."""

    @pytest.fixture
    def cluster(tmp_path: Path, nats: NatsServer) -> Iterator[dict[str, BrokerProcess]]:
        with nodes_of(tmp_path, nats, dict.fromkeys(names, "")) as nodes:
            yield nodes

    return cluster


def node_config(tmp_path: Path, node: str, renamed: str | None = None) -> str:
    """The configuration node `node` was started with (by `nodes_of` under `tmp_path`), or,
    with `renamed`, that configuration for node `renamed` (the same cluster and settings)."""
    config = (tmp_path / node / "broker.toml").read_text(encoding="utf-8")
    return config if renamed is None else config.replace(f'node = "{node}"', f'node = "{renamed}"')


def restart_node(tmp_path: Path, node: str, port: int | None = None) -> BrokerProcess:
    """Node `node` started again from its directory under `tmp_path`: its configuration and
    its store; on `port` if given (a node behind a proxy), else on a free one."""
    args = () if port is None else ("--port", str(port))
    return start_broker(tmp_path / node, node_config(tmp_path, node), args)


def node_pids(broker: BrokerProcess) -> list[int]:
    """Every process of a node: the broker and all its descendants."""
    pids = [broker.process.pid]
    for pid in pids:  # grows as it goes: the whole tree
        children = Path(f"/proc/{pid}/task/{pid}/children")
        if children.exists():
            pids += [int(child) for child in children.read_text().split()]
    return pids


def kill_node(broker: BrokerProcess) -> None:
    """SIGKILL every process of a node at once (its machine died): stopped first, so no
    worker sees another die and leaves cleanly."""
    pids = node_pids(broker)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    broker.process.wait(timeout=5)


@contextlib.contextmanager
def paused(broker: BrokerProcess) -> Iterator[None]:
    """Every process of a node stopped (SIGSTOP: silent, its sockets open) for the block,
    continued (SIGCONT) however it ends, unless the block killed it."""
    pids = node_pids(broker)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def publish_across_a_nats_restart(
    nats: NatsServer, node: BrokerProcess, publisher: PahoCollector, topic: str, qos: int
) -> None:
    """Messages 0 to 79 on `topic` from `publisher` (connected to `node`, with room for 40
    in flight): 20 acknowledged before `nats` stops, 40 published while it is down (once
    `node` says it lost NATS) and acknowledged after it is back, 20 more after that."""
    for index in range(20):
        publisher.publish(topic, str(index).encode(), qos)
    nats.stop()
    wait_for_log(node, "cluster: lost the NATS connection", timeout=5)
    during = [publisher.client.publish(topic, str(i).encode(), qos) for i in range(20, 60)]
    time.sleep(0.3)
    nats.start()
    for info in during:
        info.wait_for_publish(20)
        assert info.is_published()
    for index in range(60, 80):
        publisher.publish(topic, str(index).encode(), qos)


def drain(collector: PahoCollector, count: int, timeout: float = 10.0) -> list[paho.MQTTMessage]:
    """`count` messages, then nothing more for a moment (no duplicate arrives late)."""
    got = [collector.next_message(timeout) for _ in range(count)]
    collector.assert_no_message(within=0.5)
    return got
