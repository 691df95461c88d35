"""MQTT 5.0 with paho-mqtt (`protocol=MQTTv5`): what a real client library sees.

Property forwarding and 3.x/5.0 interoperation on one topic, Subscription Identifiers,
the subscription options (No Local, Retain As Published, Retain Handling), CONNACK's
Response Information / Server Keep Alive / Assigned Client Identifier, and the hooks'
view of versions and properties.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from mqtt.packets import PubAck, Publish
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, connect_raw, unique

USER_PROPERTIES = [("first", "1"), ("second", "2"), ("first", "3")]


class V5Client:
    """A paho MQTTv5 client with CONNECT properties, collecting messages and CONNACK."""

    def __init__(
        self,
        broker: BrokerProcess,
        client_id: str,
        keepalive: int = 30,
        *,
        clean_start: bool = True,
        will: tuple[str, bytes, dict[str, Any]] | None = None,
        **connect: Any,
    ) -> None:
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.subacks: queue.Queue[list[Any]] = queue.Queue()
        self.connack: Any = None
        self.session_present = False
        connected = threading.Event()
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5
        )

        def on_connect(_c: Any, _u: Any, flags: Any, reason: Any, properties: Any) -> None:
            self.connack = (reason, properties)
            self.session_present = flags.session_present
            connected.set()

        self.client.on_connect = on_connect
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _p: self.subacks.put(list(codes))
        properties = Properties(PacketTypes.CONNECT)
        for name, value in connect.items():
            setattr(properties, name, value)
        if will is not None:
            topic, payload, will_props = will
            will_properties = Properties(PacketTypes.WILLMESSAGE)
            for name, value in will_props.items():
                setattr(will_properties, name, value)
            self.client.will_set(topic, payload, 1, properties=will_properties)
        self.client.connect(
            broker.host,
            broker.port,
            keepalive=keepalive,
            clean_start=clean_start,
            properties=properties if connect else None,
        )
        self.client.loop_start()
        assert connected.wait(5), "no CONNACK in 5 s"

    def subscribe(
        self, topic_filter: str, identifier: int | None = None, qos: int = 1, **options: Any
    ) -> int:
        properties = None
        if identifier is not None:
            properties = Properties(PacketTypes.SUBSCRIBE)
            properties.SubscriptionIdentifier = identifier
        self.client.subscribe(
            topic_filter, options=SubscribeOptions(qos=qos, **options), properties=properties
        )
        (code,) = self.subacks.get(timeout=5)
        return int(code.value)

    def publish(self, topic: str, payload: bytes, retain: bool = False, **props: Any) -> None:
        properties = Properties(PacketTypes.PUBLISH)
        for name, value in props.items():
            setattr(properties, name, value)
        info = self.client.publish(topic, payload, 1, retain, properties=properties)
        info.wait_for_publish(5)

    def next_message(self, timeout: float = 5.0) -> paho.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def assert_no_message(self, within: float = 0.3) -> None:
        try:
            message = self.messages.get(timeout=within)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message on {message.topic!r}")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def drop(self) -> None:
        """End the connection without DISCONNECT (as a crashed client would)."""
        self.client.loop_stop()
        sock = self.client.socket()
        assert sock is not None
        sock.close()


def test_properties_are_forwarded_to_v5_and_dropped_toward_v3(broker: BrokerProcess) -> None:
    topic = unique("props")
    v5_subscriber = V5Client(broker, unique("sub5"))
    v5_subscriber.subscribe(topic)
    v3_subscriber = PahoCollector(broker, unique("sub3"))
    v3_subscriber.subscribe(topic, 1)
    publisher = V5Client(broker, unique("pub5"))
    publisher.publish(
        topic,
        b"{}",
        PayloadFormatIndicator=1,
        ContentType="application/json",
        ResponseTopic="replies/here",
        CorrelationData=b"\x01\x02",
        UserProperty=USER_PROPERTIES,
        MessageExpiryInterval=60,
    )
    received = v5_subscriber.next_message().properties
    assert received.PayloadFormatIndicator == 1
    assert received.ContentType == "application/json"
    assert received.ResponseTopic == "replies/here"
    assert received.CorrelationData == b"\x01\x02"
    assert received.UserProperty == USER_PROPERTIES  # in order, repeats kept
    assert 59 <= received.MessageExpiryInterval <= 60
    plain = v3_subscriber.next_message()
    assert (plain.topic, plain.payload) == (topic, b"{}")  # 3.1.1: no properties at all
    # and a 3.1.1 publisher reaches the 5.0 subscriber, without properties
    v3_subscriber.publish(topic, b"from v3", qos=1)
    from_v3 = v5_subscriber.next_message()
    assert from_v3.payload == b"from v3"
    assert not hasattr(from_v3.properties, "UserProperty")
    for client in (v5_subscriber, v3_subscriber, publisher):
        client.close()


def test_one_publish_carries_every_matching_subscription_identifier(
    broker: BrokerProcess,
) -> None:
    base = unique("subid")
    subscriber = V5Client(broker, unique("subid"))
    subscriber.subscribe(f"{base}/+", identifier=3)
    subscriber.subscribe(f"{base}/#", identifier=12)
    subscriber.subscribe(f"{base}/x")  # no identifier
    subscriber.publish(f"{base}/x", b"one")
    message = subscriber.next_message()
    assert sorted(message.properties.SubscriptionIdentifier) == [3, 12]
    subscriber.assert_no_message()  # overlapping subscriptions deliver once [MQTT-3.3.5-1]
    subscriber.close()


def test_no_local_and_retain_as_published(broker: BrokerProcess) -> None:
    topic = unique("nl")
    client = V5Client(broker, unique("nl"))
    client.subscribe(topic, noLocal=True, retainAsPublished=True)
    other = V5Client(broker, unique("nl-other"))
    other.subscribe(topic)  # retainAsPublished False
    client.publish(topic, b"own", retain=True)
    client.assert_no_message()  # No Local [MQTT-3.8.3-3]
    assert other.next_message().retain is False  # live delivery: RETAIN 0 [MQTT-3.3.1-12]
    other.publish(topic, b"theirs", retain=True)
    kept = client.next_message()
    assert (kept.payload, kept.retain) == (b"theirs", True)  # Retain As Published [-13]
    client.publish(topic, b"", retain=True)  # clear it
    for each in (client, other):
        each.close()


def test_subscribers_of_one_topic_each_get_their_own_options(broker: BrokerProcess) -> None:
    """One publish to six subscribers whose options differ: each delivery carries its own
    QoS [MQTT-3.8.4-8], RETAIN flag [MQTT-3.3.1-12/13] and identifier [MQTT-3.3.4-3]."""
    topic = unique("kinds")
    plain = [V5Client(broker, unique("kinds-plain")) for _ in range(3)]
    with_id = V5Client(broker, unique("kinds-id"))
    as_published = V5Client(broker, unique("kinds-rap"))
    at_most_once = V5Client(broker, unique("kinds-q0"))
    for client in plain[:2]:
        client.subscribe(topic)
    with_id.subscribe(topic, identifier=5)
    as_published.subscribe(topic, retainAsPublished=True)
    at_most_once.subscribe(topic, qos=0)
    plain[2].subscribe(topic)
    publisher = V5Client(broker, unique("kinds-pub"))
    publisher.publish(topic, b"live", retain=True)
    expected = {  # client: (qos, retain, subscription identifiers)
        **{client: (1, False, None) for client in plain},
        with_id: (1, False, [5]),
        as_published: (1, True, None),
        at_most_once: (0, False, None),
    }
    for client, wanted in expected.items():
        message = client.next_message()
        ids = getattr(message.properties, "SubscriptionIdentifier", None)
        assert (message.payload, message.qos, message.retain, ids) == (b"live", *wanted)
        client.assert_no_message(within=0.1)
    publisher.publish(topic, b"", retain=True)  # clear it
    for each in (*expected, publisher):
        each.close()


def test_retain_handling_0_1_2_mqtt_3_3_1_9_to_11(broker: BrokerProcess) -> None:
    topic = unique("rh")
    publisher = V5Client(broker, unique("rh-pub"))
    publisher.publish(topic, b"stored", retain=True)
    client = V5Client(broker, unique("rh"))
    client.subscribe(topic, retainHandling=0)
    assert client.next_message().payload == b"stored"
    client.subscribe(topic, retainHandling=0)  # 0: sent on every SUBSCRIBE
    assert client.next_message().payload == b"stored"
    client.subscribe(topic, retainHandling=1)  # 1: only if the subscription is new
    client.assert_no_message()
    fresh = V5Client(broker, unique("rh-fresh"))
    fresh.subscribe(topic, retainHandling=1)
    assert fresh.next_message().payload == b"stored"
    never = V5Client(broker, unique("rh-never"))
    never.subscribe(topic, retainHandling=2)  # 2: never
    never.assert_no_message()
    publisher.publish(topic, b"", retain=True)
    for each in (publisher, client, fresh, never):
        each.close()


def test_connack_response_information_keep_alive_and_assigned_id(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        '[limits]\nmax_keepalive = 20\n[mqtt]\nresponse_information = "replies/"\n'
    )
    client = V5Client(broker, "", keepalive=60, RequestResponseInformation=1)
    _reason, properties = client.connack
    assert properties.ResponseInformation == "replies/"
    assert properties.ServerKeepAlive == 20  # [MQTT-3.2.2-21]
    assert properties.AssignedClientIdentifier.startswith("auto-")  # [MQTT-3.2.2-16]
    client.close()


def test_payload_not_utf8_as_marked_is_refused_with_0x99(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[mqtt]\nvalidate_utf8_payloads = true\n")
    client = connect_raw(broker, unique("utf8"), version=5)
    client.send(Publish("t", b"\xc3\x28", qos=1, packet_id=1, properties={0x01: 1}))
    assert client.expect() == PubAck(
        1, 0x99, {0x1F: "payload on 't' is not the UTF-8 its Payload Format Indicator says"}
    )
    client.send(Publish("t", "é".encode(), qos=1, packet_id=2, properties={0x01: 1}))
    assert client.expect() == PubAck(2, 0x10)  # accepted (nobody subscribes)
    client.close()
    assert "not the UTF-8 it claims" in broker.log()


@pytest.mark.parametrize("problem_information", [1, 0])
def test_a_refused_connect_tells_paho_why_in_a_reason_string(
    broker_factory: Callable[..., BrokerProcess], problem_information: int
) -> None:
    # [MQTT-3.2.2-19]; CONNACK may carry it even with Request Problem Information 0
    # [MQTT-3.1.2-29].
    broker = broker_factory("[limits]\nmax_client_id_length = 8\n")
    client = V5Client(broker, "far-too-long-an-id", RequestProblemInformation=problem_information)
    client.close()
    reason, properties = client.connack
    assert reason == "Client identifier not valid"  # 0x85
    assert properties.ReasonString == "client id too long"


def test_hooks_get_the_protocol_version_and_the_properties(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        '[[plugins]]\nmodule = "tests.support.test_plugins.recorder"\npath = "events.jsonl"\n'
    )
    topic = unique("hooked")
    small = V5Client(broker, unique("small"), MaximumPacketSize=40, UserProperty=[("k", "v")])
    small.subscribe(topic)
    small.publish(topic, b"x" * 100, UserProperty=[("u", "1")])
    small.publish(topic, b"fits")
    assert small.next_message().payload == b"fits"
    small.close()
    events_path = broker.log_path.parent / "events.jsonl"
    deadline = time.monotonic() + 5
    while True:
        lines = events_path.read_text(encoding="utf-8").split("\n")[:-1]
        events = [json.loads(line) for line in lines]
        if any(e["point"] == "client.disconnected" for e in events) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    (connect,) = [e for e in events if e["point"] == "client.connect"]
    assert connect["protocol_version"] == 5
    assert connect["properties"] == ["0x26", "0x27"]  # User Property, Maximum Packet Size
    published = [e for e in events if e["point"] == "message.publish"]
    assert published[0]["properties"] == ["0x26"]
    # The big one was dropped for the subscriber, and the hook says why [MQTT-3.1.2-25].
    dropped = [e for e in events if e["point"] == "message.dropped"]
    assert [(e["topic"], e["reason"]) for e in dropped] == [(topic, "packet_too_large")]


def test_session_expiry_and_message_expiry_across_a_reconnect(broker: BrokerProcess) -> None:
    client_id, topic = unique("paho-exp"), unique("paho-exp")
    subscriber = V5Client(broker, client_id, clean_start=False, SessionExpiryInterval=60)
    subscriber.subscribe(topic)
    subscriber.close()
    publisher = V5Client(broker, unique("paho-exp-pub"))
    publisher.publish(topic, b"short", MessageExpiryInterval=1)
    publisher.publish(topic, b"long", MessageExpiryInterval=300)
    time.sleep(1.5)
    back = V5Client(broker, client_id, clean_start=False, SessionExpiryInterval=60)
    assert back.session_present
    kept = back.next_message()
    assert kept.payload == b"long" and kept.properties.MessageExpiryInterval <= 299
    back.assert_no_message()  # "short" expired in the queue
    back.close()
    # Without a Session Expiry Interval the session ends with the connection.
    again = V5Client(broker, client_id, clean_start=False)
    assert again.session_present  # the 60 s session was still there
    again.close()
    assert not V5Client(broker, client_id, clean_start=False).session_present
    publisher.close()


def test_will_delay_with_paho(broker: BrokerProcess) -> None:
    topic = unique("paho-will")
    watcher = V5Client(broker, unique("paho-will-watch"))
    watcher.subscribe(topic)
    dying = V5Client(
        broker,
        unique("paho-will-dies"),
        will=(topic, b"gone", {"WillDelayInterval": 1, "UserProperty": [("why", "crash")]}),
        SessionExpiryInterval=30,
    )
    dying.drop()
    watcher.assert_no_message(0.5)  # the delay has not passed
    will = watcher.next_message(timeout=3)
    assert will.payload == b"gone"
    assert will.properties.UserProperty == [("why", "crash")]  # will properties go along
    watcher.close()
