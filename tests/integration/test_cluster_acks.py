"""At-least-once forwarding across the nodes of a cluster (docs/cluster.md "Forwarding a QoS
1/2 message"): a publisher's PUBACK/PUBCOMP waits until the node of a persistent subscriber
has stored the message, and QoS 1/2 messages crossing NATS, for persistent and clean
sessions, survive its restart.

Real brokers over a real nats-server on loopback, real paho clients; each test runs with one
process per node and with a pool of two workers per node (the integration suite's modes)."""

from __future__ import annotations

import os
import queue
import signal
import time
from pathlib import Path

import pytest

from mqtt.packets import Disconnect
from pool.ownership import home_of
from tests.support.broker_config import wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess, pool_mode
from tests.support.clients import PahoCollector, subscribe_raw, unique
from tests.support.cluster import (
    cluster_fixture,
    drain,
    kill_node,
    linked,
    needs_nats_server,
    nodes_of,
    paused,
    publish_across_a_nats_restart,
    restart_node,
)
from tests.support.nats_server import NatsServer
from tests.support.workers import connect_on_worker, worker_pid

pytestmark = needs_nats_server

cluster = cluster_fixture("a", "b")


def persistent_subscriber(broker: BrokerProcess, client_id: str, topic: str, qos: int) -> None:
    """A session that outlives its connection (clean session 0), subscribed, then offline."""
    subscriber = PahoCollector(broker, client_id, clean_session=False)
    assert subscriber.subscribe(topic, qos) == [qos]
    subscriber.close()


def burst_publisher(broker: BrokerProcess, in_flight: int) -> PahoCollector:
    """A publisher that keeps up to `in_flight` QoS 1/2 messages unacknowledged."""
    return PahoCollector(
        broker, unique("pub"), setup=lambda client: client.max_inflight_messages_set(in_flight)
    )


def publish_burst(publisher: PahoCollector, topic: str, count: int, qos: int) -> None:
    """`count` messages in flight at once, then every acknowledgement waited for."""
    sent = [publisher.client.publish(topic, str(i).encode(), qos) for i in range(count)]
    for info in sent:
        info.wait_for_publish(30)
        assert info.is_published()


def logged_for_every_worker_of_b(node: BrokerProcess, line: str) -> None:
    """Every worker of `node` has logged `line` (a template of b's worker, `b.{}`) about
    every worker of node b."""
    workers = pool_mode.workers
    for worker in range(workers):
        wait_for_log_lines(node, line.format(worker), workers, timeout=5)


def test_every_acknowledged_message_survives_the_subscribers_node_dying_right_after(
    cluster: dict[str, BrokerProcess], tmp_path: Path
) -> None:
    # The PUBACKs wait until node b has stored the messages for its offline persistent
    # sessions, so b killed right after the last PUBACK still has every one when it
    # restarts. Ten sessions make b's work ten times a's: without that wait, a acknowledges
    # well before b has stored the tail of the burst.
    topic, count = f"acks/{unique('t')}", 600
    client_ids = [unique("keeper") for _ in range(10)]
    for client_id in client_ids:
        persistent_subscriber(cluster["b"], client_id, topic, 1)
    publisher = burst_publisher(cluster["a"], count)
    publish_burst(publisher, topic, count, qos=1)
    kill_node(cluster["b"])
    publisher.close()
    cluster["b"] = restart_node(tmp_path, "b")
    for client_id in client_ids:
        subscriber = PahoCollector(cluster["b"], client_id, clean_session=False)
        got = {int(subscriber.next_message(10).payload) for _ in range(count)}
        assert got == set(range(count)), client_id
        subscriber.close()


