"""The Mosquitto bridge options beyond the basics, against Debian's Mosquitto on loopback
(docs/configuration.md, "Bridges"): the first address taken back, where the connection
leaves from, what the remote takes (packet size, retained messages), a bridge started once,
and TLS pinned to a version with the CAs of a directory."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.test_bridges import CONNECTED, bridge_config, drain, topic
from tests.support.admin import Admin, http_config
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import PahoCollector, unique
from tests.support.listeners import Certificates
from tests.support.mosquitto import MOSQUITTO, start_mosquitto
from tests.support.ports import free_port

pytestmark = pytest.mark.skipif(
    not Path(MOSQUITTO).exists(), reason="mosquitto not installed (Debian package mosquitto)"
)

UP = topic("up/#", "out", 1, "site7/", "plant/")


@dataclass
class Bridged:
    """This broker bridged to a Mosquitto, `near` a client here and `far` one there that
    subscribed to `plant/up/#`."""

    remote: BrokerProcess
    broker: BrokerProcess
    near: PahoCollector
    far: PahoCollector


@contextmanager
def bridged(
    tmp_path: Path, topics: str = UP, extra: str = "", remote_extra: str = "", far_qos: int = 1
) -> Iterator[Bridged]:
    """A Mosquitto with `remote_extra` lines, this broker bridged to it with `extra` keys,
    connected; both stop (this broker cleanly) at the end."""
    remote = start_mosquitto(tmp_path, extra=remote_extra)
    broker = start_broker(tmp_path, bridge_config(remote.port, topics, extra))
    clients: list[PahoCollector] = []
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        clients.append(PahoCollector(remote, unique("far")))
        clients[0].subscribe("plant/up/#", far_qos)
        clients.append(PahoCollector(broker, unique("near")))
        yield Bridged(remote, broker, near=clients[1], far=clients[0])
    finally:
        for client in clients:
            client.close()
        assert broker.stop() == 0, broker.log()
        remote.stop()


def test_a_bridge_on_its_second_address_moves_back_to_the_first_once_it_answers(
    tmp_path: Path,
) -> None:
    first_port = free_port()  # nothing listens there yet
    second = start_mosquitto(tmp_path)
    config = bridge_config(second.port, UP).replace(
        f'addresses = ["127.0.0.1:{second.port}"]',
        f'addresses = ["127.0.0.1:{first_port}", "127.0.0.1:{second.port}"]',
    )
    broker = start_broker(tmp_path, config)
    first = None
    try:
        wait_for_log(broker, f"{CONNECTED} 127.0.0.1:{second.port}", timeout=15)
        first = start_mosquitto(tmp_path, first_port)
        # Checked every 5 s, as Mosquitto's bridge does (round_robin false, the default).
        line = wait_for_log(broker, f"{CONNECTED} 127.0.0.1:{first_port}", timeout=15)
        assert f"the first address 127.0.0.1:{first_port} answers again" in broker.log(), line
        far = PahoCollector(first, unique("far"))
        far.subscribe("plant/up/#", 1)
        near = PahoCollector(broker, unique("near"))
        near.publish("site7/up/back", b"home", 1)
        assert [(m.topic, m.payload) for m in drain(far, 1)] == [("plant/up/back", b"home")]
        far.close()
        near.close()
    finally:
        assert broker.stop() == 0, broker.log()
        second.stop()
        if first is not None:
            first.stop()


def test_the_connection_leaves_from_the_bind_address(tmp_path: Path) -> None:
    with bridged(tmp_path, extra='bind_address = "127.0.0.7"') as bridge:
        line = wait_for_log(bridge.remote, "connected from 127.0.0.7:", timeout=5)
        assert line.split(": ", 1)[1].startswith("New bridge connected"), line


@pytest.mark.parametrize(
    ("version", "remote_extra", "bridge_extra"),
    [
        ("5.0", "max_packet_size 200", ""),  # told by the remote's CONNACK
        ("3.1.1", "", "max_packet_size = 200"),  # the bridge's own bound
    ],
)
def test_a_message_larger_than_the_remote_takes_is_dropped_and_the_rest_goes_on(
    tmp_path: Path, version: str, remote_extra: str, bridge_extra: str
) -> None:
    port = free_port()
    extra = f'protocol_version = "{version}"\n{bridge_extra}\n{http_config(port)}'
    with bridged(tmp_path, extra=extra, remote_extra=remote_extra) as bridge:
        broker, near = bridge.broker, bridge.near
        near.publish("site7/up/a", b"before", 1)
        near.publish("site7/up/a", b"x" * 500, 1)  # past 200 bytes
        near.publish("site7/up/a", b"after", 1)
        assert [m.payload for m in drain(bridge.far, 2)] == [b"before", b"after"]
        line = wait_for_log(broker, "larger than 200 bytes", timeout=5)
        assert "1 message(s)" in line and "max_packet_size" in line, line
        assert "connection lost" not in broker.log()  # the remote never had it to refuse
        admin = Admin(broker, port)
        (row,) = admin.get("/api/v1/bridges")["data"]
        assert (row["too_large"], row["sent"]) == (1, 2), row
        metrics = admin.request("GET", "/metrics").body.decode()
        assert 'bridge_messages_too_large_total{bridge="m"} 1.0' in metrics, metrics


@pytest.mark.parametrize(
    ("version", "remote_extra", "bridge_extra"),
    [
        ("5.0", "retain_available false", ""),  # Retain Available 0 in the CONNACK
        ("3.1.1", "", "outgoing_retain = false"),  # Mosquitto's bridge_outgoing_retain
    ],
)
def test_the_retain_flag_is_cleared_for_a_remote_that_takes_no_retained_messages(
    tmp_path: Path, version: str, remote_extra: str, bridge_extra: str
) -> None:
    extra = f'protocol_version = "{version}"\n{bridge_extra}'
    with bridged(tmp_path, extra=extra, remote_extra=remote_extra) as bridge:
        bridge.near.publish("site7/up/r", b"one", 1, retain=True)
        bridge.near.publish("site7/up/r", b"two", 1, retain=True)
        got = drain(bridge.far, 2)
        assert [(m.payload, m.retain) for m in got] == [(b"one", False), (b"two", False)]
        late = PahoCollector(bridge.remote, unique("late"))
        late.subscribe("plant/up/r", 1)
        late.assert_no_message(1.0)  # nothing retained there
        late.close()
        assert "connection lost" not in bridge.broker.log()


def test_a_bridge_started_once_does_not_connect_again(tmp_path: Path) -> None:
    remote = start_mosquitto(tmp_path)
    port = remote.port
    broker = start_broker(tmp_path, bridge_config(port, UP, 'start_type = "once"'))
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        remote.stop()
        line = wait_for_log(broker, "start_type is once", timeout=10)
        assert "connection lost" in line, line
        connects = broker.log().count(CONNECTED)
        remote = start_mosquitto(tmp_path, port)
        time.sleep(2.0)  # ten times reconnect_delay
        assert broker.log().count(CONNECTED) == connects
        assert "next attempt" not in broker.log()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def test_a_bridge_started_once_gives_up_after_one_failed_round(tmp_path: Path) -> None:
    nowhere = free_port()  # nothing listens there
    broker = start_broker(tmp_path, bridge_config(nowhere, UP, 'start_type = "once"'))
    try:
        line = wait_for_log(broker, "start_type is once", timeout=10)
        assert f"cannot connect to 127.0.0.1:{nowhere}" in line, line
        time.sleep(1.0)  # five times reconnect_delay
        assert broker.log().count("cannot connect to") == 1
        assert "next attempt" not in broker.log()
    finally:
        assert broker.stop() == 0, broker.log()


def test_tls_pinned_to_a_version_with_the_cas_of_a_directory(tmp_path: Path) -> None:
    certificates = Certificates(tmp_path)
    tls_port = free_port()
    remote = start_mosquitto(
        tmp_path,
        extra=(
            f"listener {tls_port} 127.0.0.1\ncafile {certificates.ca_file}\n"
            f"certfile {certificates.server_file}\nkeyfile {certificates.server_file}\n"
            "tls_version tlsv1.3\n"  # Mosquitto 2's listener: TLS 1.3 at least
        ),
    )
    capath = tmp_path / "cas"
    capath.mkdir()
    subject_hash = subprocess.run(
        ["openssl", "x509", "-hash", "-noout", "-in", str(certificates.ca_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (capath / f"{subject_hash}.0").write_bytes(certificates.ca_file.read_bytes())
    brokers = []
    for version in ("tlsv1.3", "tlsv1.2"):  # a data directory and a client id each
        (tmp_path / version).mkdir()
        tls = f'capath = "{capath}"\ntls_version = "{version}"\nclient_id = "{version}"\n'
        brokers.append(start_broker(tmp_path / version, bridge_config(tls_port, UP, tls)))
    pinned, refused = brokers
    try:
        wait_for_log(pinned, CONNECTED, timeout=15)
        far = PahoCollector(remote, unique("far"))
        far.subscribe("plant/up/#", 1)
        near = PahoCollector(pinned, unique("near"))
        near.publish("site7/up/tls", b"1.3", 1)
        assert [m.payload for m in drain(far, 1)] == [b"1.3"]
        # A bridge of TLS 1.2 only finds no version in common with that listener.
        line = wait_for_log(refused, "TLS handshake failed", timeout=15)
        assert "next attempt in" in line, line
        assert CONNECTED not in refused.log()
        far.close()
        near.close()
    finally:
        assert pinned.stop() == 0, pinned.log()
        assert refused.stop() == 0, refused.log()
        remote.stop()


@pytest.mark.parametrize("attempt", [True, False])
def test_a_line_turned_from_in_to_out_is_unsubscribed_at_the_remote(
    tmp_path: Path, attempt: bool
) -> None:
    remote = start_mosquitto(tmp_path)
    sent_to_bridge = "Sending PUBLISH to broker@127.0.0.1.m"
    broker = start_broker(tmp_path, bridge_config(remote.port, topic("x/#", "in", 1)))
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
    finally:
        assert broker.stop() == 0, broker.log()
    # The remote keeps the bridge's session (clean_start = false) and its subscription.
    extra = f"attempt_unsubscribe = {str(attempt).lower()}"
    broker = start_broker(tmp_path, bridge_config(remote.port, topic("x/#", "out", 1), extra))
    try:
        wait_for_log(broker, CONNECTED, timeout=15)
        unsubscribed = "Received UNSUBSCRIBE from broker@127.0.0.1.m" in remote.log()
        assert unsubscribed == attempt, remote.log()
        far = PahoCollector(remote, unique("far"))
        far.publish("x/1", b"there", 1)
        time.sleep(1.0)
        # Unsubscribed, the remote sends the bridge nothing; else it does, and the bridge
        # drops it (no line brings x/# in).
        assert (sent_to_bridge in remote.log()) != attempt, remote.log()
        far.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


def test_a_lazy_bridge_connects_at_its_threshold_and_leaves_when_idle(tmp_path: Path) -> None:
    remote = start_mosquitto(tmp_path)
    lazy = 'start_type = "lazy"\nthreshold = 3\nidle_timeout = 2.0'
    broker = start_broker(tmp_path, bridge_config(remote.port, UP, lazy))
    try:
        far = PahoCollector(remote, unique("far"))
        far.subscribe("plant/up/#", 1)
        near = PahoCollector(broker, unique("near"))
        wait_for_log(broker, "client '$bridge/m' (bridge:m) disconnected", timeout=15)
        for number in (1, 2):  # below the threshold: they wait
            near.publish("site7/up/a", b"%d" % number, 1)
        time.sleep(2.0)  # two looks at the session
        assert CONNECTED not in broker.log()
        assert "New bridge connected" not in remote.log()
        near.publish("site7/up/a", b"3", 1)
        assert [m.payload for m in drain(far, 3)] == [b"1", b"2", b"3"]
        assert "3 messages wait for the remote (threshold 3)" in broker.log()
        wait_for_log(broker, "no message crossed for 2 s", timeout=10)
        connects = broker.log().count(CONNECTED)
        state = PahoCollector(remote, unique("state"))
        state.subscribe("$SYS/broker/connection/broker@127.0.0.1.m/state", 1)
        assert state.next_message(5).payload == b"0"  # said before its DISCONNECT
        for number in (4, 5, 6):
            near.publish("site7/up/a", b"%d" % number, 1)
        assert [m.payload for m in drain(far, 3)] == [b"4", b"5", b"6"]
        assert broker.log().count(CONNECTED) == connects + 1
        for client in (far, near, state):
            client.close()
    finally:
        assert broker.stop() == 0, broker.log()
        remote.stop()


@pytest.mark.parametrize("max_qos", [1, 0])
def test_messages_go_at_no_more_than_a_5_remotes_maximum_qos(tmp_path: Path, max_qos: int) -> None:
    port = free_port()
    extra = f'protocol_version = "5.0"\n{http_config(port)}'
    lines = topic("up/#", "out", 2, "site7/", "plant/")
    with bridged(tmp_path, lines, extra, f"max_qos {max_qos}", far_qos=2) as bridge:
        broker = bridge.broker
        for number in range(3):
            bridge.near.publish("site7/up/q", b"%d" % number, 2)
        got = drain(bridge.far, 3)
        assert [(m.payload, m.qos) for m in got] == [(b"%d" % n, max_qos) for n in range(3)]
        # The local session's QoS 2 flows all ended: nothing waits for the remote.
        admin = Admin(broker, port)
        deadline = time.monotonic() + 5
        while (row := admin.get("/api/v1/bridges")["data"][0])["queued"]:
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        assert row["connected"] and "connection lost" not in broker.log(), broker.log()
        if max_qos == 0:  # its will at QoS 1 was refused (0x9B), and sent again at QoS 0
            assert "takes no QoS 1" in broker.log()
