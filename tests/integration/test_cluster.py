"""A cluster of three brokers over a real NATS server on loopback, every client on a real
socket (docs/cluster.md): publishes, retained messages and the nodes' comings and goings.

Each test runs with one process per node and with a pool of two workers per node (the
integration suite's two modes)."""

from __future__ import annotations

import contextlib
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    Will,
)
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from tests.support.admin import Admin, ctl, http_config
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess, pool_mode, start_broker
from tests.support.clients import (
    PahoCollector,
    connect_raw,
    expect_publish,
    subscribe_raw,
    unique,
)
from tests.support.cluster import (
    cluster_fixture,
    drain,
    kill_node,
    needs_nats_server,
    nodes_of,
    paused,
    restart_node,
)
from tests.support.nats_server import NatsServer
from tests.support.ports import free_port
from tests.support.raw_client import RawClient

pytestmark = needs_nats_server

NODES = ("a", "b", "c")
MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
MOSQUITTO_SUB = shutil.which("mosquitto_sub") or "/usr/bin/mosquitto_sub"
CONNECTION_LOGGER = '[[plugins]]\nmodule = "plugins.examples.connection_logger"\n'


cluster = cluster_fixture(*NODES)


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_a_publish_reaches_subscribers_on_every_node_once_and_in_order(
    cluster: dict[str, BrokerProcess], qos: int
) -> None:
    subscribers = {
        node: PahoCollector(broker, unique(f"sub-{node}")) for node, broker in cluster.items()
    }
    for subscriber in subscribers.values():
        assert subscriber.subscribe("orders/#", 2) == [2]
    publisher = PahoCollector(cluster["a"], unique("pub"))
    for index in range(60):
        publisher.publish(f"orders/{index % 3}", str(index).encode(), qos=qos)
    for node, subscriber in subscribers.items():
        got = drain(subscriber, 60)
        assert [int(m.payload) for m in got] == list(range(60)), node
        assert {m.qos for m in got} == {qos}, node
    for client in [publisher, *subscribers.values()]:
        client.close()


def test_a_subscription_is_in_force_on_every_node_once_its_suback_is_in(
    cluster: dict[str, BrokerProcess],
) -> None:
    # The SUBACK waits for the other nodes to apply the new route (a RoutesSync round over
    # NATS), so a publish on another node right after it is delivered.
    publisher = PahoCollector(cluster["c"], unique("pub"))
    for round_ in range(20):
        subscriber = PahoCollector(cluster["b"], unique("sub"))
        subscriber.subscribe(f"fresh/{round_}", 1)
        publisher.publish(f"fresh/{round_}", b"x", qos=1)
        assert subscriber.next_message(5).topic == f"fresh/{round_}"
        subscriber.close()
    publisher.close()


