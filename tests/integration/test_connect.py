"""CONNECT handling over TCP: first-packet rule, protocol checks, client ids, keep-alive, timeouts.

Also: MQTT 3.1 (`MQIsdp`) and MQTT 5 clients, PINGREQ/PINGRESP, and DISCONNECT.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import paho.mqtt.client as paho

from mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    Publish,
    Subscribe,
    Subscription,
    Will,
)
from mqtt.reason_codes import ConnackReturnCode
from tests.support.broker_process import BrokerProcess
from tests.support.clients import (
    PahoCollector,
    connect_raw,
    expect_publish,
    subscribe_raw,
    unique,
)
from tests.support.raw_client import RawClient


def test_first_packet_not_connect_closes_MQTT_3_1_0_1(broker: BrokerProcess) -> None:
    client = RawClient(broker.host, broker.port)
    client.send_bytes(b"\xc0\x00")  # PINGREQ before CONNECT
    assert client.is_closed_by_broker(3)
    client.close()


def test_subscribe_before_connect_closes_MQTT_3_1_0_1(broker: BrokerProcess) -> None:
    client = RawClient(broker.host, broker.port)
    client.send(Subscribe(1, [Subscription("x/#", 0)]))
    assert client.is_closed_by_broker(3)
    client.close()


def test_second_connect_is_a_protocol_violation_MQTT_3_1_0_2(broker: BrokerProcess) -> None:
    client_id = unique("twice")
    client = connect_raw(broker, client_id)
    client.send(Connect(client_id=client_id))
    assert client.is_closed_by_broker(3)
    client.close()


def test_unsupported_protocol_level_gets_connack_1_then_close_MQTT_3_1_2_2(
    broker: BrokerProcess,
) -> None:
    client = RawClient(broker.host, broker.port)
    client.send(Connect(client_id=unique("level6"), protocol_version=6))
    connack = client.expect()
    assert isinstance(connack, ConnAck)
    assert connack.reason_code == ConnackReturnCode.UNACCEPTABLE_PROTOCOL_VERSION
    assert client.is_closed_by_broker(3)
    client.close()


def test_protocol_name_level_mismatch_gets_connack_1_MQTT_3_1_2_2(broker: BrokerProcess) -> None:
    client = RawClient(broker.host, broker.port)
    # "MQTT" with level 3 (3.1 must say "MQIsdp").
    client.send(Connect(client_id=unique("mismatch"), protocol_version=3, protocol_name="MQTT"))
    connack = client.expect()
    assert isinstance(connack, ConnAck)
    assert connack.reason_code == ConnackReturnCode.UNACCEPTABLE_PROTOCOL_VERSION
    assert client.is_closed_by_broker(3)
    client.close()


def test_unknown_protocol_name_closes_without_session_MQTT_3_1_2_1(
    broker: BrokerProcess,
) -> None:
    client = RawClient(broker.host, broker.port)
    client.send(Connect(client_id=unique("name"), protocol_name="MQTX"))
    assert client.is_closed_by_broker(3)
    client.close()


def test_empty_client_id_with_clean_session_gets_an_id_MQTT_3_1_3_6(
    broker: BrokerProcess,
) -> None:
    first = connect_raw(broker, "", clean=True, session_present=False)
    second = connect_raw(broker, "", clean=True, session_present=False)
    # Two anonymous clients get different ids: neither takes the other over.
    topic = unique("anon")
    subscribe_raw(first, 1, (topic, 0))
    second.send(Publish(topic, b"to-first"))
    assert expect_publish(first).payload == b"to-first"
    second.send(PingReq())
    assert isinstance(second.expect(), PingResp)
    first.close()
    second.close()


def test_empty_client_id_without_clean_session_refused_0x02_MQTT_3_1_3_8(
    broker: BrokerProcess,
) -> None:
    client = RawClient(broker.host, broker.port)
    connack = client.connect("", clean=False)
    assert isinstance(connack, ConnAck)
    assert connack.reason_code == ConnackReturnCode.IDENTIFIER_REJECTED
    assert client.is_closed_by_broker(3)
    client.close()


def test_keepalive_expiry_closes_and_fires_will_MQTT_3_1_2_24(broker: BrokerProcess) -> None:
    will_topic = unique("ka-will")
    watcher = connect_raw(broker, unique("ka-watch"))
    subscribe_raw(watcher, 1, (will_topic, 1))
    silent = connect_raw(
        broker, unique("ka-silent"), keepalive=1, will=Will(will_topic, b"gone", qos=1)
    )
    started = time.monotonic()
    assert silent.is_closed_by_broker(4)
    waited = time.monotonic() - started
    # 1.5 x keep-alive of 1 s; a little slack for scheduling, never before 1 s.
    assert 1.0 <= waited <= 2.5, waited
    will = expect_publish(watcher, timeout=2)
    assert (will.topic, will.payload, will.qos) == (will_topic, b"gone", 1)
    silent.close()
    watcher.close()


def test_pingreq_keeps_connection_alive_and_gets_pingresp_MQTT_3_12_4_1(
    broker: BrokerProcess,
) -> None:
    client = connect_raw(broker, unique("pinger"), keepalive=1)
    for _ in range(5):  # 2.5 s of traffic: more than the 1.5 s deadline
        time.sleep(0.5)
        client.send(PingReq())
        assert isinstance(client.expect(timeout=1), PingResp)
    client.send(Disconnect())
    assert client.is_closed_by_broker(3)
    client.close()


def test_no_connect_within_connect_timeout_closes(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    server = broker_factory("[limits]\nconnect_timeout = 0.5\n")
    client = RawClient(server.host, server.port)
    started = time.monotonic()
    assert client.is_closed_by_broker(3)
    waited = time.monotonic() - started
    assert 0.4 <= waited <= 1.5, waited
    client.close()
    # A client that does send CONNECT in time is served normally.
    prompt = connect_raw(server, unique("prompt"))
    prompt.send(PingReq())
    assert isinstance(prompt.expect(), PingResp)
    prompt.close()


def test_mqtt_3_1_client_is_accepted(broker: BrokerProcess) -> None:
    topic = unique("v31")
    client = connect_raw(broker, unique("v31c"), version=3, protocol_name="MQIsdp")
    subscribe_raw(client, 1, (topic, 1))
    client.send(Publish(topic, b"old", qos=1, packet_id=2))
    packets = [client.expect(), client.expect()]
    kinds = sorted(type(p).__name__ for p in packets)
    assert kinds == ["PubAck", "Publish"], packets
    publish = next(p for p in packets if isinstance(p, Publish))
    assert (publish.topic, publish.payload, publish.qos) == (topic, b"old", 1)
    client.close()


def test_paho_mqtt_3_1_client_round_trip(broker: BrokerProcess) -> None:
    topic = unique("paho31")
    client = PahoCollector(broker, unique("paho31c"), protocol=paho.MQTTv31)
    assert client.subscribe(topic, 1)[0].value == 1
    client.publish(topic, b"v31", qos=1)
    message = client.next_message()
    assert (message.topic, message.payload, message.qos) == (topic, b"v31", 1)
    client.close()


def test_mqtt_5_client_connects_subscribes_and_publishes(broker: BrokerProcess) -> None:
    topic = unique("v5")
    client = PahoCollector(broker, unique("v5c"), protocol=paho.MQTTv5)
    assert not client.connect_reason.is_failure
    codes = client.subscribe(topic, 2)
    assert [code.value for code in codes] == [2]
    for qos in (0, 1, 2):
        client.publish(topic, f"q{qos}".encode(), qos=qos)
        message = client.next_message()
        assert (message.topic, message.payload, message.qos) == (topic, f"q{qos}".encode(), qos)
    client.close()


def test_disconnect_closes_the_connection(broker: BrokerProcess) -> None:
    client_id = unique("bye")
    client = connect_raw(broker, client_id)
    client.send(Disconnect())
    assert client.is_closed_by_broker(3)
    client.close()
    # Clean session 1: nothing was kept for the id [MQTT-3.2.2-1].
    again = connect_raw(broker, client_id, session_present=False)
    again.close()
