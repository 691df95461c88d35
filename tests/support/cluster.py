"""Helpers of the cluster's integration tests: nodes of one cluster over a test NATS server
(or a three-server NATS cluster), waiting for their links, killing a node's whole process
tree, draining a subscriber."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho

from tests.support.broker_config import wait_for_log_lines
from tests.support.broker_process import BrokerProcess, pool_mode, start_broker
from tests.support.clients import PahoCollector, unique
from tests.support.nats_server import NatsCluster, NatsServer


def cluster_config(nats: NatsServer | NatsCluster, name: str, node: str, extra: str = "") -> str:
    """A node's `[cluster]` table: every NATS server's URL, the bucket on all of them."""
    urls = ", ".join(f'"{url}"' for url in nats.urls)
    return (
        f'[cluster]\nname = "{name}"\nnode = "{node}"\nnats = [{urls}]\n'
        f"replicas = {len(nats.urls)}\nheartbeat = 0.2\npeer_timeout = 1.0\n{extra}"
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
            nodes[node] = start_broker(directory, cluster_config(nats, name, node) + text, port)
        linked(nodes)
        yield nodes
    finally:
        for broker in nodes.values():
            broker.stop()


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


def drain(collector: PahoCollector, count: int, timeout: float = 10.0) -> list[paho.MQTTMessage]:
    """`count` messages, then nothing more for a moment (no duplicate arrives late)."""
    got = [collector.next_message(timeout) for _ in range(count)]
    collector.assert_no_message(within=0.5)
    return got
