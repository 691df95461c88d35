"""The cluster's faults (docs/cluster.md "Faults"): brokers over a three-server NATS
JetStream cluster on loopback, a NATS server or two killed, a node killed behind HAProxy, a
node cut off from NATS by a proxy; every client on a real socket.

Each test runs with one process per node and with a pool of two workers per node (the
integration suite's two modes)."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from mqtt.packets import ConnAck, Connect, Disconnect, PubAck, Publish
from mqtt.reason_codes import ReasonCode
from tests.support.broker_config import wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess, pool_mode, start_broker
from tests.support.clients import (
    PahoCollector,
    connect_raw,
    expect_publish,
    subscribe_raw,
    unique,
)
from tests.support.cluster import (
    HEARTBEAT,
    PEER_TIMEOUT,
    drain,
    kill_node,
    linked,
    needs_nats_server,
    node_config,
    nodes_of,
    restart_node,
)
from tests.support.haproxy import CHECK_INTERVAL, HAPROXY, HaProxy
from tests.support.nats_server import NatsCluster, NatsServer
from tests.support.ports import free_port
from tests.support.raw_client import RawClient
from tests.support.tcp_proxy import TcpProxy

pytestmark = needs_nats_server

NODES = ("a", "b", "c")
RESUME = 5.0  # seconds after a NATS server's death within which traffic across nodes resumes


@pytest.fixture
def nats() -> Iterator[NatsCluster]:
    servers = NatsCluster()
    servers.start()
    yield servers
    servers.remove()


def connect_code(broker: BrokerProcess, version: int = 4, timeout: float = 5.0) -> int:
    """The CONNACK's return code (5.0: reason code) for a new clean client id."""
    client = RawClient(broker.host, broker.port, version=version)
    try:
        client.send(Connect(client_id=unique("probe"), protocol_version=version, keepalive=60))
        connack = client.expect(timeout)
        assert isinstance(connack, ConnAck), connack
        return int(connack.reason_code)
    finally:
        client.close()


def accepted_within(broker: BrokerProcess, seconds: float) -> float:
    """Seconds until a CONNECT is accepted; AssertionError past `seconds`."""
    start = time.monotonic()
    while connect_code(broker) != 0:
        assert time.monotonic() - start < seconds, f"CONNECTs still refused after {seconds} s"
        time.sleep(0.2)
    return time.monotonic() - start


@contextlib.contextmanager
def serving(
    tmp_path: Path, nats: NatsCluster, extra: dict[str, str], ports: dict[str, int] | None = None
) -> Iterator[dict[str, BrokerProcess]]:
    """`nodes_of`, once each node accepts CONNECTs: a fresh bucket's stream has no leader
    for its first fraction of a second, and a claim shorter than that is refused."""
    with nodes_of(tmp_path, nats, extra, ports) as nodes:
        for broker in nodes.values():
            accepted_within(broker, 10)
        yield nodes


