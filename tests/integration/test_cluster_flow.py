"""Flow control across the nodes of a cluster (docs/cluster.md "Flow control"): a session
over its high-water mark on one node pauses the publisher that feeds it on another, as
across a pool's workers (docs/overload.md), and a node that goes leaves no publisher paused.

Real brokers over a real nats-server on loopback, raw clients; each test runs with one
process per node and with a pool of two workers per node (the integration suite's modes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import unique
from tests.support.cluster import kill_node, needs_nats_server, nodes_of
from tests.support.flow_clients import PipelinedPublisher, SwitchableSubscriber, held_then_drained
from tests.support.nats_server import NatsServer

pytestmark = needs_nats_server

SLOW_CONFIG = """
[overload]
high_water_messages = 200
low_water_messages = 100
max_stall = 60.0
"""
MESSAGES = 20_000


@pytest.fixture
def cluster(tmp_path: Path, nats: NatsServer) -> Iterator[dict[str, BrokerProcess]]:
    with nodes_of(tmp_path, nats, dict.fromkeys("ab", SLOW_CONFIG)) as nodes:
        yield nodes


def _held_across_nodes(
    nodes: dict[str, BrokerProcess], topic: str
) -> tuple[SwitchableSubscriber, PipelinedPublisher]:
    """A subscriber on node b that does not read, and a publisher on node a streaming
    `MESSAGES` QoS 1 messages to it until it is held: the session on b went over its mark,
    and the publisher's PUBACKs stopped far short of the end (without the hold crossing the
    nodes, node a took and acknowledged them all, and b's session queue grew without bound)."""
    slow = SwitchableSubscriber(nodes["b"], unique("slow-sub"), topic)
    publisher = PipelinedPublisher(nodes["a"], unique("slow-pub"))
    publisher.publish(topic, b"s", MESSAGES, size=256)
    wait_for_log(nodes["b"], "flow: session", timeout=10)
    time.sleep(1.0)
    assert publisher.acked_count() < MESSAGES // 4, publisher.acked_count()
    return slow, publisher


def test_a_slow_subscriber_on_another_node_pauses_its_publisher(
    cluster: dict[str, BrokerProcess],
) -> None:
    """The hold crosses NATS: the publisher's reads stop on its node, so the session's queue
    on the other node stays bounded; once it drains, every message arrives once, in order."""
    slow, publisher = _held_across_nodes(cluster, unique("cross-node"))
    held_then_drained(slow, publisher, MESSAGES)
    wait_for_log(cluster["b"], "drained", timeout=5)
    slow.close()
    publisher.close()
    for node in cluster.values():
        assert "Traceback" not in node.log()


def test_a_node_that_dies_holding_a_publisher_lets_it_go(
    cluster: dict[str, BrokerProcess],
) -> None:
    """A hold from another node ends when that node is taken for gone: the publisher is
    never left paused by a node that is not there."""
    slow, publisher = _held_across_nodes(cluster, unique("dying-holder"))
    kill_node(cluster["b"])
    # Released once a takes b for gone: the rest is read and acknowledged (no subscriber
    # left there: PUBACK all the same).
    assert publisher.wait_acked(MESSAGES, timeout=30), publisher.acked_count()
    slow.close()
    publisher.close()
