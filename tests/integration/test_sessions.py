"""Sessions over TCP: takeover, the session-present flag, and persistent-session queueing.

A persistent session (clean session 0) keeps its subscriptions and queues QoS 1/2 messages
while its client is away; QoS 0 only with `[limits] queue_qos0 = true`; the queue is bounded
by `max_queued_messages` and drops the oldest message first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mqtt.packets import (
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
)
from tests.support.broker_config import running_broker
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

QUEUE_CONFIG = "[limits]\nqueue_qos0 = true\nmax_queued_messages = 5\n"


@pytest.fixture(scope="module")
def queue_broker(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[BrokerProcess]:
    """A broker that queues QoS 0 for offline sessions and keeps at most 5 queued messages."""
    with running_broker(tmp_path_factory.mktemp("queue"), QUEUE_CONFIG) as process:
        yield process


def _publish(publisher: RawClient, topic: str, payload: bytes, qos: int, packet_id: int) -> None:
    """Publish and complete the publisher's side of the QoS flow."""
    publisher.send(Publish(topic, payload, qos=qos, packet_id=packet_id if qos else None))
    if qos == 1:
        assert publisher.expect() == PubAck(packet_id)
    elif qos == 2:
        assert publisher.expect() == PubRec(packet_id)
        publisher.send(PubRel(packet_id))
        assert publisher.expect() == PubComp(packet_id)


def _leave(client: RawClient) -> None:
    client.send(Disconnect())
    assert client.is_closed_by_broker(3)
    client.close()


def test_session_present_flag_MQTT_3_2_2_1_to_3(broker: BrokerProcess) -> None:
    client_id = unique("present")
    # No session yet, clean 0 -> session present 0 [MQTT-3.2.2-3].
    _leave(connect_raw(broker, client_id, clean=False, session_present=False))
    # Session kept, clean 0 -> session present 1 [MQTT-3.2.2-2].
    _leave(connect_raw(broker, client_id, clean=False, session_present=True))
    # Clean 1 discards it -> session present 0 [MQTT-3.2.2-1] ...
    _leave(connect_raw(broker, client_id, clean=True, session_present=False))
    # ... and nothing is kept after a clean session ends.
    _leave(connect_raw(broker, client_id, clean=False, session_present=False))
    _leave(connect_raw(broker, client_id, clean=True, session_present=False))


def test_takeover_closes_first_connection_and_keeps_session_MQTT_3_1_4_2(
    broker: BrokerProcess,
) -> None:
    client_id = unique("takeover")
    topic = unique("tk")
    first = connect_raw(broker, client_id, clean=False)
    subscribe_raw(first, 1, (topic, 1))
    second = connect_raw(broker, client_id, clean=False, session_present=True)
    assert first.is_closed_by_broker(3)
    first.close()
    publisher = connect_raw(broker, unique("tkp"))
    _publish(publisher, topic, b"to-second", 1, 1)
    publish = expect_publish(second)
    assert (publish.topic, publish.payload, publish.qos) == (topic, b"to-second", 1)
    second.send(PubAck(publish.packet_id))
    second.send(PingReq())
    assert isinstance(second.expect(), PingResp)
    second.close()
    publisher.close()


def test_takeover_with_clean_session_starts_a_new_session(broker: BrokerProcess) -> None:
    client_id = unique("takeclean")
    topic = unique("tc")
    first = connect_raw(broker, client_id, clean=False)
    subscribe_raw(first, 1, (topic, 1))
    second = connect_raw(broker, client_id, clean=True, session_present=False)
    assert first.is_closed_by_broker(3)
    first.close()
    publisher = connect_raw(broker, unique("tcp"))
    _publish(publisher, topic, b"nobody", 1, 1)
    second.expect_nothing(0.3)  # the old subscription went with the old session
    second.close()
    publisher.close()