def test_one_nats_server_of_three_killed_traffic_resumes_and_connects_go_on(
    nats: NatsCluster, tmp_path: Path
) -> None:
    # The server killed is the one node a's worker 0 talks to, and made the leader of the
    # bucket's stream first: the worst one to lose.
    claim = "claim_timeout = 10.0\n"  # longer than JetStream's election of a new leader
    with serving(tmp_path, nats, {"a": claim, "b": claim}) as nodes:
        local = PahoCollector(nodes["a"], unique("local"))
        local.subscribe("flow/#", 1)
        remote = PahoCollector(nodes["b"], unique("remote"))
        remote.subscribe("flow/#", 1)
        publisher = PahoCollector(nodes["a"], unique("pub"))
        victim = nats.server_of("/a.0")
        nats.lead(bucket_stream(tmp_path), victim)
        published = 0  # messages, numbered 0, 1, ...
        acked: list[int] = []  # the numbers whose PUBACK came
        connecting: list[tuple[int, float]] = []  # a CONNECT made as the server dies
        killed_at = 0.0
        start = time.monotonic()
        while time.monotonic() - start < 1.0 + RESUME + 2.0:
            if not killed_at and time.monotonic() - start > 1.0:
                victim.kill()
                killed_at = time.monotonic()
                threading.Thread(target=_timed_connect, args=(nodes["b"], connecting)).start()
            info = publisher.client.publish("flow/x", str(published).encode(), qos=1)
            published += 1
            info.wait_for_publish(5)
            if info.is_published():
                acked.append(published - 1)
            time.sleep(0.02)
        # Traffic across nodes has resumed: the last message, published RESUME + 2 s after
        # the kill, reaches node b within a second or two (after those before it).
        assert acked[-1] == published - 1
        arrived: list[int] = []
        while published - 1 not in arrived:
            arrived.append(int(remote.next_message(2.0).payload))
        # On each node, the publisher's and the other (whose batches went through the
        # dead server and are sent again): every acknowledged message, once, in order.
        for where, subscriber in (("on the node", local), ("across nodes", remote)):
            got = _all_of(subscriber) if subscriber is local else arrived + _all_of(subscriber)
            assert set(acked) <= set(got), (where, sorted(set(acked) - set(got))[:20])
            assert got == sorted(set(got)), f"duplicated or out of order {where}"
        # The bucket keeps a quorum (two of three): the CONNECT made as its leader died was
        # accepted once JetStream elected another, within claim_timeout; the next at once.
        deadline = time.monotonic() + 15
        while not connecting:
            assert time.monotonic() < deadline, "the CONNECT made during the election hangs"
            time.sleep(0.1)
        code, took = connecting[0]
        assert code == 0, f"CONNECT refused during the election ({took:.1f} s)"
        for broker in nodes.values():
            for _ in range(3):
                assert connect_code(broker) == 0
        for client in (local, remote, publisher):
            client.close()


def bucket_stream(tmp_path: Path) -> str:
    """The JetStream stream of the cluster's bucket (the nodes' cluster name is random)."""
    config = node_config(tmp_path, "a")
    name = config.split('name = "', 1)[1].split('"', 1)[0]
    return f"KV_mqtt-{name}-clients"


def _timed_connect(broker: BrokerProcess, into: list[tuple[int, float]]) -> None:
    start = time.monotonic()
    code = connect_code(broker, timeout=15)
    into.append((code, time.monotonic() - start))


def _all_of(collector: PahoCollector) -> list[int]:
    """Every message's index until nothing more comes for a second."""
    got: list[int] = []
    try:
        while True:
            got.append(int(collector.next_message(1.0).payload))
    except queue.Empty:
        return got


def test_two_nats_servers_of_three_killed_connects_are_refused_until_the_quorum_is_back(
    nats: NatsCluster, tmp_path: Path
) -> None:
    # Without a quorum the bucket cannot say who owns a client id: a CONNECT is refused with
    # Server unavailable (3.1.1: return code 3, 5.0: 0x88) and logged; connected clients
    # keep their traffic, on their node and across (core NATS needs no quorum: the nodes
    # stay linked through the third server).
    claim = "claim_timeout = 1.0\n"
    with serving(tmp_path, nats, {"a": claim, "b": claim}) as nodes:
        before = connect_raw(nodes["a"], unique("before"))
        subscribe_raw(before, 1, ("own/#", 1))
        other = PahoCollector(nodes["b"], unique("other"))
        other.subscribe("own/#", 1)
        for server in nats.servers[:2]:
            server.kill()
        for node, broker in nodes.items():
            for version, code in ((4, 3), (5, ReasonCode.SERVER_UNAVAILABLE)):
                assert connect_code(broker, version) == code, node
            line = wait_for_log(broker, "cluster: refused CONNECT of", timeout=5)
            assert "is NATS (with JetStream) reachable and in quorum?" in line
        before.send(Publish(topic="own/1", payload=b"local", qos=1, packet_id=2))
        got = [before.expect(5) for _ in range(2)]
        assert {type(p) for p in got} == {PubAck, Publish}
        assert other.next_message(5).payload == b"local"
        for server in nats.servers[:2]:
            server.start()  # the same ports and stores: the quorum is back
        for broker in nodes.values():
            accepted_within(broker, 20)
        before.send(Publish(topic="own/2", payload=b"still", qos=1, packet_id=3))
        got = [before.expect(5) for _ in range(2)]
        assert {type(p) for p in got} == {PubAck, Publish}
        assert other.next_message(5).payload == b"still"
        before.close()
        other.close()