def test_the_sessions_a_node_restores_from_its_store_are_subscribed_on_the_others(
    cluster: dict[str, BrokerProcess], tmp_path: Path
) -> None:
    # Node b restarts with offline persistent sessions: it tells the other nodes their
    # routes, so what is published on a before their clients return is stored on b.
    topic = f"restored/{unique('t')}"
    client_ids = [unique("keeper") for _ in range(3)]
    for client_id in client_ids:
        persistent_subscriber(cluster["b"], client_id, topic, 1)
    cluster["b"].stop()
    cluster["b"] = restart_node(tmp_path, "b")
    linked(cluster)
    time.sleep(0.5)  # b's routes, sent when it linked to a, reach a
    publisher = burst_publisher(cluster["a"], 10)
    publish_burst(publisher, topic, 10, qos=1)
    publisher.close()
    for client_id in client_ids:
        subscriber = PahoCollector(cluster["b"], client_id, clean_session=False)
        assert [int(m.payload) for m in drain(subscriber, 10)] == list(range(10)), client_id
        subscriber.close()


@pytest.mark.parametrize(("qos", "clean"), [(1, False), (2, False), (1, True), (2, True)])
def test_messages_published_while_nats_restarts_reach_the_other_node_once_each_in_order(
    tmp_path: Path, nats: NatsServer, qos: int, clean: bool
) -> None:
    # A peer timeout longer than the restart: the nodes keep each other (and their clients)
    # through it, and what was forwarded meanwhile is sent again once NATS is back, to a
    # clean session too (whose node the PUBACKs do not wait for).
    try:
        with nodes_of(tmp_path, nats, {"a": "", "b": ""}, peer_timeout=5.0) as nodes:
            client_id, topic = unique("keeper"), f"restart/{unique('t')}"
            subscriber = PahoCollector(nodes["b"], client_id, clean_session=clean)
            assert subscriber.subscribe(topic, qos) == [qos]
            publisher = burst_publisher(nodes["a"], 100)
            publish_across_a_nats_restart(nats, nodes["a"], publisher, topic, qos)
            got = drain(subscriber, 80, timeout=20)
            assert [int(m.payload) for m in got] == list(range(80))
            assert {m.qos for m in got} == {qos}
            publisher.close()
            subscriber.close()
    finally:
        if nats.process is None:
            nats.start()


def test_a_publisher_waits_no_longer_than_the_peer_timeout_for_a_silent_node(
    cluster: dict[str, BrokerProcess],
) -> None:
    # Node b stops answering (SIGSTOP): the PUBACK waits for it until it is taken for gone
    # (peer_timeout 1.0 s), not forever. When b wakes up in the same life, the message is
    # sent again and its persistent session gets it once.
    client_id, topic = unique("keeper"), f"silent/{unique('t')}"
    subscriber = PahoCollector(cluster["b"], client_id, clean_session=False)
    assert subscriber.subscribe(topic, 1) == [1]
    publisher = PahoCollector(cluster["a"], unique("pub"))
    publisher.publish(topic, b"before", 1)
    assert subscriber.next_message(5).payload == b"before"
    with paused(cluster["b"]):
        started = time.monotonic()
        info = publisher.client.publish(topic, b"while-stopped", 1)
        info.wait_for_publish(10)
        waited = time.monotonic() - started
        assert info.is_published()
        assert 0.8 < waited < 5.0, waited
    assert subscriber.next_message(10).payload == b"while-stopped"
    subscriber.assert_no_message(within=1.0)
    publisher.close()
    subscriber.close()


def five_stored_on_b(cluster: dict[str, BrokerProcess], qos: int) -> tuple[str, str, PahoCollector]:
    """An offline persistent session on node b subscribed at `qos`, and a publisher on a
    (20 in flight) whose messages 0 to 4 b has stored: the client id, topic and publisher."""
    client_id, topic = unique("keeper"), f"kept/{unique('t')}"
    persistent_subscriber(cluster["b"], client_id, topic, qos)
    publisher = burst_publisher(cluster["a"], 20)
    for index in range(5):
        publisher.publish(topic, str(index).encode(), qos)
    return client_id, topic, publisher


