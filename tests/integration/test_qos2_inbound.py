"""Incoming QoS 2 across reconnects: a publisher with more QoS 2 messages in flight than
`limits.max_awaiting_rel` is slowed down, not closed in a loop, and the ids awaiting PUBREL
of a persistent session survive a reconnect, a move between a pool's workers and a restart,
so a re-sent PUBLISH is never delivered twice [MQTT-4.3.3-2] (docs/overload.md).
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from mqtt.packets import PubComp, Publish, PubRec, PubRel
from mqtt.reason_codes import ReasonCode
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import (
    PahoCollector,
    connect_raw,
    expect_publish,
    subscribe_raw,
    unique,
)
from tests.support.raw_client import RawClient
from tests.support.workers import connect_on_worker, connections_of

MESSAGES = 300
BOUND = 20  # limits.max_awaiting_rel of the broker under test, far below the client's window


def _connects(broker: BrokerProcess, client_id: str) -> int:
    """How many connections of `client_id` the broker accepted (its "connected" lines)."""
    return sum(
        1
        for line in broker.log().splitlines()
        if f"client {client_id!r} (" in line and ") connected: MQTT level" in line
    )


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "clean"])
def test_a_qos2_publisher_beyond_the_bound_survives_a_dropped_connection(
    broker_factory: Callable[..., BrokerProcess], persistent: bool
) -> None:
    """The reported loop: a paho 3.1.1 publisher sends 300 QoS 2 messages with a window of
    300 against max_awaiting_rel 20 and loses its connection once, mid-flow. It reconnects
    once and all 300 complete. A persistent publisher's messages reach a persistent
    subscriber once each; a clean-session publisher re-sends what it had not seen completed
    as new messages to a new session, so a bounded few arrive twice (docs/overload.md)."""
    broker = broker_factory(f"[limits]\nmax_awaiting_rel = {BOUND}\n")
    topic, publisher_id = unique("q2loop"), unique("q2pub")
    subscriber = PahoCollector(broker, unique("q2sub"), clean_session=False)
    assert subscriber.subscribe(topic, 2) == [2]
    publisher = PahoCollector(
        broker,
        publisher_id,
        clean_session=not persistent,
        setup=lambda c: (
            c.max_inflight_messages_set(MESSAGES),
            c.max_queued_messages_set(0),
            c.reconnect_delay_set(0.1, 0.5),
        ),
    )
    client = publisher.client
    completed: set[int] = set()
    all_completed = threading.Event()
    dropped_at: list[int] = []

    def on_publish(_c: object, _u: object, mid: int, _rc: object, _p: object) -> None:
        completed.add(mid)
        if len(completed) == 30 and not dropped_at:
            dropped_at.append(len(completed))  # on paho's thread: mid-flow for certain
            sock = client.socket()
            assert isinstance(sock, socket.socket)
            sock.shutdown(socket.SHUT_RDWR)
        if len(completed) == MESSAGES:
            all_completed.set()

    client.on_publish = on_publish
    for number in range(MESSAGES):
        client.publish(topic, b"%d" % number, qos=2)
    try:
        assert all_completed.wait(30), f"{len(completed)} of {MESSAGES} completed in 30 s"
        received: Counter[bytes] = Counter()
        deadline = time.monotonic() + 10
        while len(received) < MESSAGES and time.monotonic() < deadline:
            received[
                subscriber.messages.get(timeout=max(0.01, deadline - time.monotonic())).payload
            ] += 1
        time.sleep(0.5)  # and nothing more arrives
        while not subscriber.messages.empty():
            received[subscriber.messages.get().payload] += 1
    finally:
        publisher.close()
        subscriber.close()
    assert dropped_at == [30]
    assert set(received) == {b"%d" % n for n in range(MESSAGES)}
    duplicates = {payload: n for payload, n in received.items() if n > 1}
    if persistent:
        assert not duplicates, f"{len(duplicates)} messages delivered more than once"
    else:  # at most those routed, not yet completed when the connection dropped
        assert len(duplicates) <= 2 * BOUND and set(duplicates.values()) <= {2}, duplicates
    connects = _connects(broker, publisher_id)
    assert 2 <= connects <= 3, f"{connects} connects of the publisher:\n{broker.log()[-3000:]}"
    assert "awaiting PUBREL (limits.max_awaiting_rel): its PUBLISHes wait" in broker.log()


def _complete_delivery(subscriber: RawClient, payload: bytes) -> None:
    """Receive `payload` at QoS 2 and finish its flow as the subscriber."""
    delivered = expect_publish(subscriber)
    assert (delivered.payload, delivered.qos) == (payload, 2)
    subscriber.send(PubRec(delivered.packet_id))  # type: ignore[arg-type]
    assert subscriber.expect() == PubRel(delivered.packet_id)  # type: ignore[arg-type]
    subscriber.send(PubComp(delivered.packet_id))  # type: ignore[arg-type]


def _resend_is_not_delivered(publisher: RawClient, subscriber: RawClient, topic: str) -> None:
    publisher.send(Publish(topic, b"once", qos=2, packet_id=7, dup=True))
    assert publisher.expect() == PubRec(7)
    subscriber.expect_nothing(0.5)  # [MQTT-4.3.3-2]


def test_ids_awaiting_pubrel_survive_a_reconnect_a_move_and_a_restart(
    tmp_path: Path, workers: int
) -> None:
    data = ("--data-dir", str(tmp_path / "data"))
    broker = start_broker(tmp_path, None, data)
    topic, publisher_id, subscriber_id = unique("kept"), unique("kept-pub"), unique("kept-sub")
    try:
        subscriber = connect_raw(broker, subscriber_id, clean=False)
        subscribe_raw(subscriber, 1, (topic, 2))
        publisher = connect_raw(broker, publisher_id, clean=False)
        publisher.send(Publish(topic, b"once", qos=2, packet_id=7))
        assert publisher.expect() == PubRec(7)
        _complete_delivery(subscriber, b"once")
        publisher.close()
        # Reconnect; in a pool on the other worker, so the session moves there.
        first = connections_of(broker, publisher_id)[-1] if workers > 1 else 0
        publisher, _tries = connect_on_worker(
            broker, publisher_id, 1 - first, workers, clean=False, session_present=True
        )
        _resend_is_not_delivered(publisher, subscriber, topic)
        publisher.close()
        subscriber.close()
        broker.stop(signal.SIGKILL)

        broker = start_broker(tmp_path, None, data)
        subscriber = connect_raw(broker, subscriber_id, clean=False, session_present=True)
        publisher = connect_raw(broker, publisher_id, clean=False, session_present=True)
        _resend_is_not_delivered(publisher, subscriber, topic)
        publisher.send(PubRel(7))
        assert publisher.expect() == PubComp(7)
        # Released: the id is new again.
        publisher.send(Publish(topic, b"again", qos=2, packet_id=7))
        assert publisher.expect() == PubRec(7)
        _complete_delivery(subscriber, b"again")
        publisher.close()
        subscriber.close()
    finally:
        assert broker.stop() == 0, broker.log()


def test_a_refused_qos2_id_is_new_again_in_5_0(broker: BrokerProcess) -> None:
    """After PUBREC 0x87 a PUBLISH with the same id is a new message [MQTT-4.3.3-9]."""
    topic = unique("reused")
    subscriber = connect_raw(broker, unique("reused-sub"))
    subscribe_raw(subscriber, 1, (topic, 2))
    publisher = connect_raw(broker, unique("reused-pub"), version=5)
    publisher.send(Publish("$SYS/forged", b"no", qos=2, packet_id=1))
    refusal = publisher.expect()
    assert isinstance(refusal, PubRec) and refusal.reason_code == ReasonCode.NOT_AUTHORIZED
    publisher.send(Publish(topic, b"yes", qos=2, packet_id=1))
    assert publisher.expect() == PubRec(1)
    _complete_delivery(subscriber, b"yes")
    publisher.close()
    subscriber.close()
