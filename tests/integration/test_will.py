"""The will message: published on every close not preceded by DISCONNECT, never after one.

Closes covered here: the client's socket closing, a protocol violation, and a takeover
(keep-alive expiry is in test_connect.py). The will keeps its QoS and RETAIN flag
[MQTT-3.1.2-8] [MQTT-3.1.2-10] [MQTT-3.1.2-14] [MQTT-3.1.2-17].
"""

from __future__ import annotations

import pytest

from mqtt.packets import Disconnect, Publish, Will
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient


def _watcher(broker: BrokerProcess, topic: str) -> RawClient:
    watcher = connect_raw(broker, unique("watch"))
    subscribe_raw(watcher, 1, (topic, 2))
    return watcher


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_will_on_socket_close_keeps_its_qos_MQTT_3_1_2_8(broker: BrokerProcess, qos: int) -> None:
    topic = unique("will-close")
    watcher = _watcher(broker, topic)
    client = connect_raw(broker, unique("dies"), will=Will(topic, b"bye", qos=qos))
    client.close()
    will = expect_publish(watcher)
    assert (will.topic, will.payload, will.qos, will.retain) == (topic, b"bye", qos, False)
    watcher.close()


def test_retained_will_is_stored_and_replayed_with_retain_MQTT_3_1_2_17(
    broker: BrokerProcess,
) -> None:
    topic = unique("will-retain")
    client = connect_raw(broker, unique("dies-r"), will=Will(topic, b"last", qos=1, retain=True))
    watcher = _watcher(broker, topic)
    client.close()
    live = expect_publish(watcher)
    assert (live.payload, live.retain) == (b"last", False)  # live delivery [MQTT-3.3.1-9]
    late = connect_raw(broker, unique("late"))
    subscribe_raw(late, 1, (topic, 1))
    stored = expect_publish(late)
    assert (stored.payload, stored.qos, stored.retain) == (b"last", 1, True)
    for other in (watcher, late):
        other.close()


def test_will_on_protocol_violation_MQTT_3_1_2_8(broker: BrokerProcess) -> None:
    topic = unique("will-bad")
    watcher = _watcher(broker, topic)
    client = connect_raw(broker, unique("bad"), will=Will(topic, b"broken", qos=1))
    client.send_bytes(b"\x36\x05\x00\x01a\x00\x01")  # PUBLISH with QoS 3 [MQTT-3.3.1-4]
    assert client.is_closed_by_broker(3)
    assert expect_publish(watcher).payload == b"broken"
    client.close()
    watcher.close()


def test_will_on_takeover_MQTT_3_1_4_2(broker: BrokerProcess) -> None:
    topic = unique("will-take")
    client_id = unique("taken")
    watcher = _watcher(broker, topic)
    first = connect_raw(broker, client_id, will=Will(topic, b"taken-over", qos=1))
    second = connect_raw(broker, client_id)
    assert first.is_closed_by_broker(3)
    assert expect_publish(watcher).payload == b"taken-over"
    watcher.expect_nothing(0.3)  # only the first connection's will, once
    second.send(Disconnect())
    assert second.is_closed_by_broker(3)
    for client in (first, second, watcher):
        client.close()


def test_no_will_after_disconnect_MQTT_3_1_2_10(broker: BrokerProcess) -> None:
    topic = unique("will-none")
    watcher = _watcher(broker, topic)
    client = connect_raw(broker, unique("polite"), will=Will(topic, b"never", qos=1))
    client.send(Disconnect())
    assert client.is_closed_by_broker(3)
    client.close()
    watcher.expect_nothing(0.5)
    # The watcher is still subscribed: a message on the topic does arrive.
    publisher = connect_raw(broker, unique("pub"))
    publisher.send(Publish(topic, b"control"))
    assert expect_publish(watcher).payload == b"control"
    watcher.close()
    publisher.close()


@pytest.mark.parametrize("clean", [True, False])
def test_no_will_after_a_disconnect_the_next_connect_overtakes_MQTT_3_14_4_3(
    broker: BrokerProcess, clean: bool
) -> None:
    """The client sends DISCONNECT, then CONNECT on a connection it opened before: the
    broker may read that CONNECT first. The takeover waits until the first connection has
    handled what it received, so the DISCONNECT discards the will [MQTT-3.14.4-3] and the
    session is resumed [MQTT-3.2.2-2] or replaced [MQTT-3.1.2-4] as the flag says. The
    order is the event loop's, so the test runs it 40 times."""
    topic = unique("will-overtaken")
    watcher = _watcher(broker, topic)
    for _round in range(40):
        client_id = unique("overtaken")
        first = connect_raw(broker, client_id, clean=clean, will=Will(topic, b"never", qos=1))
        second = RawClient(broker.host, broker.port)
        first.send(Disconnect())
        first.close()
        connack = second.connect(client_id, clean=clean)
        assert (connack.reason_code, connack.session_present) == (0, not clean), connack
        second.close()
    watcher.expect_nothing(0.5)
    watcher.close()


def test_v5_disconnect_with_will_message_publishes_the_will(broker: BrokerProcess) -> None:
    # MQTT 5.0 DISCONNECT reason 0x04 "Disconnect with Will Message": the client disconnects
    # cleanly but asks for its will [MQTT-3.14.4-3] does not discard it then.
    topic = unique("will-asked")
    watcher = _watcher(broker, topic)
    client = connect_raw(broker, unique("asks"), version=5, will=Will(topic, b"asked", qos=1))
    client.send(Disconnect(reason_code=0x04))
    assert client.is_closed_by_broker(3)
    assert expect_publish(watcher).payload == b"asked"
    client.close()
    watcher.close()
