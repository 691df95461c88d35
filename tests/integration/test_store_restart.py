"""A store process killed with SIGKILL while the broker serves (docs/persistence.md, "The
store process"; docs/pool.md, "Store"), over real sockets.

In a pool the supervisor restarts it; one process starts a new one at its writer's next
attempt. Either way each start logs "the store process (pid N) is ready", and the tests
read the pids there. Meanwhile QoS 1/2 publishes to a persistent subscriber are refused
or wait (docs/overload.md, "Store faults"), nothing acknowledged is lost, and a CONNECT
that needs the store is answered within `[store] connect_wait`.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from mqtt.packets import ConnAck, Connect, PubAck, PubComp, Publish, PubRec, PubRel
from mqtt.reason_codes import ConnackReturnCode, ReasonCode
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import connect_raw, subscribe_raw, unique
from tests.support.raw_client import RawClient

STORE_READY = re.compile(r"the store process \(pid (\d+)\) is ready")
CONNECT_WAIT = 5.0  # [store] connect_wait's default
STREAM_LIMIT = 3000  # messages per publisher at most
REFUSED_PAUSE = 0.1  # seconds a publisher waits after a refusal (0x97)
QUIET_LOGS = ("Traceback", "could not commit")


def store_pids(broker: BrokerProcess) -> list[int]:
    return [int(pid) for pid in STORE_READY.findall(broker.log())]


def wait_until(condition: object, timeout: float, what: str, broker: BrokerProcess) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} within {timeout} s:\n{broker.log()[-3000:]}"
        time.sleep(0.02)


class Subscriber:
    """A persistent subscriber reading in a thread: the payloads given to the application,
    each QoS 2 packet id once until its PUBREL [MQTT-4.3.3-2]."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.payloads: list[bytes] = []
        self._awaiting_rel: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                packet = self.client.expect(timeout=0.2)
            except TimeoutError:
                continue
            except OSError:
                return
            if isinstance(packet, PubRel):
                self._awaiting_rel.discard(packet.packet_id)
                self.client.send(PubComp(packet.packet_id))
            elif isinstance(packet, Publish) and packet.qos == 1:
                self.payloads.append(packet.payload)
                self.client.send(PubAck(packet.packet_id))
            elif isinstance(packet, Publish) and packet.qos == 2:
                if packet.packet_id not in self._awaiting_rel:
                    self.payloads.append(packet.payload)
                    self._awaiting_rel.add(packet.packet_id)
                self.client.send(PubRec(packet.packet_id))

    def of(self, name: str) -> list[int]:
        prefix = f"{name}:".encode()
        return [int(p[len(prefix) :]) for p in list(self.payloads) if p.startswith(prefix)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.client.close()


class Publisher:
    """Publishes `name:0`, `name:1`, ... at `qos`, one at a time, in a thread, and keeps the
    numbers the broker acknowledged (PUBACK / PUBREC with reason code 0). MQTT 5: a refusal
    (0x97) is not acknowledged; MQTT 3.1.1: a disconnection is not either, and the
    publisher connects again and goes on with the next number."""

    def __init__(
        self, broker: BrokerProcess, name: str, topic: str, qos: int, version: int
    ) -> None:
        self.broker, self.name, self.topic = broker, name, topic
        self.qos, self.version = qos, version
        self.acknowledged: list[int] = []
        self.refused = 0
        self.reconnects = 0
        self._stop = threading.Event()
        self._client = self._connect()
        self._thread = threading.Thread(target=self._stream, daemon=True)
        self._thread.start()

    def _connect(self) -> RawClient:
        return connect_raw(self.broker, unique(self.name), version=self.version)

    def _stream(self) -> None:
        for number in range(STREAM_LIMIT):
            if self._stop.is_set():
                return
            packet_id = number % 60000 + 1
            payload = f"{self.name}:{number}".encode()
            try:
                if self._exchange(packet_id, payload):
                    self.acknowledged.append(number)
                else:  # "send it again later"; the broker keeps counting a QoS 2 publish
                    # it refused against Receive Maximum, so a tight loop would exceed it
                    self.refused += 1
                    time.sleep(REFUSED_PAUSE)
            except (ConnectionError, OSError):  # 3.1.1: the store failed, we were closed
                self._client.close()
                self.reconnects += 1
                time.sleep(0.05)
                self._client = self._connect()

    def _exchange(self, packet_id: int, payload: bytes) -> bool:
        client = self._client
        client.send(Publish(self.topic, payload, qos=self.qos, packet_id=packet_id))
        ack = client.expect(timeout=15)
        if self.qos == 1:
            assert isinstance(ack, PubAck) and ack.packet_id == packet_id, ack
            return ack.reason_code == ReasonCode.SUCCESS
        assert isinstance(ack, PubRec) and ack.packet_id == packet_id, ack
        if ack.reason_code != ReasonCode.SUCCESS:
            return False
        client.send(PubRel(packet_id))
        done = client.expect(timeout=15)
        assert isinstance(done, PubComp) and done.packet_id == packet_id, done
        return True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=20)
        assert not self._thread.is_alive(), f"{self.name}: its last publish got no answer"
        self._client.close()


def connack_code(
    broker: BrokerProcess, client_id: str, version: int, timeout: float
) -> tuple[int, float]:
    """The CONNACK code of a clean-session-0 CONNECT of `client_id`, and how long it took."""
    client = RawClient(broker.host, broker.port, version=version)
    began = time.monotonic()
    try:
        client.send(Connect(client_id=client_id, protocol_version=version, clean_start=False))
        connack = client.expect(timeout=timeout)
    finally:
        client.close()
    assert isinstance(connack, ConnAck), connack
    return connack.reason_code, time.monotonic() - began