class Rider:
    """A paho client through the load balancer, as an application writes one: a persistent
    session (clean session 0), reconnecting by itself, subscribing again whenever the
    CONNACK says the session is not present."""

    def __init__(self, proxy: HaProxy, client_id: str, topic_filter: str) -> None:
        self.client_id = client_id
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.session_present: list[bool] = []  # of each CONNACK
        self._filter = topic_filter
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False
        )
        self.client.reconnect_delay_set(min_delay=1, max_delay=1)
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self._subscribed = threading.Event()
        self.client.on_subscribe = lambda *_args: self._subscribed.set()
        self.client.connect(proxy.host, proxy.port, keepalive=30)
        self.client.loop_start()
        assert self._subscribed.wait(5), "no SUBACK through the load balancer"

    def _on_connect(self, client: paho.Client, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            return  # paho tries again
        self.session_present.append(bool(flags.session_present))
        if not flags.session_present:
            client.subscribe(self._filter, 1)

    def got_after(self, index: int, timeout: float) -> bool:
        """Whether a message numbered `index` or later arrives within `timeout`."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                if int(self.messages.get(timeout=left).payload) >= index:
                    return True
            except queue.Empty:
                return False
        return False

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.mark.skipif(not Path(HAPROXY).exists(), reason="haproxy not installed (Debian package)")
def test_a_node_killed_behind_haproxy_its_clients_carry_on_and_it_comes_back_with_its_sessions(
    nats: NatsCluster, tmp_path: Path
) -> None:
    ports = {node: free_port() for node in NODES}
    with serving(tmp_path, nats, dict.fromkeys(NODES, ""), ports) as nodes:
        proxy = HaProxy(tmp_path, ports)
        proxy.start()
        try:
            _carry_on_and_come_back(nodes, proxy, ports, tmp_path)
        finally:
            proxy.stop()


def _carry_on_and_come_back(
    nodes: dict[str, BrokerProcess], proxy: HaProxy, ports: dict[str, int], tmp_path: Path
) -> None:
    # An offline persistent session on node a, with messages queued for it there.
    parked_id = unique("parked")
    parked = connect_raw(nodes["a"], parked_id, clean=False)
    subscribe_raw(parked, 1, ("parked/#", 1))
    parked.send(Disconnect())
    parked.close()
    publisher = PahoCollector(nodes["c"], unique("pub"))
    for index in range(3):
        publisher.publish(f"parked/{index}", str(index).encode(), qos=1)
    # Riders through the balancer, each hearing the others' publishes, until one is on node
    # a: HAProxy's round robin spreads them, but not always one per node (it once put two of
    # three on node a and none on b).
    riders: list[Rider] = []
    on_a: list[Rider] = []
    while len(riders) < 3 or (not on_a and len(riders) < 9):
        riders.append(Rider(proxy, unique(f"rider{len(riders)}"), "ride/#"))
        on_a = [r for r in riders if f"client {r.client_id!r} (" in nodes["a"].log()]
    assert on_a, "HAProxy put none of nine riders on node a"
    publisher.publish("ride/x", b"0", qos=1)
    assert all(rider.got_after(0, 5) for rider in riders)
    time.sleep(0.3)  # node a stored the queued messages
    kill_node(nodes["a"])
    killed_at = time.monotonic()
    # A rider that was on node a reconnects through HAProxy to b or c: its session stayed on
    # the dead node, so the CONNACK says session present 0 and it subscribes again.
    number, first_message = 1, 1
    waiting = list(riders)
    while waiting:
        assert time.monotonic() - killed_at < 10, "a rider did not carry on within 10 s"
        publisher.publish("ride/x", str(number).encode(), qos=1)
        waiting = [rider for rider in waiting if not rider.got_after(first_message, 0.3)]
        number += 1
    moved = [rider for rider in riders if len(rider.session_present) > 1]
    assert moved == on_a, [rider.session_present for rider in riders]  # those, and only those
    for rider in moved:
        assert rider.session_present == [False, False]
        # The node it came to says why it started afresh.
        without = f"{rider.client_id!r} resumes here without its session: node a, which holds it"
        came_to = [node for node in ("b", "c") if without in nodes[node].log()]
        assert len(came_to) == 1, [nodes[node].log() for node in ("b", "c")]
        assert "its offline sessions are lost with its store" in nodes[came_to[0]].log()
    # The others dropped the dead node's routes after peer_timeout of silence (checked
    # every heartbeat): "no word from a.0 for 1.2 s: taken for gone, its routes dropped".
    for node in ("b", "c"):
        line = wait_for_log(nodes[node], "cluster: no word from a.0", timeout=5)
        assert "taken for gone, its routes dropped" in line
        silence = float(line.split(" for ", 1)[1].split(" s:", 1)[0])
        assert PEER_TIMEOUT <= silence < PEER_TIMEOUT + 3 * HEARTBEAT, line
    # Back on its port, from its store: it ends its copies of the moved riders' sessions
    # (the bucket names another node), and the parked session is there with its messages.
    nodes["a"] = restart_node(tmp_path, "a", ports["a"])
    linked(nodes)
    for rider in moved:
        wait_for_log(nodes["a"], f"holds client id {rider.client_id!r} now", timeout=5)
    # Nobody asks for those copies (their clients started afresh elsewhere): twice
    # claim_timeout later node a deletes them from its store.
    for rider in moved:
        discarded = f"the stored session of {rider.client_id!r} is discarded"
        wait_for_log(nodes["a"], discarded, timeout=10)
    time.sleep(3 * CHECK_INTERVAL)  # HAProxy's checks see node a up again
    resumed = RawClient(proxy.host, proxy.port)
    connack = resumed.connect(parked_id, clean=False)
    assert isinstance(connack, ConnAck) and connack.reason_code == 0, connack
    assert connack.session_present
    got = [expect_publish(resumed) for _ in range(3)]
    assert [p.payload for p in got] == [b"0", b"1", b"2"]
    for packet in got:
        resumed.send(PubAck(packet.packet_id))
    resumed.close()
    # Restarted once more, node a no longer has the discarded copy in its store.
    nodes["a"].stop()
    nodes["a"] = restart_node(tmp_path, "a", ports["a"])
    linked(nodes)
    time.sleep(1)  # the watch's first records are in
    for rider in moved:
        assert f"holds client id {rider.client_id!r}" not in nodes["a"].log()
    for rider in riders:
        rider.close()
    publisher.close()


def test_a_node_cut_off_from_nats_fences_itself_while_the_others_serve(tmp_path: Path) -> None:
    # A silent partition between node c and NATS (a proxy that drops every byte and resets
    # nothing): past its lease c closes its clients (5.0: DISCONNECT 0x9C Use another
    # server) and refuses CONNECTs, as the others take it for gone and serve on.
    server = NatsServer()
    server.start()
    proxy = TcpProxy(server.port)
    proxy.start()
    try:
        with nodes_of(tmp_path, server, {"a": "", "b": ""}) as nodes:
            config = node_config(tmp_path, "a", "c").replace(server.url, proxy.url)
            (tmp_path / "c").mkdir()
            nodes["c"] = start_broker(tmp_path / "c", config)
            linked(nodes)
            watcher = connect_raw(nodes["c"], unique("watcher"), version=5)
            subscriber = PahoCollector(nodes["a"], unique("sub"))
            subscriber.subscribe("keep/#", 1)
            publisher = PahoCollector(nodes["b"], unique("pub"))
            proxy.cut()
            cut_at = time.monotonic()
            disconnect = watcher.expect(5)
            assert isinstance(disconnect, Disconnect), disconnect
            assert disconnect.reason_code == ReasonCode.USE_ANOTHER_SERVER
            # peer_timeout and a heartbeat after the last answer from NATS, and a probe
            assert time.monotonic() - cut_at < PEER_TIMEOUT + 2 * HEARTBEAT + 1.0
            # Every worker of c on its own lease (a CONNECT still claiming when its worker's
            # lease runs out has its connection closed): then refused at once.
            lines = wait_for_log_lines(nodes["c"], "cluster: no NATS for", pool_mode.workers, 1)
            assert all("clients are closed (use another server)" in line for line in lines)
            assert connect_code(nodes["c"]) == 3
            wait_for_log(nodes["a"], "cluster: no word from c.0", timeout=1)
            assert connect_code(nodes["a"]) == 0
            publisher.publish("keep/1", b"on", qos=1)
            assert subscriber.next_message(5).payload == b"on"
            proxy.heal()
            wait_for_log(nodes["c"], "cluster: NATS is back: this node accepts CONNECTs again", 15)
            accepted_within(nodes["c"], 10)
            subscriber.close()
            publisher.close()
    finally:
        proxy.close()
        server.remove()


@pytest.mark.parametrize("qos", [1, 2])
def test_what_a_killed_node_had_stored_without_confirming_is_not_delivered_twice(
    tmp_path: Path, qos: int
) -> None:
    # Node b hears NATS but NATS stops hearing b (a proxy that drops what b sends): b
    # stores what a forwards to its offline persistent session, and its confirmations are
    # lost. a takes b for gone and acknowledges the publisher; b is killed. Restarted, b
    # is given those messages again, and its session, restored with them, takes each once.
    server = NatsServer()
    server.start()
    proxy = TcpProxy(server.port)
    proxy.start()
    try:
        with nodes_of(tmp_path, server, {"a": ""}) as nodes:
            config = node_config(tmp_path, "a", "b").replace(server.url, proxy.url)
            (tmp_path / "b").mkdir()
            nodes["b"] = start_broker(tmp_path / "b", config)
            linked(nodes)
            client_id, topic = unique("keeper"), f"stored/{unique('t')}"
            subscriber = PahoCollector(nodes["b"], client_id, clean_session=False)
            assert subscriber.subscribe(topic, qos) == [qos]
            subscriber.close()
            publisher = PahoCollector(
                nodes["a"],
                unique("pub"),
                setup=lambda client: client.max_inflight_messages_set(20),
            )
            for index in range(5):  # stored by b and confirmed
                publisher.publish(topic, str(index).encode(), qos)
            proxy.mute()
            sent = [publisher.client.publish(topic, str(i).encode(), qos) for i in range(5, 25)]
            for info in sent:  # once a takes b for gone
                info.wait_for_publish(10)
                assert info.is_published()
            publisher.close()
            kill_node(nodes["b"])
            proxy.heal()
            nodes["b"] = start_broker(tmp_path / "b", config)
            linked(nodes)
            wait_for_log(nodes["b"], "gave 20 messages for the persistent sessions", timeout=5)
            subscriber = PahoCollector(nodes["b"], client_id, clean_session=False)
            got = drain(subscriber, 25)
            assert [int(m.payload) for m in got] == list(range(25))
            subscriber.close()
    finally:
        proxy.close()
        server.remove()
