"""Retained messages: stored per topic, replaced, cleared, replayed on subscribe.

Replayed messages carry RETAIN=1 and the QoS min(stored, granted) [MQTT-3.3.1-6/8]; live
deliveries carry RETAIN=0 [MQTT-3.3.1-9]; an empty payload clears the topic
[MQTT-3.3.1-10/11]; `#` and `+/...` do not replay `$` topics [MQTT-4.7.2-1].
"""

from __future__ import annotations

from mqtt.packets import PubAck, Publish, SubAck, Subscribe, Subscription
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient


def _retain(broker: BrokerProcess, topic: str, payload: bytes, qos: int = 1) -> None:
    publisher = connect_raw(broker, unique("retainer"))
    publisher.send(Publish(topic, payload, qos=qos, retain=True, packet_id=1 if qos else None))
    if qos:
        assert publisher.expect() == PubAck(1)
    else:  # QoS 0 has no ack: a PINGREQ round trip shows the PUBLISH was read
        publisher.send_bytes(b"\xc0\x00")
        publisher.expect()
    publisher.close()


def _replayed(broker: BrokerProcess, topic_filter: str, qos: int = 2) -> list[Publish]:
    """Subscribe a fresh client to `topic_filter`; collect until 0.3 s of silence."""
    client = connect_raw(broker, unique("late"))
    subscribe_raw(client, 1, (topic_filter, qos))
    return _drain(client)


def _drain(client: RawClient) -> list[Publish]:
    received: list[Publish] = []
    while True:
        try:
            publish = expect_publish(client, timeout=0.3)
        except TimeoutError:
            client.close()
            return received
        received.append(publish)


def test_retained_message_replayed_with_retain_flag_MQTT_3_3_1_6(broker: BrokerProcess) -> None:
    topic = unique("ret")
    _retain(broker, topic, b"stored", qos=1)
    [publish] = _replayed(broker, topic, qos=1)
    assert (publish.topic, publish.payload, publish.qos, publish.retain) == (
        topic,
        b"stored",
        1,
        True,
    )


def test_retained_qos_capped_by_granted_qos_MQTT_3_3_1_8(broker: BrokerProcess) -> None:
    topic = unique("retcap")
    _retain(broker, topic, b"q1", qos=1)
    [publish] = _replayed(broker, topic, qos=0)
    assert (publish.qos, publish.retain) == (0, True)


def test_qos0_retained_message_is_kept_MQTT_3_3_1_7(broker: BrokerProcess) -> None:
    topic = unique("ret0")
    _retain(broker, topic, b"zero", qos=0)
    [publish] = _replayed(broker, topic)
    assert (publish.payload, publish.qos, publish.retain) == (b"zero", 0, True)


def test_newer_retained_message_replaces_older_MQTT_3_3_1_5(broker: BrokerProcess) -> None:
    topic = unique("retnew")
    _retain(broker, topic, b"old")
    _retain(broker, topic, b"new")
    assert [p.payload for p in _replayed(broker, topic)] == [b"new"]


def test_empty_payload_clears_retained_message_MQTT_3_3_1_10(broker: BrokerProcess) -> None:
    topic = unique("retclear")
    _retain(broker, topic, b"doomed")
    _retain(broker, topic, b"")
    assert _replayed(broker, topic) == []


def test_wildcard_subscription_replays_all_matching_retained(broker: BrokerProcess) -> None:
    prefix = unique("retwild")
    for topic in (f"{prefix}/a", f"{prefix}/b/c", f"{prefix}/d"):
        _retain(broker, topic, topic.encode())
    _retain(broker, f"{prefix}-other/a", b"not-matched")
    replayed = _replayed(broker, f"{prefix}/#")
    assert sorted(p.topic for p in replayed) == [f"{prefix}/a", f"{prefix}/b/c", f"{prefix}/d"]
    assert all(p.retain for p in replayed)
    assert sorted(p.topic for p in _replayed(broker, f"{prefix}/+")) == [
        f"{prefix}/a",
        f"{prefix}/d",
    ]


def test_live_delivery_of_retained_publish_has_retain_0_MQTT_3_3_1_9(
    broker: BrokerProcess,
) -> None:
    topic = unique("retlive")
    subscriber = connect_raw(broker, unique("live"))
    subscribe_raw(subscriber, 1, (topic, 1))
    _retain(broker, topic, b"now")
    publish = expect_publish(subscriber)
    assert (publish.payload, publish.retain) == (b"now", False)
    subscriber.send(PubAck(publish.packet_id))
    subscriber.close()


def test_retained_sent_after_suback_MQTT_3_3_1_6(broker: BrokerProcess) -> None:
    topic = unique("retorder")
    _retain(broker, topic, b"after")
    client = connect_raw(broker, unique("order"))
    client.send(Subscribe(7, [Subscription(topic, 1)]))
    assert isinstance(client.expect(), SubAck)
    assert expect_publish(client).payload == b"after"
    client.close()


def test_dollar_topics_not_replayed_to_leading_wildcards_MQTT_4_7_2_1(
    broker: BrokerProcess,
) -> None:
    level = unique("dollar")
    dollar_topic = f"${level}/{level}"
    plain_topic = f"{level}/{level}"
    _retain(broker, dollar_topic, b"hidden")
    _retain(broker, plain_topic, b"visible")
    everything = _replayed(broker, "#")
    assert plain_topic in {p.topic for p in everything}
    assert not [p.topic for p in everything if p.topic.startswith("$")]
    assert [p.topic for p in _replayed(broker, f"+/{level}")] == [plain_topic]
    assert [p.payload for p in _replayed(broker, f"${level}/#")] == [b"hidden"]
