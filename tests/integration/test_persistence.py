"""Durable state: retained messages and persistent sessions survive a restart,
graceful or SIGKILL, and what was acknowledged to a publisher is never lost."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import pytest

from mqtt.packets import PubAck, PubComp, Publish, PubRec, PubRel, Subscribe, Subscription
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.raw_client import RawClient


def _broker(tmp_path: Path, data_dir: Path) -> BrokerProcess:
    return start_broker(tmp_path, None, ("--data-dir", str(data_dir)))


def _subscribe(client: RawClient, topic_filter: str, qos: int) -> None:
    client.send(Subscribe(1, [Subscription(topic_filter, qos)]))
    suback = client.expect()
    assert suback.reason_codes == [qos]


def _publish_acked(client: RawClient, topic: str, payload: bytes, qos: int, packet_id: int) -> None:
    """Publish and complete the publisher side of the QoS flow."""
    client.send(Publish(topic, payload, qos=qos, packet_id=packet_id))
    if qos == 1:
        assert client.expect() == PubAck(packet_id)
    else:
        assert client.expect() == PubRec(packet_id)
        client.send(PubRel(packet_id))
        assert client.expect() == PubComp(packet_id)


def _receive_all(client: RawClient, count: int) -> list[Publish]:
    """Receive `count` PUBLISHes, acknowledging each as a well-behaved client does."""
    received: list[Publish] = []
    while len(received) < count:
        packet = client.expect()
        if isinstance(packet, PubRel):
            client.send(PubComp(packet.packet_id))
            continue
        assert isinstance(packet, Publish), packet
        received.append(packet)
        if packet.qos == 1:
            client.send(PubAck(packet.packet_id))
        elif packet.qos == 2:
            client.send(PubRec(packet.packet_id))
    return received


def _finish_flows(client: RawClient) -> None:
    """Complete outstanding QoS 2 flows; fail on any further PUBLISH (a duplicate)."""
    while True:
        try:
            packet = client.expect(timeout=0.5)
        except TimeoutError:
            return
        assert isinstance(packet, PubRel), f"unexpected {packet!r} after all messages arrived"
        client.send(PubComp(packet.packet_id))


def test_graceful_restart_keeps_retained_messages_and_sessions(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = _broker(tmp_path, data_dir)
    publisher = RawClient(broker.host, broker.port)
    publisher.connect("keeper-pub")
    publisher.send(Publish("state/lamp", b"on", qos=1, retain=True, packet_id=7))
    assert publisher.expect() == PubAck(7)
    subscriber = RawClient(broker.host, broker.port)
    subscriber.connect("keeper-sub", clean=False)
    _subscribe(subscriber, "jobs/#", 1)
    subscriber.close()
    _publish_acked(publisher, "jobs/1", b"queued while away", 1, 8)
    assert broker.stop() == 0

    broker = _broker(tmp_path, data_dir)
    try:
        assert "restored 1 retained messages and 1 sessions" in broker.log()
        subscriber = RawClient(broker.host, broker.port)
        connack = subscriber.connect("keeper-sub", clean=False)
        assert connack.session_present  # [MQTT-3.2.2-2]
        [queued] = _receive_all(subscriber, 1)
        assert (queued.topic, queued.payload) == ("jobs/1", b"queued while away")
        viewer = RawClient(broker.host, broker.port)
        viewer.connect("keeper-view")
        viewer.send(Subscribe(1, [Subscription("state/+", 0)]))
        viewer.expect()  # SUBACK
        retained = viewer.expect()
        assert (retained.topic, retained.payload, retained.retain) == ("state/lamp", b"on", True)
    finally:
        assert broker.stop() == 0


@pytest.mark.parametrize("count", [40])
def test_acknowledged_messages_survive_sigkill_qos2_exactly_once(
    tmp_path: Path, count: int
) -> None:
    data_dir = tmp_path / "data"
    broker = _broker(tmp_path, data_dir)
    subscriber = RawClient(broker.host, broker.port)
    subscriber.connect("crash-sub", clean=False)
    _subscribe(subscriber, "crash/#", 2)
    subscriber.close()
    publisher = RawClient(broker.host, broker.port)
    publisher.connect("crash-pub")
    for index in range(count):
        _publish_acked(publisher, "crash/q1", b"q1-%d" % index, 1, index + 1)
    for index in range(count):
        _publish_acked(publisher, "crash/q2", b"q2-%d" % index, 2, count + index + 1)
    broker.stop(signal.SIGKILL)

    broker = _broker(tmp_path, data_dir)
    try:
        subscriber = RawClient(broker.host, broker.port)
        assert subscriber.connect("crash-sub", clean=False).session_present
        received = _receive_all(subscriber, 2 * count)
        _finish_flows(subscriber)  # nothing twice: QoS 2 exactly once
        by_topic = {"crash/q1": [], "crash/q2": []}
        for packet in received:
            by_topic[packet.topic].append(packet.payload)
        assert by_topic["crash/q1"] == [b"q1-%d" % i for i in range(count)]  # in order
        assert by_topic["crash/q2"] == [b"q2-%d" % i for i in range(count)]
    finally:
        assert broker.stop() == 0


def test_messages_acked_before_a_kill_during_a_stream_are_all_delivered(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = _broker(tmp_path, data_dir)
    subscriber = RawClient(broker.host, broker.port)
    subscriber.connect("stream-sub", clean=False)
    _subscribe(subscriber, "stream", 1)
    subscriber.close()
    publisher = RawClient(broker.host, broker.port)
    publisher.connect("stream-pub")
    acked: set[bytes] = set()
    # Pipeline publishes without waiting (fewer than the session queue's default bound of
    # 1000, which would drop the oldest), then kill while acks are still arriving.
    for index in range(900):
        publisher.send(Publish("stream", b"m-%d" % index, qos=1, packet_id=index % 65535 + 1))
    for _ in range(300):
        packet = publisher.expect()
        assert isinstance(packet, PubAck)
        acked.add(b"m-%d" % (packet.packet_id - 1))
    broker.stop(signal.SIGKILL)

    broker = _broker(tmp_path, data_dir)
    try:
        subscriber = RawClient(broker.host, broker.port)
        subscriber.connect("stream-sub", clean=False)
        delivered: set[bytes] = set()
        while True:
            try:
                packet = subscriber.expect(timeout=1.0)
            except TimeoutError:
                break
            delivered.add(packet.payload)
            subscriber.send(PubAck(packet.packet_id))
        assert acked <= delivered, f"{len(acked - delivered)} acknowledged messages were lost"
    finally:
        assert broker.stop() == 0


@pytest.mark.parametrize("kind", ["not sqlite", "newer schema"])
def test_unusable_store_file_exits_non_zero_and_is_left_untouched(
    tmp_path: Path, kind: str
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    path = data_dir / "broker-store.sqlite3"
    if kind == "not sqlite":
        path.write_bytes(b"this is not a database\n" * 100)
    else:
        first = _broker(tmp_path, data_dir)
        assert first.stop() == 0
        connection = sqlite3.connect(path)
        connection.execute("PRAGMA user_version = 999")
        connection.commit()
        connection.close()  # the last close checkpoints the WAL into the file
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="cannot open the store") as failure:
        _broker(tmp_path, data_dir)
    assert "exited with 1" in str(failure.value)
    assert path.read_bytes() == before


def test_an_empty_store_file_stops_the_broker_and_a_new_data_directory_starts(
    tmp_path: Path,
) -> None:
    # SQLite takes a 0-byte file for a new database: the broker used to start empty and
    # overwrite the file. It must refuse it like any other unusable store file.
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    path = data_dir / "broker-store.sqlite3"
    path.write_bytes(b"")
    try:
        started = _broker(tmp_path, data_dir)
    except RuntimeError as failure:
        log = str(failure)
    else:
        started.stop()
        pytest.fail(f"the broker started on an empty store file:\n{started.log()}")
    assert "broker exited with 1" in log
    assert f"ERROR actors.main: cannot open the store: {path} is empty (0 bytes)" in log
    assert "move or delete it, or point the broker at a new data directory (--data-dir)" in log
    assert "Traceback" not in log
    assert "ready:" not in log
    assert path.stat().st_size == 0
    assert sorted(p.name for p in data_dir.iterdir()) == [path.name]  # no -wal, -shm

    fresh_dir = tmp_path / "fresh"
    broker = _broker(tmp_path, fresh_dir)
    try:
        assert "restored 0 retained messages and 0 sessions" in broker.log()
        assert (fresh_dir / "broker-store.sqlite3").stat().st_size > 0
    finally:
        assert broker.stop() == 0


def test_persistent_subscriber_gets_suback_before_retained_messages(tmp_path: Path) -> None:
    """SUBACK waits for the subscription's commit; retained messages must still follow it."""
    broker = _broker(tmp_path, tmp_path / "data")
    try:
        publisher = RawClient(broker.host, broker.port)
        publisher.connect("order-pub")
        publisher.send(Publish("order/a", b"kept", qos=1, retain=True, packet_id=1))
        assert publisher.expect() == PubAck(1)
        subscriber = RawClient(broker.host, broker.port)
        subscriber.connect("order-sub", clean=False)
        subscriber.send(Subscribe(5, [Subscription("order/#", 1)]))
        first, second = subscriber.expect(), subscriber.expect()
        assert (type(first).__name__, first.packet_id) == ("SubAck", 5)
        assert isinstance(second, Publish)
        assert (second.topic, second.payload, second.retain) == ("order/a", b"kept", True)
    finally:
        assert broker.stop() == 0
