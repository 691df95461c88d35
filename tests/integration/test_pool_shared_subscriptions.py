"""Share groups spanning the workers of a pool (docs/pool.md), with real clients over real
sockets: members of one group and publishers placed on both workers (read from the workers'
log lines, as in test_pool.py)."""

from __future__ import annotations

import os
import queue
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqtt.packets import Packet, PubAck, PubComp, Publish, PubRec, PubRel
from tests.integration.test_pool import connect_on_other_worker, spread, worker_of
from tests.support.broker_config import wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import PahoCollector, connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient
from tests.support.workers import connect_on_worker, worker_pid


@pytest.fixture(scope="module")
def workers() -> int:
    """These tests start their own pool: one run."""
    return 2


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = start_broker(tmp_path, None, ("--workers", "2"))
    yield broker
    assert broker.stop(timeout=10) == 0, broker.log()


def drain(client: PahoCollector, within: float = 0.7) -> list[bytes]:
    payloads = []
    while True:
        try:
            payloads.append(client.next_message(timeout=within).payload)
        except queue.Empty:
            return payloads


def collectors(broker: BrokerProcess, prefix: str, count: int) -> dict[str, PahoCollector]:
    """`count` or more paho clients, some on each worker."""
    made = spread(lambda cid: PahoCollector(broker, cid), broker, prefix, count)
    return {cid: client for cid, (client, _w) in made.items() if isinstance(client, PahoCollector)}


def test_one_delivery_per_message_per_group_with_members_and_publishers_on_both_workers(
    pool: BrokerProcess,
) -> None:
    topic = unique("spanned")
    group_g = collectors(pool, "g-member", 3)
    group_h = collectors(pool, "h-member", 2)
    for client in group_g.values():
        assert client.subscribe(f"$share/g/{topic}/#", 1) == [1]
    for client in group_h.values():
        assert client.subscribe(f"$share/h/{topic}/+", 1) == [1]
    lone = PahoCollector(pool, unique("k-member"))  # a group on one worker only
    assert lone.subscribe(f"$share/k/{topic}/x", 1) == [1]
    normal = PahoCollector(pool, unique("normal"))
    assert normal.subscribe(f"{topic}/#", 1) == [1]
    publishers = collectors(pool, "spub", 2)
    sent = []
    for name, publisher in publishers.items():
        for n in range(10):
            payload = f"{name}:{n}".encode()
            publisher.publish(f"{topic}/x", payload, qos=1)
            sent.append(payload)
    for members in (group_g, group_h):
        got = {cid: drain(client) for cid, client in members.items()}
        # Each message exactly once per group, whichever worker published it ...
        assert sorted(p for payloads in got.values() for p in payloads) == sorted(sent)
        # ... and round robin hands turns to the members on both workers.
        assert all(got.values()), {cid: len(payloads) for cid, payloads in got.items()}
    # The group on one worker gets what is published on the other too.
    assert sorted(drain(lone)) == sorted(sent)
    assert sorted(drain(normal)) == sorted(sent)
    for client in [*group_g.values(), *group_h.values(), lone, normal, *publishers.values()]:
        client.close()


def raw_member(client: RawClient, topic_filter: str) -> RawClient:
    assert subscribe_raw(client, 1, (topic_filter, 1)).reason_codes == [1]
    return client


def test_a_member_killed_with_a_qos1_message_in_flight_hands_it_to_the_other_worker(
    pool: BrokerProcess,
) -> None:
    topic = unique("failover")
    shared = f"$share/g/{topic}"
    doomed_id = unique("doomed")
    doomed = raw_member(connect_raw(pool, doomed_id, version=5), shared)
    survivor = raw_member(
        connect_on_other_worker(pool, unique("survivor"), worker_of(pool, doomed_id), version=5),
        shared,
    )
    publisher = connect_raw(pool, unique("pub"), version=5)
    for packet_id in (1, 2):  # round robin: one message for each member
        publisher.send(Publish(topic, f"m{packet_id}".encode(), qos=1, packet_id=packet_id))
        assert publisher.expect() == PubAck(packet_id)
    in_flight = expect_publish(doomed)
    kept = expect_publish(survivor)
    survivor.send(PubAck(kept.packet_id))
    assert {in_flight.payload, kept.payload} == {b"m1", b"m2"}
    doomed.sock.close()  # killed: no DISCONNECT, no PUBACK
    moved = expect_publish(survivor)
    assert (moved.topic, moved.payload, moved.qos) == (topic, in_flight.payload, 1)
    survivor.send(PubAck(moved.packet_id))
    survivor.expect_nothing(within=0.5)  # once, not once per worker
    wait_for_log(pool, "went to other members of their groups")
    survivor.close()
    publisher.close()


