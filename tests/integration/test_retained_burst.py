"""Retained bursts count against the subscriber's `max_write_buffer`.

A client that sends the same SUBSCRIBE many times in one write, reading nothing, asks for
the whole retained store once per SUBSCRIBE [MQTT-3.3.1-9]. The first burst fills its write
buffer; the QoS 0 messages of the later ones are dropped for it (`slow_consumer`, counted
and logged) instead of piling up in the worker, and another client's round trips are
unaffected.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import psutil

from mqtt import encode
from mqtt.packets import Connect, PubAck, Publish, Subscribe, Subscription
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, connect_raw, unique
from tests.support.workers import worker_pid

WRITE_BUFFER = 65536
CONFIG = f'[limits]\nmax_write_buffer = {WRITE_BUFFER}\n[store]\nkind = "memory"\n'
RETAINED = 64
RETAINED_SIZE = 16 * 1024  # 1 MiB of retained messages
SUBSCRIBES = 200  # 200 MiB of retained deliveries asked for in one write
RSS_GROWTH_LIMIT = 48 * 1024 * 1024


def test_repeated_subscribes_do_not_pile_up_retained_messages(
    broker_factory: Callable[..., BrokerProcess], workers: int
) -> None:
    broker = broker_factory(CONFIG)
    pids = [broker.process.pid] if workers == 1 else [worker_pid(broker, w) for w in range(workers)]
    processes = [psutil.Process(pid) for pid in pids]

    def rss() -> int:
        return sum(process.memory_info().rss for process in processes)

    prefix = unique("burst")
    publisher = connect_raw(broker, unique("retainer"))
    payload = b"r" * RETAINED_SIZE
    for packet_id in range(1, RETAINED + 1):
        topic = f"{prefix}/{packet_id}"
        publisher.send(Publish(topic, payload, qos=1, packet_id=packet_id, retain=True))
        assert publisher.expect() == PubAck(packet_id)
    rss_before = rss()
    asker = socket.create_connection((broker.host, broker.port), timeout=5)
    asker.sendall(encode(Connect(client_id=unique("asker")), 4))
    subscribe = b"".join(
        encode(Subscribe(packet_id, [Subscription(f"{prefix}/#", 0)]), 4)
        for packet_id in range(1, SUBSCRIBES + 1)
    )
    asker.sendall(subscribe)  # ... and reads nothing
    line = wait_for_log(broker, "QoS 0 to a subscriber that is not reading fast enough", 10)
    assert "for client 'asker-" in line, line
    peak = rss_before
    latencies = []
    subscriber = PahoCollector(broker, unique("bystander"))
    subscriber.subscribe("bystander/topic", 1)
    deadline = time.monotonic() + 3
    packet_id = 0
    while time.monotonic() < deadline:
        packet_id += 1
        started = time.monotonic()
        publisher.send(Publish("bystander/topic", b"hi", qos=1, packet_id=packet_id))
        assert publisher.expect() == PubAck(packet_id)
        subscriber.next_message(timeout=5)
        latencies.append(time.monotonic() - started)
        peak = max(peak, rss())
        time.sleep(0.1)
    growth = peak - rss_before
    assert growth < RSS_GROWTH_LIMIT, f"worker RSS grew by {growth / 1e6:.0f} MB"
    assert max(latencies) < 1.0, f"round trips slowed down: {latencies}"
    subscriber.close()
    publisher.close()
    asker.close()