def test_a_killed_store_process_is_restarted_and_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    broker = start_broker(tmp_path)
    try:
        topic = unique("kept")
        subscriber_id = unique("sub")
        client = connect_raw(broker, subscriber_id, clean=False)
        subscribe_raw(client, 1, (topic, 2))
        subscriber = Subscriber(client)
        publishers = [
            Publisher(broker, unique("q1v4"), topic, 1, 4),
            Publisher(broker, unique("q1v5"), topic, 1, 5),
            Publisher(broker, unique("q2v5"), topic, 2, 5),
        ]
        wait_until(
            lambda: all(len(p.acknowledged) >= 20 for p in publishers), 15, "a stream", broker
        )
        [first] = store_pids(broker)
        os.kill(first, signal.SIGKILL)
        # A CONNECT that needs the store (a pool loads the session from it) while it is away.
        code, took = connack_code(broker, unique("resume"), 4, CONNECT_WAIT + 5)
        assert code in (ConnackReturnCode.ACCEPTED, ConnackReturnCode.SERVER_UNAVAILABLE)
        assert took < CONNECT_WAIT + 2, took
        wait_until(lambda: len(store_pids(broker)) == 2, 15, "a new store process", broker)
        assert store_pids(broker)[1] != first
        after = [len(p.acknowledged) for p in publishers]
        wait_until(
            lambda: all(
                len(p.acknowledged) >= n + 20 for p, n in zip(publishers, after, strict=True)
            ),
            20,
            "acknowledgements after the restart",
            broker,
        )
        for publisher in publishers:
            publisher.stop()
        wait_until(
            lambda: all(set(p.acknowledged) <= set(subscriber.of(p.name)) for p in publishers),
            20,
            "every acknowledged message delivered",
            broker,
        )
        time.sleep(0.3)  # and no QoS 2 duplicate after them
        subscriber.stop()
        for publisher in publishers:
            if publisher.qos == 2:
                twice = [n for n, c in Counter(subscriber.of(publisher.name)).items() if c > 1]
                assert not twice, twice
        # The connect after the restart is served at once, with its stored session.
        code, took = connack_code(broker, subscriber_id, 4, 5)
        assert code == ConnackReturnCode.ACCEPTED
        log = broker.log()
        assert "the store process is back after" in log, log[-3000:]
        assert not [line for line in log.splitlines() if any(q in line for q in QUIET_LOGS)]
    finally:
        status = broker.stop(timeout=15)
    assert status == 0, broker.log()[-3000:]


def test_a_connect_that_needs_the_store_is_refused_when_it_stays_away(
    tmp_path: Path, workers: int
) -> None:
    """The supervisor is stopped (SIGSTOP) so the store it would restart stays away."""
    if workers == 1:
        pytest.skip("one process never loads a session from the store at a CONNECT")
    broker = start_broker(tmp_path, "[store]\nconnect_wait = 1.0\n")
    try:
        [first] = store_pids(broker)
        broker.process.send_signal(signal.SIGSTOP)
        try:
            os.kill(first, signal.SIGKILL)
            client_id = unique("refused")
            code, took = connack_code(broker, client_id, 4, 10)
            assert code == ConnackReturnCode.SERVER_UNAVAILABLE
            assert 0.9 < took < 3, took
            code, took = connack_code(broker, client_id, 5, 10)
            assert code == ReasonCode.SERVER_UNAVAILABLE
            assert 0.9 < took < 3, took
        finally:
            broker.process.send_signal(signal.SIGCONT)
        wait_until(lambda: len(store_pids(broker)) == 2, 15, "a new store process", broker)
        code, _took = connack_code(broker, client_id, 4, 5)
        assert code == ConnackReturnCode.ACCEPTED
        log = broker.log()
        assert log.count("refused CONNECT with server unavailable") == 2, log[-3000:]
        assert "Traceback" not in log
    finally:
        status = broker.stop(timeout=15)
    assert status == 0, broker.log()[-3000:]


def test_a_store_process_killed_as_the_broker_stops_gets_the_last_commits(
    tmp_path: Path,
) -> None:
    """The store process is killed just before SIGTERM: a new one serves the last commits
    (a pool's supervisor restarts it while the workers stop), the exit status is 0, and
    the next broker finds the offline session's queue."""
    broker = start_broker(tmp_path)
    topic, subscriber_id = unique("last"), unique("offline")
    client = connect_raw(broker, subscriber_id, clean=False)
    subscribe_raw(client, 1, (topic, 1))
    client.close()
    publisher = connect_raw(broker, unique("pub"), version=5)
    for packet_id in range(1, 4):
        publisher.send(Publish(topic, b"m%d" % packet_id, qos=1, packet_id=packet_id))
        ack = publisher.expect(timeout=10)
        assert isinstance(ack, PubAck) and ack.reason_code == ReasonCode.SUCCESS, ack
    publisher.close()
    [first] = store_pids(broker)
    os.kill(first, signal.SIGKILL)
    status = broker.stop(timeout=15)
    log = broker.log()
    assert status == 0, log[-3000:]
    assert "could not commit" not in log
    again = start_broker(tmp_path)
    try:
        client = connect_raw(again, subscriber_id, clean=False, session_present=True)
        received = []
        for _ in range(3):
            packet = client.expect(timeout=10)
            assert isinstance(packet, Publish), packet
            received.append(packet.payload)
            client.send(PubAck(packet.packet_id))
        assert received == [b"m1", b"m2", b"m3"]
        client.close()
    finally:
        assert again.stop(timeout=15) == 0, again.log()[-3000:]
