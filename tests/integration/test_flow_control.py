"""Flow control over real sockets (docs/overload.md): publishers that feed a full session are
paused, never their acknowledged messages dropped; others keep going; a stuck subscriber
falls back to the drop policy after `max_stall`; the memory alarm blocks publishers.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable

import pytest

from mqtt.packets import PubAck
from tests.support.broker_config import wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess
from tests.support.clients import (
    PahoCollector,
    connect_raw,
    expect_publish,
    subscribe_raw,
    unique,
)
from tests.support.flow_clients import PipelinedPublisher, SwitchableSubscriber, held_then_drained
from tests.support.workers import connect_on_worker, worker_pid

PUBLISHERS = 10
PER_PUBLISHER = 2000


def test_qos1_fan_in_at_the_default_config_delivers_every_acknowledged_message(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    topic = unique("fan-in")
    subscriber = PahoCollector(broker, unique("sink"))
    assert subscriber.subscribe(topic, 1)[0].value == 1
    publishers = [PipelinedPublisher(broker, unique(f"source{n}")) for n in range(PUBLISHERS)]
    for number, publisher in enumerate(publishers):
        publisher.publish(topic, bytes([number]), PER_PUBLISHER)

    received: dict[int, list[int]] = {n: [] for n in range(PUBLISHERS)}
    deadline = time.monotonic() + 90
    for _ in range(PUBLISHERS * PER_PUBLISHER):
        message = subscriber.next_message(timeout=max(0.1, deadline - time.monotonic()))
        received[message.payload[0]].append(int.from_bytes(message.payload[1:5], "big"))
    for number, publisher in enumerate(publishers):
        assert publisher.wait_acked(PER_PUBLISHER, timeout=10), publisher.acked_count()
        # every acknowledged message, once, in its publisher's order [MQTT-4.6.0-6]
        assert received[number] == list(range(1, PER_PUBLISHER + 1))
    subscriber.assert_no_message(within=0.3)
    # The premise: the subscriber could not keep up, so the session went over its mark (the
    # queue of 1,000 would have dropped the oldest before flow control).
    assert "flow: session" in broker.log()
    assert "dropped" not in broker.log().split("flow: session", 1)[1].split("stopped:")[0]
    for publisher in publishers:
        publisher.close()
    subscriber.close()
    assert broker.stop() == 0
    assert re.search(r", 0 deliveries dropped", broker.log()), broker.log()[-2000:]


SLOW_CONFIG = """
[overload]
high_water_messages = 200
low_water_messages = 100
max_stall = 60.0
"""


def _rate(collector: PahoCollector, count: int, timeout: float) -> float:
    started = time.monotonic()
    for _ in range(count):
        collector.next_message(timeout=timeout)
    return count / (time.monotonic() - started)


def test_a_slow_subscriber_pauses_only_its_publishers(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(SLOW_CONFIG)
    slow_topic, fast_topic = unique("slow"), unique("fast")
    slow = SwitchableSubscriber(broker, unique("slow-sub"), slow_topic)  # not reading yet
    fast = PahoCollector(broker, unique("fast-sub"))
    assert fast.subscribe(fast_topic, 1)[0].value == 1
    fast_publisher = PipelinedPublisher(broker, unique("fast-pub"))

    # Baseline rate of the fast pair before anything is held.
    fast_publisher.publish(fast_topic, b"a", 1000)
    baseline = _rate(fast, 1000, timeout=20)

    slow_publisher = PipelinedPublisher(broker, unique("slow-pub"))
    slow_publisher.publish(slow_topic, b"s", 5000, size=256)
    wait_for_log(broker, "flow: session", timeout=10)
    time.sleep(0.5)
    held_at = slow_publisher.acked_count()
    assert held_at < 5000
    # The fast publisher and its subscriber keep their speed while the other is held.
    fast_publisher2 = PipelinedPublisher(broker, unique("fast-pub2"))
    fast_publisher2.publish(fast_topic, b"b", 1000)
    during = _rate(fast, 1000, timeout=20)
    assert fast_publisher2.wait_acked(1000, timeout=10)
    assert during > 0.3 * baseline, (during, baseline)
    # ... and the held publisher stayed held: no more PUBACKs while nothing drained.
    assert slow_publisher.acked_count() == held_at

    slow.reading.set()  # the subscriber catches up: its publisher runs again
    assert slow.wait_received(5000, timeout=60), slow.count()
    assert slow_publisher.wait_acked(5000, timeout=10)
    sequence = [int.from_bytes(payload[1:5], "big") for payload in slow.received]
    assert sequence == list(range(1, 5001))  # nothing lost, in order
    wait_for_log(broker, "drained", timeout=5)
    for client in (slow, fast, fast_publisher, fast_publisher2, slow_publisher):
        client.close()


CROSS_WORKER_MESSAGES = 20_000


def _held_across_workers(
    broker: BrokerProcess, workers: int, topic: str
) -> tuple[SwitchableSubscriber, PipelinedPublisher]:
    """A subscriber that does not read on worker 1 and a publisher on worker 0 (with one
    process, both on it) that streams `CROSS_WORKER_MESSAGES` to it until it is held: the
    session went over its mark, and the publisher's PUBACKs stopped far short of the end
    (without the hold crossing the workers, its worker took and acknowledged them all)."""
    sub_client, _ = connect_on_worker(broker, unique("slow-sub"), 1 % workers, workers)
    slow = SwitchableSubscriber(broker, "", topic, client=sub_client)
    pub_client, _ = connect_on_worker(broker, unique("slow-pub"), 0, workers)
    publisher = PipelinedPublisher(broker, "", client=pub_client)
    publisher.publish(topic, b"s", CROSS_WORKER_MESSAGES, size=256)
    wait_for_log(broker, "flow: session", timeout=10)
    time.sleep(1.0)
    assert publisher.acked_count() < CROSS_WORKER_MESSAGES // 4, publisher.acked_count()
    return slow, publisher


def test_a_slow_subscriber_on_another_worker_pauses_its_publisher_there(
    broker_factory: Callable[..., BrokerProcess], workers: int
) -> None:
    """Flow control across workers (docs/overload.md): the session over its mark is on
    another worker than its publisher, whose reads stop all the same, so the session's
    queue stays bounded; once it drains, every message arrives once, in order."""
    broker = broker_factory(SLOW_CONFIG)
    topic = unique("cross-worker")
    slow, publisher = _held_across_workers(broker, workers, topic)
    held_then_drained(slow, publisher, CROSS_WORKER_MESSAGES)
    wait_for_log(broker, "drained", timeout=5)
    slow.close()
    publisher.close()
    assert "Traceback" not in broker.log()


def test_a_worker_that_dies_holding_a_publisher_lets_it_go(
    broker_factory: Callable[..., BrokerProcess], workers: int
) -> None:
    """A hold from another worker ends with that worker: the publisher is never left
    paused by a worker that is gone."""
    if workers == 1:
        pytest.skip("a pool's worker dying: nothing to hold across with one process")
    broker = broker_factory(SLOW_CONFIG)
    slow, publisher = _held_across_workers(broker, workers, unique("dying-holder"))
    os.kill(worker_pid(broker, 1), signal.SIGKILL)
    # Released: the rest is read and acknowledged (no subscriber left: PUBACK all the same).
    assert publisher.wait_acked(CROSS_WORKER_MESSAGES, timeout=30), publisher.acked_count()
    slow.close()
    publisher.close()


STALL_CONFIG = """
[limits]
max_queued_messages = 100

