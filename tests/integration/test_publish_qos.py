"""PUBLISH at QoS 0/1/2 in both directions, checked packet by packet on raw sockets.

Covers the acknowledgement flows and their packet ids, exactly-once for incoming QoS 2,
the delivery QoS rule, overlapping subscriptions, and the outgoing in-flight window with
redelivery (DUP=1, same packet id, original order) on reconnect of a persistent session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqtt.packets import PubAck, PubComp, Publish, PubRec, PubRel
from tests.support.broker_config import running_broker
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient


@pytest.fixture(scope="module")
def window_broker(
    tmp_path_factory: pytest.TempPathFactory, workers: int
) -> Iterator[BrokerProcess]:
    """A broker whose sessions have an outgoing in-flight window of 2."""
    with running_broker(tmp_path_factory.mktemp("window"), "[limits]\nmax_inflight = 2\n") as b:
        yield b


def _expect(client: RawClient, packet: object) -> None:
    received = client.expect()
    assert received == packet, f"expected {packet!r}, got {received!r}"


def test_qos0_publish_is_delivered_at_qos0(broker: BrokerProcess) -> None:
    topic = unique("q0")
    subscriber = connect_raw(broker, unique("q0s"))
    subscribe_raw(subscriber, 1, (topic, 2))
    publisher = connect_raw(broker, unique("q0p"))
    publisher.send(Publish(topic, b"zero"))
    publish = expect_publish(subscriber)
    assert (publish.topic, publish.payload, publish.qos, publish.packet_id) == (
        topic,
        b"zero",
        0,
        None,
    )
    publisher.expect_nothing(0.2)  # QoS 0 gets no acknowledgement
    subscriber.close()
    publisher.close()


def test_qos1_flow_puback_with_same_packet_id_MQTT_4_3_2_2(broker: BrokerProcess) -> None:
    topic = unique("q1")
    subscriber = connect_raw(broker, unique("q1s"))
    subscribe_raw(subscriber, 1, (topic, 1))
    publisher = connect_raw(broker, unique("q1p"))
    publisher.send(Publish(topic, b"one", qos=1, packet_id=4242))
    _expect(publisher, PubAck(4242))
    publish = expect_publish(subscriber)
    assert (publish.payload, publish.qos, publish.dup) == (b"one", 1, False)
    assert publish.packet_id
    subscriber.send(PubAck(publish.packet_id))
    subscriber.expect_nothing(0.2)
    subscriber.close()
    publisher.close()


def test_qos2_inbound_is_exactly_once_MQTT_4_3_3_2(broker: BrokerProcess) -> None:
    topic = unique("q2in")
    subscriber = connect_raw(broker, unique("q2ins"))
    subscribe_raw(subscriber, 1, (topic, 0))
    publisher = connect_raw(broker, unique("q2inp"))
    publisher.send(Publish(topic, b"once", qos=2, packet_id=9))
    _expect(publisher, PubRec(9))
    # The client did not see PUBREC (say) and resends with DUP=1 before releasing.
    publisher.send(Publish(topic, b"once", qos=2, dup=True, packet_id=9))
    _expect(publisher, PubRec(9))
    publisher.send(PubRel(9))
    _expect(publisher, PubComp(9))
    assert expect_publish(subscriber).payload == b"once"
    subscriber.expect_nothing(0.3)
    # After PUBCOMP the packet id is free: the same id now carries a new message.
    publisher.send(Publish(topic, b"again", qos=2, packet_id=9))
    _expect(publisher, PubRec(9))
    publisher.send(PubRel(9))
    _expect(publisher, PubComp(9))
    assert expect_publish(subscriber).payload == b"again"
    subscriber.close()
    publisher.close()


def test_qos2_outbound_flow_pubrec_pubrel_pubcomp_MQTT_4_3_3_1(broker: BrokerProcess) -> None:
    topic = unique("q2out")
    subscriber = connect_raw(broker, unique("q2outs"))
    subscribe_raw(subscriber, 1, (topic, 2))
    publisher = connect_raw(broker, unique("q2outp"))
    publisher.send(Publish(topic, b"two", qos=2, packet_id=1))
    _expect(publisher, PubRec(1))
    publisher.send(PubRel(1))
    _expect(publisher, PubComp(1))
    publish = expect_publish(subscriber)
    assert (publish.payload, publish.qos) == (b"two", 2)
    assert publish.packet_id
    subscriber.send(PubRec(publish.packet_id))
    _expect(subscriber, PubRel(publish.packet_id))
    subscriber.send(PubComp(publish.packet_id))
    subscriber.expect_nothing(0.3)  # no redelivery once complete
    subscriber.close()
    publisher.close()


def test_delivery_qos_is_min_of_publish_and_granted_qos_MQTT_3_8_4_6(
    broker: BrokerProcess,
) -> None:
    topic = unique("minqos")
    subscribers = {}
    for granted in (0, 1, 2):
        client = connect_raw(broker, unique(f"min{granted}"))
        assert subscribe_raw(client, 1, (topic, granted)).reason_codes == [granted]
        subscribers[granted] = client
    publisher = connect_raw(broker, unique("minp"))
    for packet_id, published in enumerate((0, 1, 2), start=1):
        packet_id_or_none = packet_id if published else None
        publisher.send(Publish(topic, b"m", qos=published, packet_id=packet_id_or_none))
        if published == 1:
            _expect(publisher, PubAck(packet_id))
        elif published == 2:
            _expect(publisher, PubRec(packet_id))
            publisher.send(PubRel(packet_id))
            _expect(publisher, PubComp(packet_id))
        for granted, client in subscribers.items():
            publish = expect_publish(client)
            assert publish.qos == min(published, granted), (published, granted)
            if publish.qos == 1:
                client.send(PubAck(publish.packet_id))
            elif publish.qos == 2:
                client.send(PubRec(publish.packet_id))
                _expect(client, PubRel(publish.packet_id))
                client.send(PubComp(publish.packet_id))
    for client in [*subscribers.values(), publisher]:
        client.close()


def test_overlapping_subscriptions_deliver_once_at_highest_qos_MQTT_3_3_5_1(
    broker: BrokerProcess,
) -> None:
    prefix = unique("overlap")
    subscriber = connect_raw(broker, unique("ovs"))
    suback = subscribe_raw(
        subscriber, 1, (f"{prefix}/a/x", 0), (f"{prefix}/+/x", 2), (f"{prefix}/#", 1)
    )
    assert suback.reason_codes == [0, 2, 1]
    publisher = connect_raw(broker, unique("ovp"))
    publisher.send(Publish(f"{prefix}/a/x", b"p", qos=1, packet_id=3))
    _expect(publisher, PubAck(3))
    publish = expect_publish(subscriber)
    assert (publish.payload, publish.qos) == (b"p", 1)  # min(1, highest granted 2)
    subscriber.send(PubAck(publish.packet_id))
    subscriber.expect_nothing(0.3)
    subscriber.close()
    publisher.close()


def _publish_qos1(publisher: RawClient, topic: str, payloads: list[bytes]) -> None:
    for packet_id, payload in enumerate(payloads, start=1):
        publisher.send(Publish(topic, payload, qos=1, packet_id=packet_id))
        _expect(publisher, PubAck(packet_id))


def test_inflight_window_limits_unacked_deliveries(window_broker: BrokerProcess) -> None:
    topic = unique("window")
    subscriber = connect_raw(window_broker, unique("wins"))
    subscribe_raw(subscriber, 1, (topic, 1))
    publisher = connect_raw(window_broker, unique("winp"))
    _publish_qos1(publisher, topic, [b"m0", b"m1", b"m2", b"m3"])
    first, second = expect_publish(subscriber), expect_publish(subscriber)
    assert [first.payload, second.payload] == [b"m0", b"m1"]
    subscriber.expect_nothing(0.3)  # window of 2 is full
    subscriber.send(PubAck(first.packet_id))
    third = expect_publish(subscriber)
    assert third.payload == b"m2"
    # Packet ids in use are never reused [MQTT-2.3.1-2].
    assert third.packet_id != second.packet_id
    subscriber.expect_nothing(0.3)
    subscriber.send(PubAck(second.packet_id))
    subscriber.send(PubAck(third.packet_id))
    assert expect_publish(subscriber).payload == b"m3"
    subscriber.close()
    publisher.close()


def test_unacked_publishes_resent_with_dup_on_reconnect_MQTT_4_4_0_1(
    window_broker: BrokerProcess,
) -> None:
    topic = unique("resend")
    client_id = unique("resends")
    subscriber = connect_raw(window_broker, client_id, clean=False)
    subscribe_raw(subscriber, 1, (topic, 1))
    publisher = connect_raw(window_broker, unique("resendp"))
    _publish_qos1(publisher, topic, [b"m0", b"m1", b"m2"])
    first, second = expect_publish(subscriber), expect_publish(subscriber)
    subscriber.close()  # no acknowledgement, no DISCONNECT

    again = connect_raw(window_broker, client_id, clean=False, session_present=True)
    resent = [expect_publish(again), expect_publish(again)]
    assert [(p.payload, p.packet_id, p.dup) for p in resent] == [
        (b"m0", first.packet_id, True),
        (b"m1", second.packet_id, True),
    ]
    again.expect_nothing(0.3)  # m2 waits for a free slot
    again.send(PubAck(first.packet_id))
    third = expect_publish(again)
    assert (third.payload, third.dup) == (b"m2", False)
    assert third.packet_id != second.packet_id
    again.send(PubAck(second.packet_id))
    again.send(PubAck(third.packet_id))
    again.expect_nothing(0.3)
    again.close()
    publisher.close()


def test_pubrel_resent_before_unacked_publish_in_original_order_MQTT_4_4_0_1(
    broker: BrokerProcess,
) -> None:
    topic = unique("relresend")
    client_id = unique("relresends")
    subscriber = connect_raw(broker, client_id, clean=False)
    subscribe_raw(subscriber, 1, (topic, 2))
    publisher = connect_raw(broker, unique("relresendp"))
    for packet_id, payload in ((1, b"a"), (2, b"b")):
        publisher.send(Publish(topic, payload, qos=2, packet_id=packet_id))
        _expect(publisher, PubRec(packet_id))
        publisher.send(PubRel(packet_id))
        _expect(publisher, PubComp(packet_id))
    first, second = expect_publish(subscriber), expect_publish(subscriber)
    assert [first.payload, second.payload] == [b"a", b"b"]
    subscriber.send(PubRec(first.packet_id))
    _expect(subscriber, PubRel(first.packet_id))
    subscriber.close()  # neither PUBCOMP for "a" nor PUBREC for "b"

    again = connect_raw(broker, client_id, clean=False, session_present=True)
    _expect(again, PubRel(first.packet_id))
    resent = expect_publish(again)
    assert (resent.payload, resent.qos, resent.dup, resent.packet_id) == (
        b"b",
        2,
        True,
        second.packet_id,
    )
    again.send(PubComp(first.packet_id))
    again.send(PubRec(second.packet_id))
    _expect(again, PubRel(second.packet_id))
    again.send(PubComp(second.packet_id))
    again.expect_nothing(0.3)
    again.close()
    publisher.close()