def _take_payloads(client: RawClient, count: int, qos: int) -> list[bytes]:
    """Read `count` PUBLISHes and complete each one's QoS 1/2 flow; their payloads."""
    payloads: list[bytes] = []
    released: set[int] = set()  # QoS 2: the PUBRECs not answered with PUBREL yet
    deadline = time.monotonic() + 10
    while len(payloads) < count or released:
        assert time.monotonic() < deadline, payloads
        packet: Packet = client.expect(5)
        if isinstance(packet, PubRel):
            released.discard(packet.packet_id)
            client.send(PubComp(packet.packet_id))
            continue
        assert isinstance(packet, Publish), packet
        payloads.append(packet.payload)
        if qos == 1:
            client.send(PubAck(packet.packet_id))
        else:
            released.add(packet.packet_id)
            client.send(PubRec(packet.packet_id))
    return payloads


@pytest.mark.parametrize("qos", [1, 2])
def test_picks_for_a_worker_killed_before_it_took_them_go_to_the_member_left(
    pool: BrokerProcess, qos: int
) -> None:
    topic = unique("jobs")
    shared = f"$share/g/{topic}"
    doomed, _tries = connect_on_worker(pool, unique("doomed"), 1, 2, version=5)
    survivor, _tries = connect_on_worker(pool, unique("survivor"), 0, 2, version=5)
    for member in (doomed, survivor):
        assert subscribe_raw(member, 1, (shared, qos)).reason_codes == [qos]
    publisher, _tries = connect_on_worker(pool, unique("pub"), 0, 2, version=5)
    victim = worker_pid(pool, 1)
    # Worker 1 is stopped: round robin picks its member for half of the messages, which
    # reach it and stay unread. Only worker 0 keeps them until worker 1 confirms them.
    os.kill(victim, signal.SIGSTOP)
    sent = [str(n).encode() for n in range(10)]
    for packet_id, payload in enumerate(sent, 1):
        publisher.send(Publish(topic, payload, qos=qos, packet_id=packet_id))
    time.sleep(0.3)
    os.kill(victim, signal.SIGKILL)
    # Each message is acknowledged (its flow completed, for QoS 2), so each reaches the
    # group: the dead worker's picks go to the member left, once.
    assert sorted(_take_payloads(survivor, len(sent), qos)) == sorted(sent)
    survivor.expect_nothing(within=0.5)
    acknowledged = {publisher.expect(5).packet_id for _message in sent}
    assert acknowledged == set(range(1, len(sent) + 1))
    wait_for_log(pool, "5 picked again among the groups' other members, 0 dropped")
    # The restarted worker is up before the pool stops (stopped while a worker restarts,
    # the pool would exit 1).
    wait_for_log_lines(pool, "worker 1: accepting MQTT connections", 2)
    survivor.close()
    publisher.close()


def test_no_retained_message_on_a_shared_subscription_on_either_worker(
    pool: BrokerProcess,
) -> None:
    topic = unique("lamp")
    publisher = PahoCollector(pool, unique("rpub"))
    publisher.publish(topic, b"on", qos=1, retain=True)
    time.sleep(0.2)  # the Retained frame reaches the other worker's replica
    members = collectors(pool, "rmember", 2)
    for client in members.values():
        assert client.subscribe(f"$share/g/{topic}", 1) == [1]
    for client in members.values():
        client.assert_no_message(within=0.5)  # [MQTT-4.8.2-6]
    normals = collectors(pool, "rnormal", 2)
    for client in normals.values():  # the retained message is there, on both workers
        client.subscribe(topic, 1)
        message = client.next_message()
        assert (message.payload, message.retain) == (b"on", True)
    publisher.publish(topic, b"live", qos=1)
    got = [payload for client in members.values() for payload in drain(client)]
    assert got == [b"live"]  # a live message reaches the group once
    for client in [*members.values(), *normals.values(), publisher]:
        client.close()