def test_wills_mqtt5_properties_and_mosquitto_clients_work_across_nodes(
    cluster: dict[str, BrokerProcess],
) -> None:
    base = unique("x")
    watcher = connect_raw(cluster["c"], unique("watch"), version=5)
    subscribe_raw(watcher, 1, (f"{base}/#", 1))
    # A will set on node a reaches node c with its properties when a's client drops.
    will_props = {PropertyId.CONTENT_TYPE: "text/plain", PropertyId.USER_PROPERTY: [("k", "v")]}
    dying = connect_raw(
        cluster["a"],
        unique("dying"),
        version=5,
        will=Will(f"{base}/will", b"gone", 1, False, will_props),
    )
    dying.sock.close()  # no DISCONNECT: the will is published [MQTT-3.1.2-8]
    will = expect_publish(watcher)
    assert (will.topic, will.payload) == (f"{base}/will", b"gone")
    assert will.properties[PropertyId.CONTENT_TYPE] == "text/plain"
    assert will.properties[PropertyId.USER_PROPERTY] == [("k", "v")]
    watcher.send(PubAck(will.packet_id))
    # A 5.0 PUBLISH's properties cross from node b to node c unchanged [MQTT-3.3.2-17/18].
    props = {
        PropertyId.USER_PROPERTY: [("a", "1"), ("a", "2")],
        PropertyId.RESPONSE_TOPIC: f"{base}/reply",
        PropertyId.CORRELATION_DATA: b"\x00\x01",
        PropertyId.PAYLOAD_FORMAT_INDICATOR: 1,
    }
    sender = connect_raw(cluster["b"], unique("props"), version=5)
    sender.send(Publish(f"{base}/props", b"p", 1, packet_id=7, properties=props))
    assert isinstance(sender.expect(), PubAck)
    got = expect_publish(watcher)
    assert got.topic == f"{base}/props"
    assert {k: got.properties[k] for k in props} == props
    watcher.send(PubAck(got.packet_id))
    # Debian's mosquitto clients: published on node a, received on node b.
    subscribe = [MOSQUITTO_SUB, "-h", "127.0.0.1", "-p", str(cluster["b"].port)]
    receiver = subprocess.Popen(
        [*subscribe, "-t", f"{base}/mosq", "-q", "1", "-C", "1", "-W", "10", "-V", "mqttv311"],
        stdout=subprocess.PIPE,
    )
    deadline = time.monotonic() + 10
    while receiver.poll() is None and time.monotonic() < deadline:
        publish = [MOSQUITTO_PUB, "-h", "127.0.0.1", "-p", str(cluster["a"].port)]
        subprocess.run(
            [*publish, "-t", f"{base}/mosq", "-m", "from-mosquitto_pub", "-q", "1", "-V", "5"],
            check=True,
            timeout=10,
        )
        with contextlib.suppress(subprocess.TimeoutExpired):
            receiver.wait(timeout=0.5)  # until mosquitto_sub's subscription is in
    out, _ = receiver.communicate(timeout=10)
    assert out == b"from-mosquitto_pub\n"
    for client in (watcher, sender):
        client.close()


def test_an_unsubscribed_node_gets_nothing_more(cluster: dict[str, BrokerProcess]) -> None:
    subscriber = PahoCollector(cluster["b"], unique("sub"))
    subscriber.subscribe("gone/#", 1)
    publisher = PahoCollector(cluster["a"], unique("pub"))
    publisher.publish("gone/1", b"before", qos=1)
    assert subscriber.next_message(5).payload == b"before"
    subscriber.client.unsubscribe("gone/#")
    time.sleep(0.5)  # the UNSUBACK; the route's withdrawal reaches node a within a loop turn
    publisher.publish("gone/1", b"after", qos=1)
    subscriber.assert_no_message(within=0.5)
    publisher.close()
    subscriber.close()


def test_retained_messages_are_kept_by_every_node(cluster: dict[str, BrokerProcess]) -> None:
    topic = f"state/{unique('t')}"
    setter = PahoCollector(cluster["a"], unique("pub"))
    setter.publish(topic, b"on", qos=1, retain=True)
    time.sleep(0.3)
    for node in ("b", "c"):
        reader = PahoCollector(cluster[node], unique("late"))
        reader.subscribe(topic, 1)
        message = reader.next_message(5)
        assert (message.payload, message.retain) == (b"on", True), node
        reader.close()
    clearer = PahoCollector(cluster["b"], unique("clear"))
    clearer.publish(topic, b"", qos=1, retain=True)
    time.sleep(0.3)
    for node in ("a", "c"):
        reader = PahoCollector(cluster[node], unique("late"))
        reader.subscribe(topic, 1)
        reader.assert_no_message(within=0.5)
        reader.close()
    setter.close()
    clearer.close()


def test_messages_published_on_the_same_node_are_not_delivered_twice(
    cluster: dict[str, BrokerProcess],
) -> None:
    # Workers of one node are linked by the pool, not the cluster: each message once.
    subscribers = [PahoCollector(cluster["a"], unique("sub")) for _ in range(4)]
    for subscriber in subscribers:
        subscriber.subscribe("local/#", 1)
    publisher = PahoCollector(cluster["a"], unique("pub"))
    for index in range(10):
        publisher.publish("local/x", str(index).encode(), qos=1)
    for subscriber in subscribers:
        assert [int(m.payload) for m in drain(subscriber, 10)] == list(range(10))
        subscriber.close()
    publisher.close()


