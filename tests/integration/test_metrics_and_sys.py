"""`/metrics` and `$SYS` against a running broker: both must report the traffic a test made.

Each test has a broker of its own, so its counters hold exactly the test's traffic. In a
pool the subscriber is on another worker than the publisher and the admin API (worker 0):
the figures must be the pool's.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
from prometheus_client.parser import text_string_to_metric_families

from mqtt.packets import Disconnect, Publish
from tests.support.admin import API_KEY, Admin, http_config
from tests.support.broker_config import running_broker
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw
from tests.support.ports import free_port
from tests.support.raw_client import RawClient
from tests.support.workers import connect_on_worker, connections_of


def samples(
    admin: Admin, key: str | None = API_KEY
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics by (name, sorted labels); the text must parse."""
    answer = admin.request("GET", "/metrics", key=key)
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.body.decode())
        for sample in family.samples
    }


def make_traffic(broker: BrokerProcess, workers: int) -> tuple[RawClient, RawClient, int]:
    """A subscriber to t/# (QoS 1) on the pool's last worker, 3 QoS 0 and 2 QoS 1 messages
    to it from a publisher on worker 0, 1 to nobody; and how many CONNECTs that took."""
    subscriber, tries = connect_on_worker(broker, "metrics-sub", workers - 1, workers, version=5)
    subscribe_raw(subscriber, 1, ("t/#", 1))
    publisher, more = connect_on_worker(broker, "metrics-pub", 0, workers)
    for n in range(3):
        publisher.send(Publish(topic="t/a", payload=b"x" * n, qos=0))
    for packet_id in (1, 2):
        publisher.send(Publish(topic="t/b", payload=b"y", qos=1, packet_id=packet_id))
        assert publisher.expect().packet_id == packet_id  # PUBACK
    publisher.send(Publish(topic="nobody/here", payload=b"z", qos=0))
    for _ in range(5):
        expect_publish(subscriber)
    return subscriber, publisher, tries + more


def test_metrics_parse_and_count_the_traffic(tmp_path: Path, workers: int) -> None:
    port = free_port()
    with running_broker(tmp_path, http_config(port, "") + "[sys]\ninterval = 0\n") as broker:
        admin = Admin(broker, port)
        subscriber, publisher, connects = make_traffic(broker, workers)
        deadline = time.monotonic() + 5
        while True:
            values = samples(admin, key=None)  # /metrics needs no credentials by default
            if (
                values.get(("mqtt_broker_messages_dropped_total", (("reason", "no_subscribers"),)))
                == 1
            ):
                break
            assert time.monotonic() < deadline, values
            time.sleep(0.05)
        received = {
            qos: values[("mqtt_broker_messages_received_total", (("qos", str(qos)),))]
            for qos in (0, 1, 2)
        }
        assert received == {0: 4, 1: 2, 2: 0}
        assert values[("mqtt_broker_messages_sent_total", ())] == 5
        assert values[("mqtt_broker_connections", ())] == 2
        assert values[("mqtt_broker_connections_accepted_total", ())] == connects
        by_version = {
            version: values[
                ("mqtt_broker_connections_by_protocol", (("protocol_version", version),))
            ]
            for version in ("3", "4", "5")
        }
        assert by_version == {"3": 0, "4": 1, "5": 1}
        listener = f"tcp 127.0.0.1:{broker.port}"
        assert values[("mqtt_broker_listener_connections", (("listener", listener),))] == 2
        assert values[("mqtt_broker_subscriptions", ())] == 1
        assert values[("mqtt_broker_sessions", ())] == 2
        assert values[("mqtt_broker_bytes_received_total", ())] > 0
        assert values[("mqtt_broker_bytes_sent_total", ())] > 0
        # CPU and RSS stay per worker process, labelled with the worker.
        for worker in range(workers):
            label = (("worker", str(worker)),)
            assert values[("mqtt_broker_process_resident_memory_bytes", label)] > 10_000_000
            assert values[("mqtt_broker_process_cpu_seconds_total", label)] > 0
        # The store (SQLite by default) has a commit-latency histogram.
        assert ("mqtt_broker_store_commit_seconds_count", ()) in values
        subscriber.close()
        publisher.close()


def test_metrics_can_require_credentials(tmp_path: Path) -> None:
    port = free_port()
    with running_broker(tmp_path, http_config(port, "metrics_auth = true")) as broker:
        admin = Admin(broker, port)
        assert admin.request("GET", "/metrics", key=None).status == 401
        assert ("mqtt_broker_connections", ()) in samples(admin)


def read_sys(subscriber: RawClient, wanted: set[str], timeout: float = 5.0) -> dict[str, str]:
    """The latest value of each `wanted` $SYS topic, read from live updates (the retained
    values a subscription gets first may predate it) until all were seen."""
    values: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while not wanted <= values.keys():
        packet = subscriber.expect(max(0.1, deadline - time.monotonic()))
        if isinstance(packet, Publish) and not packet.retain:
            values[packet.topic] = packet.payload.decode()
    return values


