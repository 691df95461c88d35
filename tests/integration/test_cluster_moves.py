"""A persistent session moving between nodes while a stream flows (docs/cluster.md
"Deliveries during a move"): what reaches the old node after the session left it is
forwarded to the new one, and what the new node's routes bring meanwhile is held, so the
subscriber misses nothing, gets QoS 2 exactly once, and each publisher's order holds.

Real brokers over a real nats-server on loopback, real paho clients; each test runs with one
process per node and with a pool of two workers per node (the integration suite's modes)."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, unique
from tests.support.cluster import cluster_fixture, needs_nats_server

pytestmark = needs_nats_server

cluster = cluster_fixture("a", "b", "c")

MOVES = ("b", "a", "b", "a")  # the subscriber's nodes after it starts on a
FORWARDED = re.compile(r"session '([^']+)' moved to worker \d+: (\d+) deliveries")


class _Subscriber:
    """One paho client that reconnects from node to node with its session (clean session
    0, or 5.0 with a session expiry): one client object, so a QoS 2 message whose PUBREL
    comes on the next connection is still known to it, as a real client's would be."""

    def __init__(self, node: BrokerProcess, client_id: str, protocol: int) -> None:
        self.numbers: list[int] = []
        self._connected = threading.Event()
        self.session_present: list[bool] = []
        v5 = protocol == paho.MQTTv5
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=protocol,
            clean_session=None if v5 else False,
        )
        self._properties: Any = None
        if v5:
            self._properties = Properties(PacketTypes.CONNECT)
            self._properties.SessionExpiryInterval = 300
        self.client.on_message = lambda _c, _u, m: self.numbers.append(int(m.payload))
        self.client.on_connect = self._on_connect
        self._v5 = v5
        self._connect(node, first=True)

    def _on_connect(self, _c: Any, _u: Any, flags: Any, _reason: Any, _p: Any) -> None:
        self.session_present.append(bool(flags.session_present))
        self._connected.set()

    def _connect(self, node: BrokerProcess, first: bool = False) -> None:
        self._connected.clear()
        if self._v5:
            self.client.connect(
                node.host,
                node.port,
                keepalive=30,
                clean_start=first,
                properties=self._properties,
            )
        else:
            self.client.connect(node.host, node.port, keepalive=30)
        self.client.loop_start()
        assert self._connected.wait(10), "no CONNACK within 10 s"

    def subscribe(self, topic: str, qos: int) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda *_args: done.set()
        self.client.subscribe(topic, qos)
        assert done.wait(5)

    def move_to(self, node: BrokerProcess) -> None:
        self.client.disconnect()
        self.client.loop_stop()
        self._connect(node)
        assert self.session_present[-1], "the session did not move with its client"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _stream(
    publisher: PahoCollector, topic: str, qos: int, stop: threading.Event, acked: list[int]
) -> threading.Thread:
    """Publish 0, 1, 2, ... one at a time until `stop`; `acked` gets each number whose
    PUBACK/PUBCOMP came."""

    def run() -> None:
        number = 0
        while not stop.is_set():
            info = publisher.client.publish(topic, str(number).encode(), qos)
            info.wait_for_publish(10)
            assert info.is_published(), f"message {number} not acknowledged in 10 s"
            acked.append(number)
            number += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("qos", "protocol"), [(1, paho.MQTTv311), (2, paho.MQTTv5)], ids=["qos1-3.1.1", "qos2-5.0"]
)
def test_a_session_moving_between_nodes_misses_nothing_of_a_stream(
    cluster: dict[str, BrokerProcess], qos: int, protocol: int
) -> None:
    """A persistent subscriber moves a -> b -> a -> b -> a while a publisher on c streams
    numbers: every acknowledged number arrives, in order, QoS 2 exactly once. Messages
    reach the old node after each move (the log says how many it forwarded; over the moves
    some must have, or the test proved nothing)."""
    client_id, topic = unique("moving"), f"moves/{unique('t')}"
    subscriber = _Subscriber(cluster["a"], client_id, protocol)
    subscriber.subscribe(topic, qos)
    publisher = PahoCollector(cluster["c"], unique("streamer"))
    stop, acked = threading.Event(), []
    thread = _stream(publisher, topic, qos, stop, acked)
    try:
        for node in MOVES:
            time.sleep(0.4)
            subscriber.move_to(cluster[node])
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(timeout=15)
    assert not thread.is_alive(), "the publisher's last publish was not acknowledged"
    total = len(acked)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(set(subscriber.numbers)) < total:
        time.sleep(0.05)
    time.sleep(0.3)  # and nothing more
    subscriber.close()
    publisher.close()
    received = list(subscriber.numbers)
    first_seen = list(dict.fromkeys(received))
    assert total > 100, total
    missing = sorted(set(range(total)) - set(first_seen))
    assert not missing, f"{len(missing)} of {total} acknowledged messages lost: {missing[:20]}"
    assert first_seen == list(range(total)), "out of publish order"
    if qos == 2:
        duplicates = [n for n in received if received.count(n) > 1]
        assert received == first_seen, f"QoS 2 delivered twice: {sorted(set(duplicates))[:20]}"
    logs = cluster["a"].log() + cluster["b"].log()
    forwarded = [int(n) for cid, n in FORWARDED.findall(logs) if cid == client_id]
    assert len(forwarded) == len(MOVES), logs[-3000:]
    assert sum(forwarded) > 0, forwarded