def test_a_node_that_leaves_or_dies_loses_its_routes_and_comes_back(
    cluster: dict[str, BrokerProcess], tmp_path: Path, nats: NatsServer
) -> None:
    watcher = cluster["a"]
    cluster["c"].stop()  # a clean stop says so: dropped at once
    wait_for_log(watcher, "cluster: c.0 is leaving", timeout=5)
    kill_node(cluster["b"])  # silence: dropped after peer_timeout
    line = wait_for_log(watcher, "cluster: no word from b.0", timeout=5)
    assert "taken for gone, its routes dropped" in line
    # Back: linked again, and its subscribers get the other nodes' publishes.
    restarted = restart_node(tmp_path, "b")
    cluster["b"] = restarted
    wait_for_log(restarted, "cluster: linked to a.0", timeout=10)
    subscriber = PahoCollector(restarted, unique("sub"))
    subscriber.subscribe("back/#", 1)
    publisher = PahoCollector(watcher, unique("pub"))
    publisher.publish("back/1", b"again", qos=1)
    assert subscriber.next_message(5).payload == b"again"
    publisher.close()
    subscriber.close()


def test_sys_topics_stay_on_their_node(tmp_path: Path, nats: NatsServer) -> None:
    sys_on = "[sys]\ninterval = 1\n"
    with nodes_of(tmp_path, nats, {"a": sys_on, "b": sys_on}) as nodes:
        crowd = [PahoCollector(nodes["a"], unique("crowd")) for _ in range(5)]
        subscriber = PahoCollector(nodes["b"], unique("sub"))
        subscriber.subscribe("$SYS/broker/clients/connected", 0)
        seen = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                seen.append(subscriber.next_message(0.5).payload)
        # Node b's own count only (its retained 0 from before, then its one client): node
        # a's, with 5 clients, never arrives.
        assert b"1" in seen, seen
        assert set(seen) <= {b"0", b"1"}
        for client in crowd:
            client.close()
        subscriber.close()


def test_without_nats_connects_are_refused_and_past_the_lease_clients_are_closed(
    tmp_path: Path,
) -> None:
    # Consistency over availability: who owns a client id cannot be known without NATS, so
    # a CONNECT is refused with Server unavailable (3.1.1: code 3, 5.0: 0x88), and logged.
    # Connected clients carry on until the node's lease (its peer_timeout, after which the
    # other nodes take it for gone) runs out; then they are closed, 5.0 with DISCONNECT 0x9C
    # Use another server, to reconnect to a node still in the cluster.
    own = NatsServer()
    own.start()
    broker = None
    try:
        broker = start_broker(
            tmp_path,
            f'[cluster]\nname = "x"\nnode = "a"\nnats = ["{own.url}"]\nclaim_timeout = 1.0\n'
            "heartbeat = 0.5\npeer_timeout = 4.0\n",
        )
        before = connect_raw(broker, unique("before"))
        subscribe_raw(before, 1, ("t", 1))
        watcher = connect_raw(broker, unique("watcher"), version=5)
        lost = time.monotonic()  # before the stop: the node cannot lose NATS earlier
        own.stop()
        for version, code in ((4, 3), (5, ReasonCode.SERVER_UNAVAILABLE)):
            refused = RawClient(broker.host, broker.port, version=version)
            connack = refused.connect(unique("during"))
            assert isinstance(connack, ConnAck) and connack.reason_code == code
            refused.close()
        line = wait_for_log(broker, "cluster: refused CONNECT of", timeout=5)
        assert "is NATS (with JetStream) reachable" in line
        # Within the lease the connected client's local traffic goes on.
        before.send(Publish(topic="t", payload=b"local", qos=1, packet_id=2))
        got = [before.expect(5) for _ in range(2)]
        assert {type(p) for p in got} == {PubAck, Publish}
        assert time.monotonic() - lost < 4.0, "too slow to check before the lease ran out"
        # Past it, the node closes its clients.
        disconnect = watcher.expect(10)
        assert isinstance(disconnect, Disconnect), disconnect
        assert disconnect.reason_code == ReasonCode.USE_ANOTHER_SERVER
        assert time.monotonic() - lost >= 4.0
        assert before.is_closed_by_broker(5)
        line = wait_for_log(broker, "cluster: no NATS for", timeout=5)
        assert "clients are closed (use another server)" in line
        own.start()  # the same port: back, and CONNECTs are accepted again
        deadline = time.monotonic() + 15
        while True:
            client = RawClient(broker.host, broker.port)
            connack = client.connect(unique("after"))
            client.close()
            if connack.reason_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert connack.reason_code == 0
        wait_for_log(broker, "cluster: NATS is back: this node accepts CONNECTs again")
    finally:
        if broker is not None:
            broker.stop()
        own.remove()


