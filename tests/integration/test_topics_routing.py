"""Topic filters as the router applies them, observed over TCP; SUBACK and UNSUBSCRIBE.

Matching rules (MQTT 3.1.1 section 4.7): `+` matches exactly one level, including an empty
one [MQTT-4.7.1-3]; `#` matches the parent level and any number of levels below it
[MQTT-4.7.1-2]; a filter starting with a wildcard does not match a topic starting with `$`
[MQTT-4.7.2-1].
"""

from __future__ import annotations

import pytest

from mqtt.packets import PingReq, PingResp, Publish, UnsubAck, Unsubscribe
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

# (filter, topics published, topics expected), with "P" replaced by a unique prefix.
MATCH_CASES = [
    ("P/+", ["P/a", "P/", "P/a/b", "P", "Q/a"], ["P/a", "P/"]),
    ("P/#", ["P", "P/", "P/a", "P/a/b/c", "PP/a"], ["P", "P/", "P/a", "P/a/b/c"]),
    ("P/+/c", ["P/b/c", "P//c", "P/b/d", "P/b/c/d", "P/c"], ["P/b/c", "P//c"]),
    ("P/+/#", ["P", "P/a", "P/a/b", "P//"], ["P/a", "P/a/b", "P//"]),
    ("P//x", ["P//x", "P/x", "P/a/x"], ["P//x"]),
    ("P/a", ["P/a", "P/a/", "P/A", "P/ab"], ["P/a"]),
]


def _publish_all(publisher: RawClient, topics: list[str]) -> None:
    for topic in topics:
        publisher.send(Publish(topic, topic.encode()))
    publisher.send(PingReq())  # PINGRESP after all the PUBLISHes were read and routed
    assert isinstance(publisher.expect(), PingResp)


def _received_topics(client: RawClient) -> list[str]:
    topics = []
    while True:
        try:
            topics.append(expect_publish(client, timeout=0.3).topic)
        except TimeoutError:
            return topics


@pytest.mark.parametrize(("topic_filter", "published", "expected"), MATCH_CASES)
def test_wildcard_matching_MQTT_4_7_1(
    broker: BrokerProcess, topic_filter: str, published: list[str], expected: list[str]
) -> None:
    prefix = unique("m")

    def concrete(text: str) -> str:
        return text.replace("P", prefix, 1).replace("Q", prefix + "q", 1)

    subscriber = connect_raw(broker, unique("ms"))
    subscribe_raw(subscriber, 1, (concrete(topic_filter), 0))
    publisher = connect_raw(broker, unique("mp"))
    _publish_all(publisher, [concrete(t) for t in published])
    assert _received_topics(subscriber) == [concrete(t) for t in expected]
    subscriber.close()
    publisher.close()


def test_dollar_topics_not_matched_by_leading_wildcards_MQTT_4_7_2_1(
    broker: BrokerProcess,
) -> None:
    level = unique("dl")
    wildcard_subscriber = connect_raw(broker, unique("dlw"))
    subscribe_raw(wildcard_subscriber, 1, ("#", 0), (f"+/{level}", 0))
    dollar_subscriber = connect_raw(broker, unique("dld"))
    subscribe_raw(dollar_subscriber, 1, (f"${level}/#", 0))
    publisher = connect_raw(broker, unique("dlp"))
    _publish_all(publisher, [f"${level}/{level}", f"{level}/{level}"])
    # The control topic arrives once although both filters match it [MQTT-3.3.5-1].
    assert _received_topics(wildcard_subscriber) == [f"{level}/{level}"]
    assert _received_topics(dollar_subscriber) == [f"${level}/{level}"]
    for client in (wildcard_subscriber, dollar_subscriber, publisher):
        client.close()


def test_suback_grants_requested_qos_per_filter_MQTT_3_9_3_1(broker: BrokerProcess) -> None:
    prefix = unique("grant")
    client = connect_raw(broker, unique("grants"))
    suback = subscribe_raw(
        client, 77, (f"{prefix}/0", 0), (f"{prefix}/2", 2), (f"{prefix}/1", 1), (f"{prefix}/#", 2)
    )
    assert suback.reason_codes == [0, 2, 1, 2]
    # Subscribing again replaces the subscription; the new QoS is granted [MQTT-3.8.4-3].
    assert subscribe_raw(client, 78, (f"{prefix}/2", 0)).reason_codes == [0]
    publisher = connect_raw(broker, unique("grantp"))
    publisher.send(Publish(f"{prefix}/2", b"x", qos=1, packet_id=1))
    publisher.expect()
    publish = expect_publish(client)
    assert publish.qos == 1  # now via "#" at QoS 2, not the replaced QoS 0 filter
    client.expect_nothing(0.3)  # and once only
    client.close()
    publisher.close()


def test_unsubscribe_stops_delivery_after_unsuback_MQTT_3_10_4_2(broker: BrokerProcess) -> None:
    prefix = unique("unsub")
    client = connect_raw(broker, unique("unsubs"))
    subscribe_raw(client, 1, (f"{prefix}/a", 0), (f"{prefix}/b", 0))
    client.send(Unsubscribe(5, [f"{prefix}/a", f"{prefix}/never-subscribed"]))
    unsuback = client.expect()
    assert isinstance(unsuback, UnsubAck)
    assert unsuback.packet_id == 5  # [MQTT-3.10.4-4]
    publisher = connect_raw(broker, unique("unsubp"))
    _publish_all(publisher, [f"{prefix}/a", f"{prefix}/b"])
    assert _received_topics(client) == [f"{prefix}/b"]
    client.close()
    publisher.close()
