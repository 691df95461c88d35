"""Bridges against real brokers on loopback: Debian's Mosquitto and a second broker of this
project, started by the tests (docs/bridges.md)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.support.admin import API_KEY, Admin, http_config
from tests.support.broker_config import wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import PahoCollector, unique
from tests.support.cluster import kill_node
from tests.support.listeners import Certificates
from tests.support.mosquitto import MOSQUITTO, start_mosquitto
from tests.support.ports import free_port
from tests.support.workers import worker_pid

pytestmark = pytest.mark.skipif(
    not Path(MOSQUITTO).exists(), reason="mosquitto not installed (Debian package mosquitto)"
)

CONNECTED = "bridge 'm': connected to"


def bridge_config(port: int, topics: str, extra: str = "") -> str:
    """A broker configuration with bridge "m" to 127.0.0.1:`port`, quick to retry."""
    return (
        "[[bridges]]\n"
        'name = "m"\n'
        f'addresses = ["127.0.0.1:{port}"]\n'
        "reconnect_delay = 0.2\n"
        "max_reconnect_delay = 1.0\n"
        f"{extra}\n{topics}"
    )


def topic(pattern: str, direction: str, qos: int, local: str = "", remote: str = "") -> str:
    return (
        "[[bridges.topics]]\n"
        f'pattern = "{pattern}"\ndirection = "{direction}"\nqos = {qos}\n'
        f'local_prefix = "{local}"\nremote_prefix = "{remote}"\n'
    )


PREFIXED = topic("up/#", "out", 2, "site7/", "plant/") + topic(
    "down/#", "in", 2, "site7/", "plant/"
)


def drain(collector: PahoCollector, count: int, timeout: float = 15.0) -> list[paho.MQTTMessage]:
    """`count` messages, then nothing more for a moment (no duplicate arrives late)."""
    deadline = time.monotonic() + timeout
    got = []
    while len(got) < count:
        got.append(collector.next_message(max(0.1, deadline - time.monotonic())))
    collector.assert_no_message(0.5)
    return got


def test_both_ways_with_prefixes_qos_and_retained(tmp_path: Path) -> None:
    remote = start_mosquitto(tmp_path)
    broker = start_broker(tmp_path, bridge_config(remote.port, PREFIXED))
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        far = PahoCollector(remote, unique("far"))
        far.subscribe("plant/up/#", 2)
        near = PahoCollector(broker, unique("near"))
        near.subscribe("site7/down/#", 2)
        for qos in (0, 1, 2):
            near.publish("site7/up/a", b"out%d" % qos, qos)
            far.publish("plant/down/b", b"in%d" % qos, qos)
        got_far = drain(far, 3)
        got_near = drain(near, 3)
        assert [(m.topic, m.payload, m.qos) for m in got_far] == [
            ("plant/up/a", b"out%d" % q, q) for q in (0, 1, 2)
        ]  # QoS 2 exactly once: drain saw nothing more
        assert sorted((m.topic, m.payload, m.qos) for m in got_near) == [
            ("site7/down/b", b"in%d" % q, q) for q in (0, 1, 2)
        ]
        # Retained messages cross with their flag and are kept on the other side.
        near.publish("site7/up/r", b"kept-out", 1, retain=True)
        far.publish("plant/down/r", b"kept-in", 1, retain=True)
        drain(far, 1)
        drain(near, 1)
        late_far = PahoCollector(remote, unique("late-far"))
        late_far.subscribe("plant/up/r", 1)
        message = late_far.next_message(10)
        assert (message.payload, message.retain) == (b"kept-out", True)
        late_near = PahoCollector(broker, unique("late-near"))
        late_near.subscribe("site7/down/r", 1)
        message = late_near.next_message(10)
        assert (message.payload, message.retain) == (b"kept-in", True)
        for client in (far, near, late_far, late_near):
            client.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def test_a_two_way_bridge_on_one_topic_makes_no_loop(tmp_path: Path) -> None:
    remote = start_mosquitto(tmp_path)
    broker = start_broker(tmp_path, bridge_config(remote.port, topic("both/#", "both", 1)))
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        far = PahoCollector(remote, unique("far"))
        far.subscribe("both/#", 1)
        near = PahoCollector(broker, unique("near"))
        near.subscribe("both/#", 1)
        near.publish("both/x", b"from-near", 1)
        far.publish("both/y", b"from-far", 1)
        for collector in (far, near):
            assert sorted(m.payload for m in drain(collector, 2, timeout=10)) == [
                b"from-far",
                b"from-near",
            ]
        far.close()
        near.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def test_a_client_may_not_take_a_bridge_client_id(tmp_path: Path) -> None:
    broker = start_broker(tmp_path)
    try:
        refused = PahoCollector(broker, "$bridge/m")
        assert refused.connect_reason.is_failure, refused.connect_reason
        refused.client.loop_stop()
        wait_for_log(broker, "ids starting with '$bridge/' belong to the broker's own bridges")
    finally:
        assert broker.stop() == 0


def _stream(publisher: PahoCollector, start: int, count: int) -> None:
    for index in range(start, start + count):
        publisher.publish(f"site7/up/q{1 + index % 2}", b"%d" % index, 1 + index % 2)


def _numbers(messages: list[paho.MQTTMessage]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for message in messages:
        by_topic.setdefault(message.topic, []).append(int(message.payload))
    return by_topic


@pytest.mark.parametrize("crash", [False, True], ids=["remote-away", "remote-away-and-kill-9"])
def test_messages_wait_for_the_remote_in_order_none_twice(tmp_path: Path, crash: bool) -> None:
    remote = start_mosquitto(tmp_path)
    config = bridge_config(remote.port, PREFIXED)
    broker = start_broker(tmp_path, config)
    count = 60
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        far = PahoCollector(remote, "far-keeper", clean_session=False)
        far.subscribe("plant/up/#", 2)
        near = PahoCollector(broker, unique("near"))
        _stream(near, 0, count)  # while the remote is there
        drain(far, count)
        far.close()
        remote.stop()
        wait_for_log(broker, "bridge 'm': connection lost", timeout=10)
        _stream(near, count, count)  # while it is away: kept in the store
        near.close()
        if crash:
            broker.stop(signal.SIGKILL)
            broker = start_broker(tmp_path, config)
        remote = start_mosquitto(tmp_path, remote.port)
        far = PahoCollector(remote, "far-keeper", clean_session=False)
        got = _numbers(drain(far, count, timeout=30))
        assert got == {
            "plant/up/q1": list(range(count, 2 * count, 2)),
            "plant/up/q2": list(range(count + 1, 2 * count, 2)),
        }
        far.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def test_past_the_queue_bound_the_oldest_are_dropped_and_logged(tmp_path: Path) -> None:
    remote = start_mosquitto(tmp_path)
    config = bridge_config(remote.port, PREFIXED, "queue_max_messages = 10\nmax_inflight = 5")
    port = free_port()
    broker = start_broker(tmp_path, config + http_config(port))
    admin = Admin(broker, port)
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        far = PahoCollector(remote, "far-keeper", clean_session=False)
        far.subscribe("plant/up/#", 1)
        far.close()
        remote.stop()
        wait_for_log(broker, "bridge 'm': connection lost", timeout=10)
        near = PahoCollector(broker, unique("near"))
        for index in range(30):
            near.publish("site7/up/n", b"%d" % index, 1)
        near.close()
        wait_for_log(broker, "'$bridge/m'", timeout=5)
        wait_for_log(broker, "queue_max_messages", timeout=5)
        # The API, /metrics and ctl count them (the log line is one a second, with counts).
        deadline = time.monotonic() + 10
        while (row := admin.get("/api/v1/bridges")["data"][0])["dropped"] < 15:
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        assert (row["dropped"], row["queued"], row["connected"]) == (15, 15, False), row
        while 'bridge_messages_dropped_total{bridge="m"} 15.0' not in (
            metrics := admin.request("GET", "/metrics").body.decode()
        ):
            assert time.monotonic() < deadline + 5, metrics
            time.sleep(0.2)
        header, line = _ctl(admin, "bridges").splitlines()[-2:]
        assert dict(zip(header.lower().split(), line.split(), strict=True))["dropped"] == "15"
        remote = start_mosquitto(tmp_path, remote.port)
        far = PahoCollector(remote, "far-keeper", clean_session=False)
        # The first 5 took the in-flight window (as Mosquitto's max_queued_messages, the
        # bound counts what waits behind it), the last 10 the queue; 15 were dropped.
        kept = [*range(5), *range(20, 30)]
        assert [int(m.payload) for m in drain(far, 15, timeout=30)] == kept
        far.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def test_two_of_this_broker_mqtt5_no_local(tmp_path: Path) -> None:
    (tmp_path / "central").mkdir()
    (tmp_path / "edge").mkdir()
    central = start_broker(tmp_path / "central")
    try:
        edge = start_broker(
            tmp_path / "edge",
            bridge_config(central.port, topic("both/#", "both", 2), 'protocol_version = "5.0"'),
        )
    except BaseException:
        central.stop()
        raise
    try:
        wait_for_log(edge, CONNECTED, timeout=15)
        far = PahoCollector(central, unique("far"), paho.MQTTv5)
        far.subscribe("both/#", 2)
        near = PahoCollector(edge, unique("near"), paho.MQTTv5)
        near.subscribe("both/#", 2)
        near.publish("both/x", b"from-edge", 2)
        far.publish("both/y", b"from-central", 2)
        for collector in (far, near):
            assert sorted(m.payload for m in drain(collector, 2, timeout=10)) == [
                b"from-central",
                b"from-edge",
            ]
        far.close()
        near.close()
    finally:
        assert edge.stop() == 0, edge.log()
        assert central.stop() == 0, central.log()


def test_state_topic_says_connected(tmp_path: Path) -> None:
    remote = start_mosquitto(tmp_path)
    broker = start_broker(tmp_path, bridge_config(remote.port, PREFIXED))
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        watcher = PahoCollector(broker, unique("watch"))
        watcher.subscribe("$SYS/broker/connection/m/state", 0)
        message = watcher.next_message(10)
        assert (message.payload, message.retain) == (b"1", True)
        remote.stop()
        states: list[bytes] = []
        deadline = time.monotonic() + 10
        while b"0" not in states and time.monotonic() < deadline:
            try:
                states.append(watcher.next_message(1).payload)
            except queue.Empty:
                continue
        assert b"0" in states
        watcher.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


@pytest.mark.parametrize(
    ("local_only", "stop"),
    [(False, "kill"), (False, "stop"), (True, "kill")],
    ids=["notifications-killed", "notifications-stopped", "local-only"],
)
def test_the_remote_hears_the_bridges_state_as_from_a_mosquitto_bridge(
    tmp_path: Path, local_only: bool, stop: str
) -> None:
    remote = start_mosquitto(tmp_path)
    far = PahoCollector(remote, unique("far"))
    far.subscribe("$SYS/broker/connection/+/state", 1)
    extra = 'client_id = "edge-3.m"\n' + ("notifications_local_only = true\n" if local_only else "")
    broker = start_broker(tmp_path, bridge_config(remote.port, PREFIXED, extra))
    near: PahoCollector | None = None
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        near = PahoCollector(broker, unique("near"))
        near.subscribe("$SYS/broker/connection/m/state", 1)
        assert near.next_message(10).payload == b"1"  # here, as always
        if local_only:
            far.assert_no_message(1.0)
            return
        message = far.next_message(10)
        assert (message.topic, message.payload) == ("$SYS/broker/connection/edge-3.m/state", b"1")
        if stop == "kill":
            kill_node(broker)  # every process at once: the remote publishes the bridge's will
        else:
            assert broker.stop() == 0, broker.log()  # a DISCONNECT: no will, "0" said first
        message = far.next_message(10)
        assert (message.topic, message.payload) == ("$SYS/broker/connection/edge-3.m/state", b"0")
        late = PahoCollector(remote, unique("late"))
        late.subscribe("$SYS/broker/connection/edge-3.m/state", 1)
        kept = late.next_message(5)
        assert (kept.payload, kept.retain) == (b"0", True)
        late.close()
    finally:
        if near is not None:  # its network thread would retry the stopped broker for good
            near.close()
        if broker.process.poll() is None:
            assert broker.stop() == 0, broker.log()
        far.close()
        remote.stop()


@pytest.mark.parametrize("version", ["mqttv311", "mqttv50"])
def test_a_mosquitto_bridge_connects_here_with_its_state_notifications(
    tmp_path: Path, version: str
) -> None:
    # This broker as the central one: a Mosquitto bridge's defaults (notifications on) leave
    # a will on its state topic and publish 1 there once connected, as Mosquitto lets a
    # bridge do in $SYS; a 5.0 CONNECT with that will was refused before (CONNACK 0x87).
    broker = start_broker(tmp_path, None)
    state = "$SYS/broker/connection/edge-7.cloud/state"
    watcher = PahoCollector(broker, unique("watch"))
    watcher.subscribe(state, 1)
    central = PahoCollector(broker, unique("central"))
    central.subscribe("plant/#", 1)
    edge = start_mosquitto(
        tmp_path,
        extra=(
            f"connection cloud\naddress 127.0.0.1:{broker.port}\n"
            f"remote_clientid edge-7.cloud\nbridge_protocol_version {version}\n"
            "restart_timeout 1\ntopic up/# out 1 site7/ plant/\n"
        ),
    )
    try:
        message = watcher.next_message(15)
        assert (message.payload, message.retain) == (b"1", False)  # live, not replayed
        site = PahoCollector(edge, unique("device"))
        site.publish("site7/up/t", b"reading", 1)
        (got,) = drain(central, 1)
        assert (got.topic, got.payload) == ("plant/up/t", b"reading")
        late = PahoCollector(broker, unique("late"))
        late.subscribe(state, 1)
        kept = late.next_message(5)
        assert (kept.payload, kept.retain) == (b"1", True)
        edge.process.kill()  # the will tells that the edge is gone
        assert watcher.next_message(15).payload == b"0"
        for client in (watcher, central, site, late):
            client.close()
    finally:
        edge.stop()
        assert broker.stop() == 0, broker.log()


def test_a_killed_workers_bridge_comes_back_on_another_with_nothing_lost(
    tmp_path: Path, workers: int
) -> None:
    if workers == 1:
        pytest.skip("a pool's worker dies")
    remote = start_mosquitto(tmp_path)
    config = bridge_config(remote.port, PREFIXED)
    broker = start_broker(tmp_path, config)
    count = 40
    try:
        line = wait_for_log(broker, "bridge 'm': runs in this worker", timeout=15)
        holder = int(line.split("[worker ", 1)[1].split("]", 1)[0])
        wait_for_log(broker, CONNECTED, timeout=15)
        far = PahoCollector(remote, "far-keeper", clean_session=False)
        far.subscribe("plant/up/#", 2)
        far.close()
        remote.stop()
        wait_for_log(broker, "bridge 'm': connection lost", timeout=10)
        near = PahoCollector(broker, unique("near"))
        _stream(near, 0, count)  # acknowledged: in the bridge's session, in the store
        near.close()
        os.kill(worker_pid(broker, holder), signal.SIGKILL)
        wait_for_log(broker, f"[worker {1 - holder}] bridge 'm': runs in this worker", timeout=15)
        remote = start_mosquitto(tmp_path, remote.port)
        far = PahoCollector(remote, "far-keeper", clean_session=False)
        got = _numbers(drain(far, count, timeout=30))
        assert got == {
            "plant/up/q1": list(range(0, count, 2)),
            "plant/up/q2": list(range(1, count, 2)),
        }
        far.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def _tls_mosquitto(tmp_path: Path) -> tuple[BrokerProcess, int, Certificates]:
    """Mosquitto with a TLS listener that requires a client certificate of `Certificates`."""
    certificates = Certificates(tmp_path)
    tls_port = free_port()
    remote = start_mosquitto(
        tmp_path,
        extra=(
            f"listener {tls_port} 127.0.0.1\n"
            f"cafile {certificates.ca_file}\n"
            f"certfile {certificates.server_file}\n"
            f"keyfile {certificates.server_file}\n"
            "require_certificate true\n"
        ),
    )
    return remote, tls_port, certificates


def test_tls_with_a_ca_and_a_client_certificate(tmp_path: Path) -> None:
    remote, tls_port, certificates = _tls_mosquitto(tmp_path)
    client = certificates.client_file("edge")
    tls = f'cafile = "{certificates.ca_file}"\ncertfile = "{client}"\n'
    broker = start_broker(tmp_path, bridge_config(tls_port, PREFIXED, tls))
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        far = PahoCollector(remote, unique("far"))
        far.subscribe("plant/up/#", 1)
        near = PahoCollector(broker, unique("near"))
        near.publish("site7/up/tls", b"secret", 1)
        assert [(m.topic, m.payload) for m in drain(far, 1)] == [("plant/up/tls", b"secret")]
        far.close()
        near.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def test_a_certificate_the_ca_does_not_vouch_for_is_refused_and_retried(tmp_path: Path) -> None:
    remote, tls_port, certificates = _tls_mosquitto(tmp_path)
    other = Certificates(tmp_path, "-other")  # the bridge trusts another CA
    client = certificates.client_file("edge")
    tls = f'cafile = "{other.ca_file}"\ncertfile = "{client}"\n'
    broker = start_broker(tmp_path, bridge_config(tls_port, PREFIXED, tls))
    try:
        lines = wait_for_log_lines(broker, "certificate was refused", 3, timeout=15)
        assert all("next attempt in" in line and "cafile" in line for line in lines), lines
        assert CONNECTED not in broker.log()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def _ctl(admin: Admin, *args: str) -> str:
    env = {**os.environ, "ACTOR_MQTT_URL": admin.url, "ACTOR_MQTT_API_KEY": API_KEY}
    result = subprocess.run(
        [sys.executable, "-m", "admin.ctl", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return result.stdout


def test_the_api_ctl_and_metrics_show_the_bridge(tmp_path: Path, workers: int) -> None:
    remote = start_mosquitto(tmp_path)
    port = free_port()
    broker = start_broker(tmp_path, bridge_config(remote.port, PREFIXED) + http_config(port))
    admin = Admin(broker, port)
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        far = PahoCollector(remote, unique("far"))
        far.subscribe("plant/up/#", 2)
        near = PahoCollector(broker, unique("near"))
        _stream(near, 0, 6)
        drain(far, 6)
        (row,) = admin.get("/api/v1/bridges")["data"]
        assert row["name"] == "m" and row["connected"] is True, row
        assert (row["sent"], row["received"], row["queued"]) == (6, 0, 0), row
        assert row["address"] == f"127.0.0.1:{remote.port}", row
        metrics = admin.request("GET", "/metrics").body.decode()
        assert 'mqtt_broker_bridge_connected{bridge="m"} 1.0' in metrics
        assert 'mqtt_broker_bridge_messages_sent_total{bridge="m"} 6.0' in metrics
        listed = _ctl(admin, "bridges").splitlines()
        assert listed[0].split()[:3] == ["NAME", "CONNECTED", "ADDRESS"], listed
        assert listed[-1].split()[:3] == ["m", "True", f"127.0.0.1:{remote.port}"], listed
        far.close()
        remote.stop()
        wait_for_log(broker, "bridge 'm': connection lost", timeout=10)
        _stream(near, 6, 4)  # acknowledged here; they wait in the bridge's session
        deadline = time.monotonic() + 10
        while (row := admin.get("/api/v1/bridges")["data"][0])["queued"] < 4 or row["connected"]:
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        assert (row["connected"], row["queued"], row["sent"]) == (False, 4, 6), row
        assert row["last_error"], row
        # /metrics renders one reading a second (admin.figures_cache): the next one says it.
        while 'bridge_connected{bridge="m"} 0.0' not in (
            metrics := admin.request("GET", "/metrics").body.decode()
        ):
            assert time.monotonic() < deadline + 5, metrics
            time.sleep(0.2)
        assert 'mqtt_broker_bridge_queued{bridge="m"} 4.0' in metrics
        near.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()