def test_a_client_id_taken_over_on_another_node_is_closed_there(
    cluster: dict[str, BrokerProcess],
) -> None:
    client_id = unique("moving")
    first = connect_raw(cluster["a"], client_id, version=5)
    second = connect_raw(cluster["b"], client_id, version=5)
    # Node a closes its connection as a takeover [MQTT-3.1.4-2]: DISCONNECT 0x8E.
    disconnect = first.expect(5)
    assert isinstance(disconnect, Disconnect), disconnect
    assert disconnect.reason_code == ReasonCode.SESSION_TAKEN_OVER
    assert first.is_closed_by_broker(5)
    # The new owner serves it, across nodes.
    subscribe_raw(second, 1, ("moved/#", 1))
    publisher = PahoCollector(cluster["c"], unique("pub"))
    publisher.publish("moved/1", b"here", qos=1)
    assert expect_publish(second).payload == b"here"
    second.close()
    publisher.close()


def hook_counts(nodes: dict[str, BrokerProcess], client_id: str) -> tuple[int, int]:
    """The client.connected and client.disconnected hooks `client_id` ran on every node, as
    the connection logger plugin logged them."""
    logs = [broker.log() for broker in nodes.values()]
    connected = sum(log.count(f"client {client_id} connected from") for log in logs)
    disconnected = sum(log.count(f"client {client_id} disconnected from") for log in logs)
    return connected, disconnected


def test_a_connect_storm_over_three_nodes_ends_with_one_connection_per_id(
    tmp_path: Path, nats: NatsServer
) -> None:
    with nodes_of(tmp_path, nats, dict.fromkeys(NODES, CONNECTION_LOGGER)) as cluster:
        connect_storm(cluster)