def b_restarted_delivers_all_25(
    cluster: dict[str, BrokerProcess], tmp_path: Path, client_id: str, qos: int
) -> None:
    """Node b, started again from its store, gives `client_id`'s session messages 0 to 24
    once each, in order, at `qos`."""
    cluster["b"] = restart_node(tmp_path, "b")
    linked(cluster)
    subscriber = PahoCollector(cluster["b"], client_id, clean_session=False)
    try:
        got = drain(subscriber, 25)
    except queue.Empty:
        lines = [
            f"{name}: {line}"
            for name, node in cluster.items()
            for line in node.log().splitlines()
            if "cluster:" in line
        ]
        raise AssertionError(
            "the restored session got fewer than 25 messages; the nodes' cluster lines:\n"
            + "\n".join(lines)
        ) from None
    assert [int(m.payload) for m in got] == list(range(25))
    assert {m.qos for m in got} == {qos}
    subscriber.close()


@pytest.mark.parametrize("qos", [1, 2])
def test_what_a_node_killed_before_storing_was_sent_reaches_its_sessions_when_it_restarts(
    cluster: dict[str, BrokerProcess], tmp_path: Path, qos: int
) -> None:
    # Node b is stopped (SIGSTOP) with an offline persistent session, and a publishes to
    # it: the PUBACKs wait until b is taken for gone (peer_timeout 1.0 s), then go. b is
    # killed without having stored those messages. a kept them, and gives them to b's next
    # life, whose restored session gets every message once, after those b had stored, in
    # order (QoS 2: exactly once).
    client_id, topic, publisher = five_stored_on_b(cluster, qos)
    with paused(cluster["b"]):
        sent = [publisher.client.publish(topic, str(i).encode(), qos) for i in range(5, 25)]
        for info in sent:
            info.wait_for_publish(10)
            assert info.is_published()
        kill_node(cluster["b"])
    publisher.close()
    b_restarted_delivers_all_25(cluster, tmp_path, client_id, qos)


@pytest.mark.parametrize("qos", [1, 2])
@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_what_is_published_while_a_node_is_down_reaches_its_sessions_when_it_is_back(
    cluster: dict[str, BrokerProcess], tmp_path: Path, how: str, qos: int
) -> None:
    # Node b goes down with an offline persistent session (a clean stop, as in a rolling
    # restart, or SIGKILL), and a goes on publishing to it. Killed, b is taken for gone
    # after peer_timeout: what a sent it before that is given to b's next life as it never
    # confirmed it, and what a published after it was kept. Stopped, b says it leaves and
    # everything is kept. Restarted, b's session gets it all, once, in order.
    client_id, topic, publisher = five_stored_on_b(cluster, qos)
    if how == "stopped":
        cluster["b"].stop()
        logged_for_every_worker_of_b(cluster["a"], "cluster: b.{} is leaving")
        sent = []
    else:
        kill_node(cluster["b"])
        sent = [publisher.client.publish(topic, str(i).encode(), qos) for i in range(5, 15)]
        logged_for_every_worker_of_b(cluster["a"], "cluster: no word from b.{}")
    sent += [
        publisher.client.publish(topic, str(i).encode(), qos) for i in range(5 + len(sent), 25)
    ]
    for info in sent:
        info.wait_for_publish(10)
        assert info.is_published()
    publisher.close()
    b_restarted_delivers_all_25(cluster, tmp_path, client_id, qos)


def test_what_is_published_while_a_node_is_silent_reaches_its_sessions_when_it_is_back(
    cluster: dict[str, BrokerProcess],
) -> None:
    # Node b stops answering (SIGSTOP) past peer_timeout, with an offline persistent
    # session: a takes it for gone, drops its routes and keeps what is published for the
    # session. b wakes up in the same life: it is given those messages, and its session
    # gets them once, in order.
    client_id, topic = unique("keeper"), f"silent/{unique('t')}"
    persistent_subscriber(cluster["b"], client_id, topic, 1)
    publisher = burst_publisher(cluster["a"], 10)
    with paused(cluster["b"]):
        logged_for_every_worker_of_b(cluster["a"], "cluster: no word from b.{}")
        publish_burst(publisher, topic, 10, qos=1)  # acknowledged: b is not waited for
    wait_for_log(cluster["a"], "is back: given the 10 QoS 1/2 messages", timeout=10)
    publisher.close()
    subscriber = PahoCollector(cluster["b"], client_id, clean_session=False)
    assert [int(m.payload) for m in drain(subscriber, 10)] == list(range(10))
    subscriber.close()


