"""Share groups spanning the nodes of a cluster (docs/cluster.md "Share groups"), three nodes
over a real NATS server, every client on a real socket: each message reaches one member of a
group cluster-wide, whichever nodes the members and the publishers are on.

Each test runs with one process per node and with a pool of two workers per node (the
integration suite's two modes)."""

from __future__ import annotations

import queue
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.broker_config import wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess, pool_mode
from tests.support.clients import PahoCollector, unique
from tests.support.cluster import (
    cluster_fixture,
    drain,
    kill_node,
    needs_nats_server,
    nodes_of,
    publish_across_a_nats_restart,
)
from tests.support.nats_server import NatsServer

pytestmark = needs_nats_server

NODES = ("a", "b", "c")


cluster = cluster_fixture(*NODES)


def collect(
    members: dict[str, PahoCollector], total: int, timeout: float = 10.0
) -> tuple[Counter[str], dict[str, list[str]]]:
    """What the members got, until `total` messages arrived in all and then nothing more for
    a moment (no duplicate arrives late): how often each payload came (to any member), and
    the payloads each member got."""
    got: Counter[str] = Counter()
    per_member: dict[str, list[str]] = {}
    deadline = time.monotonic() + timeout
    quiet_until = None
    while quiet_until is None or time.monotonic() < quiet_until:
        if quiet_until is None and (got.total() >= total or time.monotonic() > deadline):
            quiet_until = time.monotonic() + 0.7
        for name, member in members.items():
            try:
                message = member.messages.get(timeout=0.02)
            except queue.Empty:
                continue
            got[message.payload.decode()] += 1
            per_member.setdefault(name, []).append(message.payload.decode())
    return got, per_member


def members_of(
    cluster: dict[str, BrokerProcess], nodes: tuple[str, ...], shared: str, qos: int
) -> dict[str, PahoCollector]:
    members = {node: PahoCollector(cluster[node], unique(f"member-{node}")) for node in nodes}
    for member in members.values():
        assert member.subscribe(shared, qos) == [qos]
    return members


@pytest.mark.parametrize("qos", [0, 1])
def test_a_group_with_a_member_on_each_node_gets_each_message_once_cluster_wide(
    cluster: dict[str, BrokerProcess], qos: int
) -> None:
    topic = unique("jobs")
    members = members_of(cluster, NODES, f"$share/workers/{topic}/#", qos)
    publishers = {
        node: PahoCollector(broker, unique(f"pub-{node}")) for node, broker in cluster.items()
    }
    sent = []
    for index in range(20):
        for node, publisher in publishers.items():
            payload = f"{node}-{index}"
            publisher.publish(f"{topic}/{index % 4}", payload.encode(), qos=qos)
            sent.append(payload)
    got, per_member = collect(members, len(sent))
    assert got == Counter(sent)  # every message once, across all members
    # Round robin cluster-wide: every member gets some of every node's publisher's messages.
    for member, payloads in per_member.items():
        assert {payload.partition("-")[0] for payload in payloads} == set(NODES), member
    assert set(per_member) == set(NODES), per_member


def test_a_dead_nodes_member_leaves_the_group_and_the_others_get_every_message(
    cluster: dict[str, BrokerProcess],
) -> None:
    topic = unique("jobs")
    members = members_of(cluster, NODES, f"$share/workers/{topic}", 1)
    publisher = PahoCollector(cluster["a"], unique("pub"))
    for index in range(6):
        publisher.publish(topic, f"before-{index}".encode(), qos=1)
    assert collect(members, 6)[0] == Counter(f"before-{index}" for index in range(6))
    kill_node(cluster["c"])
    workers = pool_mode.workers
    # Every worker of node a takes every worker of c for gone (after peer_timeout).
    wait_for_log_lines(cluster["a"], "cluster: no word from c.", workers * workers, timeout=5)
    del members["c"]
    for index in range(30):
        publisher.publish(topic, f"after-{index}".encode(), qos=1)
    got, per_member = collect(members, 30)
    assert got == Counter(f"after-{index}" for index in range(30))
    assert set(per_member) == {"a", "b"}, per_member


@pytest.mark.parametrize("qos", [1, 2])
def test_picks_for_a_node_that_died_go_to_the_members_left_once_it_is_taken_for_gone(
    cluster: dict[str, BrokerProcess], qos: int
) -> None:
    topic = unique("jobs")
    members = members_of(cluster, ("b", "c"), f"$share/workers/{topic}", qos)
    publisher = PahoCollector(cluster["a"], unique("pub"))
    kill_node(cluster["b"])
    # Published before node a takes b for gone (peer_timeout): round robin picks b's member
    # for half of them, and only the batches node a keeps for b until it confirms them
    # still hold those. Each is acknowledged, so each must reach the group.
    for index in range(20):
        publisher.publish(topic, str(index).encode(), qos=qos)
    workers = pool_mode.workers
    wait_for_log_lines(cluster["a"], "cluster: no word from b.", workers * workers, timeout=5)
    got = drain(members["c"], 20)  # b delivered none: it died before the first
    assert sorted(int(message.payload) for message in got) == list(range(20))
    wait_for_log(cluster["a"], "picked again among the groups' other members", timeout=1)