def connect_storm(cluster: dict[str, BrokerProcess]) -> None:
    ids = [unique(f"storm{index}") for index in range(20)]
    brokers = list(cluster.values())
    clients: dict[str, list[RawClient]] = {client_id: [] for client_id in ids}
    where: dict[RawClient, int] = {}

    def connect_all(round_: int) -> None:
        for index, client_id in enumerate(ids):
            broker = brokers[(index + round_) % 3]
            client = RawClient(broker.host, broker.port)
            client.send(Connect(client_id=client_id, protocol_version=4, keepalive=60))
            clients[client_id].append(client)
            where[client] = broker.port

    threads = [threading.Thread(target=connect_all, args=(r,)) for r in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(4)  # every claim and hand-over settled (claim_timeout is 3 s)
    for client_id, connections in clients.items():
        open_ = [c for c in connections if not c.is_closed_by_broker(0.05)]
        ports = [where[c] for c in open_]
        assert len(open_) == 1, f"{client_id}: {len(open_)} of 10 connections open {ports}"
        for client in connections:
            client.close()
    # Every connection that ran client.connected ran client.disconnected, on whichever node.
    deadline = time.monotonic() + 10
    for client_id in ids:
        while (counts := hook_counts(cluster, client_id))[0] != counts[1]:
            assert time.monotonic() < deadline, f"{client_id}: connected, disconnected {counts}"
            time.sleep(0.1)
        assert counts[0] >= 1, client_id


def test_a_persistent_session_moves_to_the_node_its_client_resumes_on(
    cluster: dict[str, BrokerProcess],
) -> None:
    client_id = unique("roamer")
    first = connect_raw(cluster["a"], client_id, clean=False)
    subscribe_raw(first, 1, ("persist/#", 1))
    # One message in flight, never acknowledged: it goes out again on the new node.
    publisher = PahoCollector(cluster["c"], unique("pub"))
    publisher.publish("persist/0", b"0", qos=1)
    assert expect_publish(first).payload == b"0"
    first.send(Disconnect())
    first.close()
    time.sleep(0.3)
    for index in range(1, 6):  # queued for the offline session, on node a
        publisher.publish(f"persist/{index}", str(index).encode(), qos=1)
    time.sleep(0.3)
    second = connect_raw(cluster["b"], client_id, clean=False, session_present=True)
    got = [expect_publish(second) for _ in range(6)]
    assert [p.payload for p in got] == [str(i).encode() for i in range(6)]
    assert got[0].dup  # the in-flight one, resent [MQTT-4.4.0-1]
    for packet in got:
        second.send(PubAck(packet.packet_id))
    # Its routes moved too: a new publish reaches it on node b, and nothing is left on a.
    publisher.publish("persist/after", b"after", qos=1)
    assert expect_publish(second).payload == b"after"
    wait_for_log(cluster["a"], f"cluster: session of {client_id!r} moved to another node")
    line = wait_for_log(cluster["b"], f"cluster: session of {client_id!r} moved in")
    assert "(1 subscriptions, 6 messages)" in line
    second.expect_nothing(within=0.5)
    second.close()
    publisher.close()


def test_a_clean_start_on_another_node_discards_the_session(
    cluster: dict[str, BrokerProcess],
) -> None:
    client_id = unique("fresh")
    first = connect_raw(cluster["a"], client_id, clean=False)
    subscribe_raw(first, 1, ("old/#", 1))
    first.send(Disconnect())
    first.close()
    second = connect_raw(cluster["b"], client_id, clean=True, session_present=False)
    publisher = PahoCollector(cluster["c"], unique("pub"))
    publisher.publish("old/1", b"x", qos=1)
    second.expect_nothing(within=0.5)  # the old subscription went with the session
    second.close()
    third = connect_raw(cluster["a"], client_id, clean=False, session_present=False)
    third.close()
    publisher.close()


def test_the_admin_api_and_ctl_list_the_nodes(tmp_path: Path, nats: NatsServer) -> None:
    port = free_port()
    with nodes_of(tmp_path, nats, {"a": http_config(port), "b": ""}) as nodes:
        admin = Admin(nodes["a"], port)
        answer = admin.get("/api/v1/cluster")
        workers = list(range(pool_mode.workers))
        assert answer["data"] == [
            {"node": "a", "state": "this node", "workers": []},
            {"node": "b", "state": "linked", "workers": workers},
        ]
        assert answer["cluster"]["node"] == "a" and answer["cluster"]["nats_connected"]
        result = ctl(admin, "cluster")
        assert result.returncode == 0, result.stderr
        printed = result.stdout
        assert "this node" in printed and "linked" in printed, printed
        # Prometheus tells the nodes apart: every sample carries the node.
        metrics = admin.request("GET", "/metrics").body.decode()
        samples = [line for line in metrics.splitlines() if line and not line.startswith("#")]
        assert samples and all('node="a"' in line for line in samples), samples[:5]
        nodes["b"].stop()
        deadline = time.monotonic() + 5
        while len(admin.get("/api/v1/cluster")["data"]) > 1:  # b said it was leaving
            assert time.monotonic() < deadline, "node b still listed after its clean stop"
            time.sleep(0.1)


def test_retained_messages_outlive_their_node_and_reach_a_node_that_was_down(
    cluster: dict[str, BrokerProcess], tmp_path: Path
) -> None:
    topic = f"kept/{unique('t')}"
    cluster["c"].stop()  # down while the next one is set
    setter = PahoCollector(cluster["a"], unique("pub"))
    setter.publish(topic, b"from-a", qos=1, retain=True)
    setter.close()
    time.sleep(0.5)
    kill_node(cluster["a"])  # the node it was published on is lost
    # Node b restarts from its own store: it kept the message.
    cluster["b"].stop()
    cluster["b"] = restart_node(tmp_path, "b")
    reader = PahoCollector(cluster["b"], unique("late"))
    reader.subscribe(topic, 1)
    assert reader.next_message(5).payload == b"from-a"
    reader.close()
    # Node c, down when it was set, gets it from node b when it comes back.
    cluster["c"] = restart_node(tmp_path, "c")
    wait_for_log(cluster["c"], "cluster: linked to b.0", timeout=10)
    time.sleep(0.5)
    reader = PahoCollector(cluster["c"], unique("late"))
    reader.subscribe(topic, 1)
    message = reader.next_message(5)
    assert (message.payload, message.retain) == (b"from-a", True)
    reader.close()


def test_a_retained_message_cleared_while_a_node_was_down_stays_cleared_everywhere(
    cluster: dict[str, BrokerProcess], tmp_path: Path
) -> None:
    # Node c keeps the message in its store while it is down; the clear it missed must win
    # over it when it comes back, on c and on the nodes it sends its snapshot to.
    topic = f"kept/{unique('t')}"
    setter = PahoCollector(cluster["a"], unique("pub"))
    setter.publish(topic, b"soon-cleared", qos=1, retain=True)
    reader = PahoCollector(cluster["c"], unique("first"))
    reader.subscribe(topic, 1)
    assert reader.next_message(5).payload == b"soon-cleared"  # c has it
    reader.close()
    cluster["c"].stop()
    setter.publish(topic, b"", qos=1, retain=True)  # cleared while c is down
    setter.close()
    cluster["c"] = restart_node(tmp_path, "c")
    for other in ("a", "b"):
        wait_for_log(cluster["c"], f"cluster: linked to {other}.0", timeout=10)
    time.sleep(0.5)  # the snapshots cross
    for node, broker in cluster.items():
        reader = PahoCollector(broker, unique(f"late-{node}"))
        reader.subscribe(topic, 1)
        reader.assert_no_message(within=0.5)
        reader.close()


def test_a_paused_node_finds_its_client_ids_taken_and_closes_them_when_it_resumes(
    cluster: dict[str, BrokerProcess],
) -> None:
    client_id = unique("paused")
    first = connect_raw(cluster["a"], client_id)
    with paused(cluster["a"]):
        wait_for_log(cluster["b"], "cluster: no word from a.0", timeout=5)
        second = connect_raw(cluster["b"], client_id)  # node a is gone for b: not waited for
    # Node a hears the bucket again: the id is node b's, so a closes its connection.
    assert first.is_closed_by_broker(10)
    line = wait_for_log(cluster["a"], f"cluster: node b holds client id {client_id!r} now")
    assert "its session here ends" in line
    second.send(Subscribe(1, [Subscription("still/here", 1)]))
    assert isinstance(second.expect(5), SubAck)  # the new owner's connection is untouched
    second.close()


def test_nodes_whose_names_share_a_message_id_space_are_told_to_rename_one(
    tmp_path: Path, nats: NatsServer
) -> None:
    # "n8" and "n982" have the same 12 bits of CRC-32, so their workers count message ids
    # in the same spaces (core.message.message_id_floor): each node says so once linked.
    with nodes_of(tmp_path, nats, {"n8": "", "n982": "", "a": ""}) as nodes:
        line = wait_for_log(nodes["n8"], "count message ids in the same space")
        assert "'n8' and 'n982'" in line and "rename one of them" in line
        wait_for_log(nodes["n982"], "'n982' and 'n8' count message ids in the same space")
        assert "message ids in the same space" not in nodes["a"].log()
