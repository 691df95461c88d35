"""The broker starts, a paho client connects, subscribes, publishes and receives."""

from __future__ import annotations

import queue
import threading

import paho.mqtt.client as paho

from tests.support.broker_process import BrokerProcess


def test_paho_publish_subscribe_round_trip(broker: BrokerProcess) -> None:
    received: queue.Queue[paho.MQTTMessage] = queue.Queue()
    subscribed = threading.Event()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="smoke")
    client.on_message = lambda _c, _u, message: received.put(message)
    client.on_subscribe = lambda *_args: subscribed.set()
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        client.subscribe("smoke/#", qos=1)
        assert subscribed.wait(5)
        client.publish("smoke/a", b"hello", qos=1).wait_for_publish(5)
        message = received.get(timeout=5)
        assert (message.topic, message.payload, message.qos) == ("smoke/a", b"hello", 1)
    finally:
        client.disconnect()
        client.loop_stop()
