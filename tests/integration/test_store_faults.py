"""A full disk under the store (a small tmpfs, mounted by the test: it needs root) never stops
the broker (docs/overload.md): QoS 1/2 publishes that a persistent session would have to
store are refused (MQTT 5: PUBACK/PUBREC 0x97; MQTT 3.1.1: the publisher is disconnected),
everything else is served, and once space is freed the store commits again by itself.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from mqtt.packets import Disconnect, PubAck, Publish, PubRec
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, connect_raw, unique
from tests.support.raw_client import RawClient
from tests.support.workers import connections_of

DISK_BYTES = 8 * 1024 * 1024
PAYLOAD = bytes(64 * 1024)


def connect_on(
    broker: BrokerProcess, prefix: str, worker: int, workers: int, **kwargs: Any
) -> RawClient:
    """A client connected to `worker` (with one process: at once). Each try has a client id
    of its own: a session that ended on a worker whose commits fail releases its id only
    once they succeed (docs/pool.md, "Store faults across the pool")."""
    for _ in range(40):
        client_id = unique(prefix)
        client = connect_raw(broker, client_id, **kwargs)
        if workers == 1:
            return client
        deadline = time.monotonic() + 5
        while not connections_of(broker, client_id):
            assert time.monotonic() < deadline, f"no worker logged {client_id!r} connected"
            time.sleep(0.01)
        if connections_of(broker, client_id) == [worker]:
            return client
        client.send(Disconnect())
        client.close()
    raise AssertionError(f"40 connections missed worker {worker}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 8 MiB (skipped where the test may not mount one)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk is full; return it."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(bytes(4096))
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
    return filler


def test_a_full_disk_refuses_durable_publishes_serves_the_rest_and_recovers(
    broker_factory: Callable[..., BrokerProcess], small_disk: Path, workers: int
) -> None:
    broker = broker_factory(None, "--data-dir", str(small_disk), "--store", "sqlite")
    kept_topic, free_topic = unique("kept"), unique("free")
    keeper_id = unique("keeper")
    keeper = PahoCollector(broker, keeper_id, clean_session=False)
    assert keeper.subscribe(kept_topic, 1)[0].value == 1
    keeper.close()  # offline: its QoS 1 messages must be stored
    free = PahoCollector(broker, unique("free-sub"))
    assert free.subscribe(free_topic, 1)[0].value == 1
    # In a pool the publishers are on another worker than the persistent session, which
    # stays (offline) on the worker it connected to: the store fails there, and the
    # publishers' worker, which writes nothing, must refuse all the same.
    elsewhere = 1 - connections_of(broker, keeper_id)[-1] if workers > 1 else 0

    filler = fill(small_disk)
    v5 = connect_on(broker, "pub5", elsewhere, workers, version=5)
    answers: dict[int, int] = {}
    answered: list[int] = []  # v5's acknowledgements' packet ids, as they came
    packet_id = 0
    deadline = time.monotonic() + 20
    refused_log = "refused QoS 1/2 publishes to persistent sessions"
    while refused_log not in broker.log():  # until the store fails and publishes are refused
        assert time.monotonic() < deadline, answers
        packet_id += 1
        v5.send(Publish(kept_topic, PAYLOAD, qos=1, packet_id=packet_id))
        with contextlib.suppress(TimeoutError):
            while True:
                ack = v5.expect(timeout=0.3)
                assert isinstance(ack, PubAck), ack
                answers[ack.packet_id] = ack.reason_code
                answered.append(ack.packet_id)
    wait_for_log(broker, "commit of")
    withheld = [n for n in range(1, packet_id + 1) if n not in answers]  # stuck in the commit
    # The refusals of v5's later publishes wait behind the PUBACKs stuck in the failed
    # commit: PUBACKs leave in PUBLISH order [MQTT-4.6.0-2] (docs/channel.md,
    # "Acknowledgements in PUBLISH order").
    assert withheld and withheld[-1] == packet_id, (withheld, answers)
    assert 0x97 not in answers.values(), answers

    # A 5.0 client with nothing waiting for the store: PUBACK 0x97 at once, PUBREC 0x97
    # for QoS 2.
    fresh = connect_on(broker, "pub5b", elsewhere, workers, version=5)
    fresh.send(Publish(kept_topic, PAYLOAD, qos=1, packet_id=7))
    puback = fresh.expect(timeout=5)
    assert isinstance(puback, PubAck) and puback.reason_code == 0x97, puback
    fresh.send(Publish(kept_topic, b"two", qos=2, packet_id=60000))
    pubrec = fresh.expect(timeout=5)
    assert isinstance(pubrec, PubRec) and pubrec.reason_code == 0x97, pubrec
    fresh.close()
    # A 3.1.1 client has no reason code: it is disconnected.
    v4 = connect_on(broker, "pub4", elsewhere, workers)
    v4.send(Publish(kept_topic, b"durable?", qos=1, packet_id=1))
    assert v4.is_closed_by_broker(timeout=5)
    # Everything else goes on: QoS 1 to a clean subscriber, and new connections.
    other = PahoCollector(broker, unique("other-pub"))
    other.publish(free_topic, b"still served", qos=1)
    assert free.next_message(timeout=5).payload == b"still served"
    other.close()
    assert broker.process.poll() is None

    filler.unlink()  # space again: the store recovers by itself
    wait_for_log(broker, "commits succeed again", timeout=30)
    with contextlib.suppress(TimeoutError):  # the publishes caught in the failed commit
        while True:
            ack = v5.expect(timeout=1)
            assert isinstance(ack, PubAck), ack
            answers[ack.packet_id] = ack.reason_code
            answered.append(ack.packet_id)
    # Every publish answered once, in PUBLISH order: those caught in the failed commit
    # accepted (0x00), then those refused while it failed (0x97).
    assert answered == list(range(1, packet_id + 1)), answered
    codes = [answers[n] for n in answered]
    accepted_first = codes.index(0x97) if 0x97 in codes else len(codes)
    assert codes == [0] * accepted_first + [0x97] * (len(codes) - accepted_first), codes
    assert 0 < accepted_first < len(codes), codes
    # Some were caught in the failed commit, and accepted once it succeeded.
    assert any(answers[n] == 0 for n in withheld), (withheld, answers)
    v5.send(Publish(kept_topic, b"after", qos=1, packet_id=packet_id + 1))
    assert v5.expect(timeout=5) == PubAck(packet_id + 1)
    accepted = sum(1 for code in answers.values() if code == 0) + 1
    v5.close()

    # Every publish that was acknowledged reached the persistent session.
    keeper = PahoCollector(broker, keeper_id, clean_session=False)
    payloads = [keeper.next_message(timeout=10).payload for _ in range(accepted)]
    assert payloads[-1] == b"after"
    keeper.assert_no_message(within=0.5)
    keeper.client.disconnect()
    keeper.client.loop_stop()
    free.close()
    assert broker.stop() == 0
    assert "Traceback" not in broker.log()
    assert paho.MQTT_ERR_SUCCESS == 0  # paho's constant the helpers rely on


def test_a_pool_worker_whose_commits_fail_at_shutdown_exits_before_it_is_killed(
    broker_factory: Callable[..., BrokerProcess], small_disk: Path, workers: int
) -> None:
    if workers == 1:
        pytest.skip("the supervisor's kill 5 s after SIGTERM is a pool's (one process waits 30 s)")
    broker = broker_factory(None, "--data-dir", str(small_disk), "--store", "sqlite")
    topic, keeper_id = unique("kept"), unique("keeper")
    keeper = PahoCollector(broker, keeper_id, clean_session=False)
    assert keeper.subscribe(topic, 1)[0].value == 1
    keeper.close()
    fill(small_disk)
    publisher = connect_raw(broker, unique("pub"), version=5)
    publisher.send(Publish(topic, PAYLOAD, qos=1, packet_id=1))
    wait_for_log(broker, "commit of", timeout=10)  # its commit fails, and is retried
    started = time.monotonic()
    assert broker.stop(timeout=10) != 0
    assert time.monotonic() - started < 5.0
    log = broker.log()
    assert "could not commit the last changes to the store" in log
    assert "killed" not in log
    publisher.close()