def test_sys_values_match_known_traffic(tmp_path: Path, workers: int) -> None:
    """In a pool, worker 0 publishes the pool's figures; the watcher is on the last worker."""
    port = free_port()
    config = http_config(port) + "[sys]\ninterval = 0.3\n"
    with running_broker(tmp_path, config) as broker:
        subscriber, publisher, _connects = make_traffic(broker, workers)
        retainer = connect_raw(broker, "metrics-retain")
        retainer.send(Publish(topic="kept/1", payload=b"r", qos=0, retain=True))
        retainer.send(Disconnect())
        retainer.close()
        time.sleep(0.7)  # at least one update after the traffic
        watcher, _ = connect_on_worker(broker, "sys-watcher", workers - 1, workers)
        subscribe_raw(watcher, 1, ("$SYS/broker/#", 0))
        prefix = "$SYS/broker/"
        names = {
            "messages/received",
            "publish/messages/dropped",
            "clients/connected",
            "subscriptions/count",
            "retained messages/count",
            "version",
            "uptime",
            "bytes/received",
            "load/messages/received/1min",
            "heap/current",
            "store/bytes",
        }
        # Live updates after the subscription: read until one counts the watcher and its
        # subscription (an update may be taken after the watcher's CONNECT was counted but
        # before its SUBSCRIBE reached the route table).
        deadline = time.monotonic() + 5
        while True:
            values = read_sys(watcher, {prefix + name for name in names})
            if (
                values[prefix + "clients/connected"] == "3"
                and values[prefix + "subscriptions/count"] == "2"
            ):
                break
            assert time.monotonic() < deadline, values
        assert values[prefix + "messages/received"] == "7"  # 6 published and the retained one
        # nobody/here, and kept/1: retained, but no subscriber got it
        assert values[prefix + "publish/messages/dropped"] == "2"
        assert values[prefix + "subscriptions/count"] == "2"  # t/#, and $SYS/broker/#
        # kept/1 and the $SYS/broker topics themselves, retained at the previous update: an
        # update (0.3 s) later every topic was seen
        seen = set(values)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            seen.add(expect_publish(watcher).topic)
        sys_topics = sum(1 for topic in seen if topic.startswith(prefix))
        assert sys_topics == 34
        assert values[prefix + "retained messages/count"] == str(1 + sys_topics)
        assert values[prefix + "version"].startswith("actor-mqtt-broker")
        assert values[prefix + "uptime"].endswith(" seconds")
        assert int(values[prefix + "bytes/received"]) > 0
        assert float(values[prefix + "load/messages/received/1min"]) > 0
        assert int(values[prefix + "heap/current"]) > 0
        assert int(values[prefix + "store/bytes"]) > 0
        for client in (watcher, subscriber, publisher):
            client.close()


def test_presence_events_on_sys(tmp_path: Path, workers: int) -> None:
    """In a pool the watcher is on the last worker and the client comes until it has been
    on worker 0 too: the events of a client on another worker reach the watcher."""
    port = free_port()
    config = http_config(port) + "[sys]\ninterval = 0\npresence_events = true\n"
    config = 'node_name = "node-a"\n' + config
    with running_broker(tmp_path, config) as broker:
        watcher, _ = connect_on_worker(broker, "presence-watcher", workers - 1, workers)
        subscribe_raw(watcher, 1, ("$SYS/brokers/+/clients/+/+", 0))
        for _attempt in range(40):
            client = connect_raw(broker, "comer", version=5, username="ann")
            connected = expect_publish(watcher)
            assert connected.topic == "$SYS/brokers/node-a/clients/comer/connected"
            event = orjson.loads(connected.payload)
            assert (event["clientid"], event["username"], event["proto_ver"]) == ("comer", "ann", 5)
            client.send(Disconnect())
            client.close()
            disconnected = expect_publish(watcher)
            assert disconnected.topic == "$SYS/brokers/node-a/clients/comer/disconnected"
            assert orjson.loads(disconnected.payload)["reason"] == "client_disconnect"
            if workers == 1 or 0 in connections_of(broker, "comer"):
                break
        else:
            raise AssertionError("40 connections of 'comer' missed worker 0")
        watcher.close()


def test_sys_off_publishes_nothing(tmp_path: Path) -> None:
    port = free_port()
    with running_broker(tmp_path, http_config(port) + "[sys]\ninterval = 0\n") as broker:
        watcher = connect_raw(broker, "sys-off")
        subscribe_raw(watcher, 1, ("$SYS/#", 0))
        watcher.expect_nothing(0.5)
        watcher.close()