def test_persistent_session_queues_qos1_qos2_in_order_not_qos0(broker: BrokerProcess) -> None:
    client_id = unique("persist")
    topic = unique("pq")
    subscriber = connect_raw(broker, client_id, clean=False)
    subscribe_raw(subscriber, 1, (topic, 2))
    _leave(subscriber)
    publisher = connect_raw(broker, unique("pqp"))
    sent = [(b"m1", 1), (b"m2", 2), (b"m3-qos0", 0), (b"m4", 1), (b"m5", 2)]
    for packet_id, (payload, qos) in enumerate(sent, start=1):
        _publish(publisher, topic, payload, qos, packet_id)

    again = connect_raw(broker, client_id, clean=False, session_present=True)
    queued = [expect_publish(again) for _ in range(4)]
    assert [(p.payload, p.qos) for p in queued] == [(b"m1", 1), (b"m2", 2), (b"m4", 1), (b"m5", 2)]
    again.expect_nothing(0.3)
    for publish in queued:
        if publish.qos == 1:
            again.send(PubAck(publish.packet_id))
        else:
            again.send(PubRec(publish.packet_id))
            assert again.expect() == PubRel(publish.packet_id)
            again.send(PubComp(publish.packet_id))
    # The subscription survived: live messages still arrive.
    _publish(publisher, topic, b"live", 0, 0)
    assert expect_publish(again).payload == b"live"
    again.close()
    publisher.close()


def test_queue_qos0_option_queues_qos0_for_offline_session(queue_broker: BrokerProcess) -> None:
    client_id = unique("q0queue")
    topic = unique("q0q")
    subscriber = connect_raw(queue_broker, client_id, clean=False)
    subscribe_raw(subscriber, 1, (topic, 1))
    _leave(subscriber)
    publisher = connect_raw(queue_broker, unique("q0qp"))
    _publish(publisher, topic, b"zero", 0, 0)
    _publish(publisher, topic, b"one", 1, 1)
    again = connect_raw(queue_broker, client_id, clean=False, session_present=True)
    first, second = expect_publish(again), expect_publish(again)
    assert [(first.payload, first.qos), (second.payload, second.qos)] == [
        (b"zero", 0),
        (b"one", 1),
    ]
    again.send(PubAck(second.packet_id))
    again.close()
    publisher.close()


def test_offline_queue_is_bounded_and_drops_oldest(queue_broker: BrokerProcess) -> None:
    client_id = unique("bounded")
    topic = unique("bq")
    subscriber = connect_raw(queue_broker, client_id, clean=False)
    subscribe_raw(subscriber, 1, (topic, 1))
    _leave(subscriber)
    publisher = connect_raw(queue_broker, unique("bqp"))
    for index in range(8):
        _publish(publisher, topic, f"m{index}".encode(), 1, index + 1)
    again = connect_raw(queue_broker, client_id, clean=False, session_present=True)
    received = []
    for _ in range(5):
        publish = expect_publish(again)
        received.append(publish.payload)
        again.send(PubAck(publish.packet_id))
    assert received == [b"m3", b"m4", b"m5", b"m6", b"m7"]
    again.expect_nothing(0.3)
    again.close()
    publisher.close()


SLOW_AUTH = '[[plugins]]\nmodule = "tests.support.test_plugins.slow_auth"\nprefix = "slow-"\n'


def test_clean_session_of_a_client_gone_before_connack_ends_MQTT_3_1_2_6(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A clean session lasts as long as its network connection [MQTT-3.1.2-6]. Here the client
    # closes while its CONNECT is still being authenticated, so its connection ends before
    # the session is attached: the session must end too, not stay attached to nobody.
    with running_broker(tmp_path_factory.mktemp("slow-auth"), SLOW_AUTH) as broker:
        client_id = unique("slow-")
        gone = RawClient(broker.host, broker.port)
        gone.send(Connect(client_id=client_id, clean_start=True, keepalive=60))
        gone.close()
        time.sleep(0.8)  # authentication (0.3 s) and the session's attach are over
        # No session is left for the client id: CONNACK says session present 0 [MQTT-3.2.2-2].
        later = connect_raw(broker, client_id, clean=False, session_present=False)
        later.close()
        # Control: the persistent session just made is kept and found.
        resumed = connect_raw(broker, client_id, clean=False, session_present=True)
        resumed.close()