def test_a_group_on_one_node_gets_what_the_other_nodes_publish_once(
    cluster: dict[str, BrokerProcess],
) -> None:
    topic = unique("jobs")
    members = {name: PahoCollector(cluster["b"], unique(name)) for name in ("first", "second")}
    for member in members.values():
        assert member.subscribe(f"$share/g/{topic}/+", 1) == [1]
    sent = []
    for node in ("a", "c"):
        publisher = PahoCollector(cluster[node], unique(f"pub-{node}"))
        for index in range(12):
            publisher.publish(f"{topic}/x", f"{node}-{index}".encode(), qos=1)
            sent.append(f"{node}-{index}")
    got, per_member = collect(members, len(sent))
    assert got == Counter(sent)
    assert set(per_member) == {"first", "second"}, per_member


def test_ordinary_subscribers_get_everything_and_the_group_each_message_once(
    cluster: dict[str, BrokerProcess],
) -> None:
    topic = unique("readings")
    members = members_of(cluster, ("a", "c"), f"$share/g/{topic}/#", 1)
    ordinary = {node: PahoCollector(cluster[node], unique(f"plain-{node}")) for node in ("b", "c")}
    for subscriber in ordinary.values():
        assert subscriber.subscribe(f"{topic}/#", 1) == [1]
    publisher = PahoCollector(cluster["a"], unique("pub"))
    sent = [str(index) for index in range(24)]
    for payload in sent:
        publisher.publish(f"{topic}/t", payload.encode(), qos=1)
    for node, subscriber in ordinary.items():
        assert [m.payload.decode() for m in drain(subscriber, len(sent))] == sent, node
    got, per_member = collect(members, len(sent))
    assert got == Counter(sent)
    assert set(per_member) == {"a", "c"}, per_member


def test_an_offline_members_messages_go_to_a_member_on_another_node(
    cluster: dict[str, BrokerProcess],
) -> None:
    topic = unique("jobs")
    away_id = unique("away")
    away = PahoCollector(cluster["b"], away_id, clean_session=False)
    assert away.subscribe(f"$share/g/{topic}", 1) == [1]
    away.close()  # its session stays a member, offline
    present = members_of(cluster, ("a",), f"$share/g/{topic}", 1)
    publisher = PahoCollector(cluster["c"], unique("pub"))
    sent = [str(index) for index in range(10)]
    for payload in sent:
        publisher.publish(topic, payload.encode(), qos=1)
    assert collect(present, len(sent))[0] == Counter(sent)


def test_a_group_of_sys_topics_picks_among_its_own_nodes_members(
    tmp_path: Path, nats: NatsServer
) -> None:
    # Each node publishes its own $SYS tree and nodes do not forward it: a group reading
    # $SYS topics gets each node's messages at that node's members, never elsewhere.
    presence = "[sys]\npresence_events = true\n"
    with nodes_of(tmp_path, nats, dict.fromkeys(("a", "b"), presence)) as nodes:
        group = f"$share/{unique('g')}/$SYS/brokers/+/clients/#"
        members = {
            node: PahoCollector(broker, unique(f"m-{node}")) for node, broker in nodes.items()
        }
        for member in members.values():
            assert member.subscribe(group, 0) == [0]
        time.sleep(0.5)  # each node would have learnt of the other's member by now
        for _ in range(6):
            PahoCollector(nodes["a"], unique("visitor")).close()
        got = [members["a"].next_message(5) for _ in range(12)]  # connected, disconnected
        assert {m.topic.split("/")[2] for m in got} == {"a"}
        members["b"].assert_no_message(within=0.5)
        for member in members.values():
            member.close()


@pytest.mark.parametrize("qos", [1, 2])
def test_picks_for_a_group_on_another_node_survive_a_nats_restart_once_each_in_order(
    tmp_path: Path, nats: NatsServer, qos: int
) -> None:
    # The group's members are all on node b: every pick crosses NATS in a numbered batch,
    # which is sent again once NATS is back (a peer timeout longer than the restart keeps
    # the nodes, and their clients, linked through it).
    try:
        with nodes_of(tmp_path, nats, {"a": "", "b": ""}, peer_timeout=5.0) as nodes:
            topic = unique("jobs")
            member = PahoCollector(nodes["b"], unique("member"))
            assert member.subscribe(f"$share/g/{topic}", qos) == [qos]
            publisher = PahoCollector(
                nodes["a"], unique("pub"), setup=lambda c: c.max_inflight_messages_set(100)
            )
            publish_across_a_nats_restart(nats, nodes["a"], publisher, topic, qos)
            got = drain(member, 80, timeout=20)
            assert [int(m.payload) for m in got] == list(range(80))
            publisher.close()
            member.close()
    finally:
        if nats.process is None:
            nats.start()