def test_a_pool_worker_that_dies_alone_leaves_its_sessions_nothing_lost_of_the_others(
    cluster: dict[str, BrokerProcess],
) -> None:
    # Node b's worker 0 holds an offline persistent session homed at worker 1. It stops
    # (SIGSTOP): a takes it for gone and keeps what is published for the session. Killed,
    # it is restarted by its pool while worker 1 re-hosts the session; a gives the messages
    # to worker 0's next life, which hands them to worker 1, whose session gets them all.
    if pool_mode.workers == 1:
        pytest.skip("a worker dies alone only in a pool")
    client_id = next(c for c in (unique("keeper") for _ in range(100)) if home_of(c, 2) == 1)
    topic = f"alone/{unique('t')}"
    client, _ = connect_on_worker(cluster["b"], client_id, 0, 2, clean=False)
    subscribe_raw(client, 1, (topic, 1))
    client.send(Disconnect())
    client.close()
    wait_for_log(cluster["b"], f"client '{client_id}' (127.0.0.1", timeout=5)
    publisher = burst_publisher(cluster["a"], 10)
    pid = worker_pid(cluster["b"], 0)
    os.kill(pid, signal.SIGSTOP)
    wait_for_log_lines(cluster["a"], "cluster: no word from b.0", 2, timeout=5)
    publish_burst(publisher, topic, 10, qos=1)  # acknowledged: b.0 is not waited for
    os.kill(pid, signal.SIGKILL)
    wait_for_log(cluster["b"], f"worker 1: re-hosted the session of '{client_id}'", timeout=10)
    wait_for_log(cluster["a"], "is back: given the 10 QoS 1/2 messages", timeout=15)
    publisher.close()
    subscriber = PahoCollector(cluster["b"], client_id, clean_session=False)
    assert [int(m.payload) for m in drain(subscriber, 10)] == list(range(10))
    subscriber.close()


def test_qos2_crosses_nodes_exactly_once_to_an_offline_persistent_session(
    cluster: dict[str, BrokerProcess],
) -> None:
    client_id, topic, count = unique("keeper"), f"exact/{unique('t')}", 200
    persistent_subscriber(cluster["b"], client_id, topic, 2)
    publisher = burst_publisher(cluster["a"], count)
    publish_burst(publisher, topic, count, qos=2)
    publisher.close()
    subscriber = PahoCollector(cluster["b"], client_id, clean_session=False)
    got = drain(subscriber, count)
    assert [int(m.payload) for m in got] == list(range(count))
    assert {m.qos for m in got} == {2}
    subscriber.close()


def test_clean_subscribers_and_qos0_do_not_wait_for_other_nodes(
    cluster: dict[str, BrokerProcess],
) -> None:
    # Only a persistent session's QoS 1/2 messages are awaited: a clean session's node is
    # not waited for, even when it is silent; its message is sent again once it is back.
    topic = f"clean/{unique('t')}"
    subscriber = PahoCollector(cluster["b"], unique("sub"))
    assert subscriber.subscribe(topic, 1) == [1]
    publisher = PahoCollector(cluster["a"], unique("pub"))
    with paused(cluster["b"]):
        started = time.monotonic()
        publisher.publish(topic, b"x", 1)
        assert time.monotonic() - started < 0.5
    assert subscriber.next_message(10).payload == b"x"
    publisher.close()
    subscriber.close()