[overload]
high_water_messages = 200
low_water_messages = 100
max_stall = 1.0
memory_check_interval = 0.2
"""


def test_a_stuck_subscriber_falls_back_to_the_drop_policy_after_max_stall(
    broker_factory: Callable[..., BrokerProcess], workers: int
) -> None:
    broker = broker_factory(STALL_CONFIG)
    topic = unique("stuck")
    stuck = SwitchableSubscriber(broker, unique("stuck-sub"), topic)  # never reads
    publisher = PipelinedPublisher(broker, unique("stuck-pub"))
    started = time.monotonic()
    publisher.publish(topic, b"s", 3000)
    wait_for_log(broker, "flow: session", timeout=10)
    line = wait_for_log(broker, "slow consumer: session", timeout=10)
    assert "max_stall" in line
    assert time.monotonic() - started >= 1.0
    # Its publisher runs again: everything it sent is acknowledged.
    assert publisher.wait_acked(3000, timeout=20), publisher.acked_count()
    wait_for_log(broker, "dropped", timeout=5)  # the queue bound now applies, counted
    publisher.close()
    stuck.close()
    assert broker.stop() == 0
    # One "stopped:" line per worker: the stuck session's worker counts it.
    stopped = "\n".join(wait_for_log_lines(broker, "stopped:", workers))
    assert sum(int(n) for n in re.findall(r"(\d+) stuck subscribers", stopped)) == 1, stopped
    assert sum(int(n) for n in re.findall(r"(\d+) deliveries dropped", stopped)) > 0, stopped


ALARM_CONFIG = """
[overload]
memory_high_watermark = 2.0
memory_check_interval = 0.1
"""


def test_the_memory_alarm_blocks_publishers_and_consumers_continue(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    # 2 bytes: any worker is over it, so the alarm is raised at the first check.
    broker = broker_factory(ALARM_CONFIG)
    wait_for_log(broker, "memory alarm:", timeout=5)
    topic = unique("alarm")
    subscriber = PahoCollector(broker, unique("alarm-sub"))
    assert subscriber.subscribe(topic, 1)[0].value == 1
    publisher = PipelinedPublisher(broker, unique("alarm-pub"))
    publisher.publish(topic, b"m", 2000, size=1024)
    time.sleep(1.0)
    acked = publisher.acked_count()
    assert 0 < acked < 2000  # what it read before the hold went through; then blocked
    time.sleep(0.5)
    assert publisher.acked_count() == acked
    # Consumers continue: what was routed reaches the subscriber.
    for _ in range(acked):
        subscriber.next_message(timeout=5)
    wait_for_log(broker, "blocked: pausing reads from", timeout=5)  # its flow state
    publisher.close()
    subscriber.close()


OFFLINE_CONFIG = """
[limits]
max_queued_messages = 50
"""


def test_a_persistent_session_going_offline_falls_back_to_its_bound(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(OFFLINE_CONFIG)
    topic, client_id = unique("offline"), unique("keeper")
    keeper = connect_raw(broker, client_id, clean=False)
    subscribe_raw(keeper, 1, (topic, 1))  # then reads nothing: 32 in flight, the rest queued
    publisher = PipelinedPublisher(broker, unique("offline-pub"))
    publisher.publish(topic, b"o", 300)
    assert publisher.wait_acked(300, timeout=10)  # connected: all accepted, none dropped
    time.sleep(0.3)
    assert "dropped" not in broker.log()
    keeper.close()
    # Offline it keeps the 32 in flight and the newest 50 of the queue (drop oldest).
    line = wait_for_log(broker, "dropped 218 messages for client")
    assert "max_queued_messages" in line
    keeper = connect_raw(broker, client_id, clean=False, session_present=True)
    numbers = []
    with contextlib.suppress(TimeoutError):
        while True:
            publish = expect_publish(keeper, timeout=1)
            numbers.append(int.from_bytes(publish.payload[1:5], "big"))
            keeper.send(PubAck(publish.packet_id))
    assert numbers == list(range(1, 33)) + list(range(251, 301))
    keeper.close()
    publisher.close()
