"""MQTT 5.0 semantics over real sockets, with raw packets: the session's lifetime,
both sides' limits, reason codes, message expiry, topic aliases, the will delay.

Each test names the rule it checks; the in-process tables are in tests/unit/test_channel.py,
test_outbound.py and test_session_state.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mqtt.packets import (
    Disconnect,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from mqtt.properties import PropertyId
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

REASON = PropertyId.REASON_STRING


def v5(broker: BrokerProcess, client_id: str, **kwargs: object) -> RawClient:
    return connect_raw(broker, client_id, version=5, **kwargs)  # type: ignore[arg-type]


def told(code: int, why: str) -> Disconnect:
    """A server DISCONNECT that says why: its code and Reason String [MQTT-4.13.1-1]."""
    return Disconnect(reason_code=code, properties={REASON: why})


def leave(client: RawClient) -> None:
    client.send(Disconnect())
    client.close()


# ----- Session Expiry Interval ----------------------------------------------------------


def test_session_expiry_zero_ends_the_session_with_the_connection_mqtt_3_1_2_11(
    broker: BrokerProcess,
) -> None:
    client_id = unique("exp0")
    client = v5(broker, client_id, clean=False)  # no Session Expiry Interval: 0
    subscribe_raw(client, 1, ("exp0/#", 1))
    leave(client)
    v5(broker, client_id, clean=False, session_present=False).close()


def test_session_kept_for_its_interval_then_gone(broker: BrokerProcess) -> None:
    client_id = unique("exp2")
    topic = unique("exp2-topic")
    client = v5(broker, client_id, clean=False, properties={0x11: 2})
    subscribe_raw(client, 1, (topic, 1))
    leave(client)
    publisher = v5(broker, unique("pub"))
    publisher.send(Publish(topic, b"queued", qos=1, packet_id=1))
    assert publisher.expect() == PubAck(1)
    back = v5(broker, client_id, clean=False, session_present=True, properties={0x11: 1})
    assert expect_publish(back).payload == b"queued"  # kept, with its queue
    leave(back)
    time.sleep(1.6)
    v5(broker, client_id, clean=False, session_present=False).close()
    assert f"session '{client_id}' expired" in broker.log()


def test_disconnect_can_end_the_session_section_3_14_2_2_2(broker: BrokerProcess) -> None:
    client_id = unique("exp-disc")
    client = v5(broker, client_id, clean=False, properties={0x11: 600})
    client.send(Disconnect(properties={0x11: 0}))
    client.close()
    v5(broker, client_id, clean=False, session_present=False).close()


def test_a_disconnect_ending_the_session_counts_before_a_connect_that_overtakes_it(
    broker: BrokerProcess,
) -> None:
    """The same, with the next CONNECT on a connection opened before the DISCONNECT was
    sent: the broker may read that CONNECT first, on the same worker or another. The
    takeover waits for the first connection's DISCONNECT, so no session is present. The
    order is the event loop's (and the kernel's), so the test runs it 40 times."""
    for _round in range(40):
        client_id = unique("exp-overtaken")
        client = v5(broker, client_id, clean=False, properties={0x11: 600})
        again = RawClient(broker.host, broker.port, version=5)
        client.send(Disconnect(properties={0x11: 0}))
        client.close()
        connack = again.connect(client_id, clean=False)
        assert (connack.reason_code, connack.session_present) == (0, False), connack
        again.close()


def test_disconnect_setting_expiry_after_zero_is_a_protocol_error(broker: BrokerProcess) -> None:
    client = v5(broker, unique("exp-bad"))
    client.send(Disconnect(properties={0x11: 60}))
    assert client.expect() == told(
        0x82, "DISCONNECT sets a Session Expiry Interval after CONNECT's was 0 (section 3.14.2.2.2)"
    )
    assert client.is_closed_by_broker()


def test_server_maximum_lowers_the_interval_and_connack_says_so(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[limits]\nmax_session_expiry = 30.0\n")
    client = RawClient(broker.host, broker.port, version=5)
    connack = client.connect(unique("capped"), clean=False, properties={0x11: 0xFFFFFFFF})
    assert connack.reason_code == 0 and connack.properties[0x11] == 30
    client.close()


def test_session_expiry_survives_a_broker_restart(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    data_dir = str(tmp_path / "data")
    broker = broker_factory(None, "--data-dir", data_dir)
    forever, brief = unique("forever"), unique("brief")
    # 3.x sessions would be kept 2 h (limits.session_expiry); these keep their own.
    leave(v5(broker, forever, clean=False, properties={0x11: 0xFFFFFFFF}))
    leave(v5(broker, brief, clean=False, properties={0x11: 1}))
    assert broker.stop() == 0
    time.sleep(1.2)
    broker = broker_factory(None, "--data-dir", data_dir)
    assert "removed 1 expired sessions" in broker.log()
    v5(broker, forever, clean=False, session_present=True).close()
    v5(broker, brief, clean=False, session_present=False).close()


def test_a_session_ended_by_its_client_stays_gone_after_a_restart(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    """A stored session that stops being kept (DISCONNECT with Session Expiry Interval 0,
    or a resume without one) is deleted from the store, not only from memory."""
    data_dir = str(tmp_path / "data")
    broker = broker_factory(None, "--data-dir", data_dir)
    by_disconnect, by_resume = unique("end-disc"), unique("end-resume")
    client = v5(broker, by_disconnect, clean=False, properties={0x11: 600})
    client.send(Disconnect(properties={0x11: 0}))
    client.close()
    leave(v5(broker, by_resume, clean=False, properties={0x11: 600}))
    leave(v5(broker, by_resume, clean=False, session_present=True))  # now expiry 0
    time.sleep(0.3)  # the connections' ends are handled
    assert broker.stop() == 0
    broker = broker_factory(None, "--data-dir", data_dir)
    v5(broker, by_disconnect, clean=False, session_present=False).close()
    v5(broker, by_resume, clean=False, session_present=False).close()


# ----- Receive Maximum ------------------------------------------------------------------


def test_never_more_unacknowledged_publishes_than_the_clients_receive_maximum(
    broker: BrokerProcess,
) -> None:
    topic = unique("rm")
    subscriber = v5(broker, unique("rm-sub"), properties={0x21: 2})
    subscribe_raw(subscriber, 1, (topic, 1))
    publisher = v5(broker, unique("rm-pub"))
    for packet_id in range(1, 6):
        publisher.send(Publish(topic, str(packet_id).encode(), qos=1, packet_id=packet_id))
    first, second = expect_publish(subscriber), expect_publish(subscriber)
    subscriber.expect_nothing(0.5)  # [MQTT-3.3.4-9]: two in flight, the rest wait
    subscriber.send(PubAck(first.packet_id))  # type: ignore[arg-type]
    assert expect_publish(subscriber).payload == b"3"
    subscriber.expect_nothing(0.3)
    assert (first.payload, second.payload) == (b"1", b"2")
    subscriber.close()
    publisher.close()


def test_client_exceeding_the_servers_receive_maximum_gets_0x93(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[limits]\nmax_awaiting_rel = 2\n")
    client = RawClient(broker.host, broker.port, version=5)
    assert client.connect(unique("rm-in")).properties[0x21] == 2  # announced
    for packet_id in (1, 2):  # no PUBREL: both stay unacknowledged
        client.send(Publish("rm/in", b"x", qos=2, packet_id=packet_id))
        assert client.expect() == PubRec(packet_id, 0x10)  # nobody subscribes
    client.send(Publish("rm/in", b"x", qos=2, packet_id=3))
    assert client.expect() == told(
        0x93,
        "more than the Receive Maximum of 2 unacknowledged QoS 1/2 PUBLISHes [MQTT-3.3.4-7]",
    )
    assert client.is_closed_by_broker()


# ----- Maximum Packet Size --------------------------------------------------------------


def test_packets_larger_than_the_client_allows_are_dropped_and_counted_mqtt_3_1_2_25(
    broker: BrokerProcess,
) -> None:
    topic = unique("mps")
    subscriber = v5(broker, unique("mps-sub"), properties={0x27: 64})
    subscribe_raw(subscriber, 1, (topic, 1))
    publisher = v5(broker, unique("mps-pub"))
    publisher.send(Publish(topic, b"x" * 100, qos=1, packet_id=1))
    publisher.send(Publish(topic, b"small", qos=1, packet_id=2))
    publisher.send(Publish(topic, b"y" * 100, qos=0))
    publisher.send(Publish(topic, b"last", qos=0))
    assert expect_publish(subscriber).payload == b"small"  # the big one never came
    assert expect_publish(subscriber).payload == b"last"
    subscriber.expect_nothing(0.3)
    assert "larger than the Maximum Packet Size" in broker.log()
    subscriber.close()
    publisher.close()


# ----- reason codes ---------------------------------------------------------------------


def test_reason_codes_of_acknowledgements(broker: BrokerProcess) -> None:
    client = v5(broker, unique("codes"))
    client.send(Publish(unique("nobody"), b"x", qos=1, packet_id=1))
    assert client.expect() == PubAck(1, 0x10)  # no matching subscribers
    client.send(Unsubscribe(2, ["never/subscribed"]))
    assert client.expect() == UnsubAck(2, [0x11])  # no subscription existed
    # Failures say why: Request Problem Information is 1 by default (section 3.1.2.11.7).
    client.send(PubRel(3))
    assert client.expect() == PubComp(3, 0x92, {REASON: "packet identifier 3 not found"})
    client.send(PubRec(4))
    assert client.expect() == PubRel(4, 0x92, {REASON: "packet identifier 4 not found"})
    client.send(Subscribe(5, [Subscription("$share/g/t", 1), Subscription("ok/+", 2)]))
    # A shared subscription is granted like any other (0x9E only when they are turned off:
    # test_shared_subscriptions.py).
    assert client.expect() == SubAck(5, [1, 2])
    client.close()


def test_connack_announces_the_configuration(broker: BrokerProcess) -> None:
    client = RawClient(broker.host, broker.port, version=5)
    connack = client.connect(unique("props"))
    assert {
        key: connack.properties.get(key) for key in (0x21, 0x22, 0x25, 0x27, 0x28, 0x29, 0x2A)
    } == {
        0x21: 100,  # Receive Maximum (limits.max_awaiting_rel)
        0x22: 10,  # Topic Alias Maximum
        0x25: 1,  # Retain Available
        0x27: 1_048_576,  # Maximum Packet Size (limits.max_packet_size)
        0x28: 1,  # Wildcard Subscription Available
        0x29: 1,  # Subscription Identifier Available
        0x2A: 1,  # Shared Subscription Available ([shared_subscriptions] enabled)
    }
    client.close()


# ----- Message Expiry -------------------------------------------------------------------


def test_expired_messages_are_not_delivered_from_the_offline_queue_mqtt_3_3_2_5(
    broker: BrokerProcess,
) -> None:
    client_id, topic = unique("mx-sub"), unique("mx")
    subscriber = v5(broker, client_id, clean=False, properties={0x11: 60})
    subscribe_raw(subscriber, 1, (topic, 1))
    leave(subscriber)
    publisher = v5(broker, unique("mx-pub"))
    publisher.send(Publish(topic, b"short", qos=1, packet_id=1, properties={0x02: 1}))
    publisher.send(Publish(topic, b"long", qos=1, packet_id=2, properties={0x02: 100}))
    publisher.expect(), publisher.expect()
    time.sleep(1.5)
    back = v5(broker, client_id, clean=False, session_present=True, properties={0x11: 60})
    kept = expect_publish(back)
    assert kept.payload == b"long"
    assert 97 <= kept.properties[0x02] <= 99  # the interval left is sent on [MQTT-3.3.2-6]
    back.expect_nothing(0.3)
    back.close()
    publisher.close()


def test_expired_retained_messages_are_not_sent(broker: BrokerProcess) -> None:
    short, long = unique("rx-short"), unique("rx-long")
    publisher = v5(broker, unique("rx-pub"))
    publisher.send(Publish(short, b"gone", qos=1, packet_id=1, retain=True, properties={0x02: 1}))
    publisher.send(Publish(long, b"kept", qos=1, packet_id=2, retain=True, properties={0x02: 60}))
    publisher.expect(), publisher.expect()
    time.sleep(1.5)
    subscriber = v5(broker, unique("rx-sub"))
    subscribe_raw(subscriber, 1, (short, 1), (long, 1))
    retained = expect_publish(subscriber)
    assert (retained.payload, retained.retain) == (b"kept", True)
    assert retained.properties[0x02] <= 59
    subscriber.expect_nothing(0.3)
    subscriber.close()
    publisher.close()


# ----- topic aliases --------------------------------------------------------------------


def test_topic_aliases_in_both_directions(broker: BrokerProcess) -> None:
    topic = unique("alias")
    subscriber = v5(broker, unique("alias-sub"), properties={0x22: 5})
    subscribe_raw(subscriber, 1, (topic, 0))
    publisher = v5(broker, unique("alias-pub"))
    publisher.send(Publish(topic, b"1", properties={0x23: 3}))  # sets alias 3
    publisher.send(Publish("", b"2", properties={0x23: 3}))  # uses it
    first, second = expect_publish(subscriber), expect_publish(subscriber)
    assert (first.topic, first.payload, first.properties[0x23]) == (topic, b"1", 1)
    assert (second.topic, second.payload, second.properties[0x23]) == ("", b"2", 1)
    publisher.send(Publish("", b"x", properties={0x23: 4}))  # never set: Protocol Error
    assert publisher.expect() == told(0x82, "Topic Alias 4 used before it was set (section 3.3.4)")
    subscriber.close()


# ----- will delay -----------------------------------------------------------------------


def test_will_waits_for_its_delay_and_is_cancelled_by_a_resume_mqtt_3_1_3_9(
    broker: BrokerProcess,
) -> None:
    topic = unique("wd")
    watcher = v5(broker, unique("wd-watch"))
    subscribe_raw(watcher, 1, (topic, 1))
    will = Will(topic, b"late", qos=1, properties={0x18: 1})
    delayed_id, resumed_id = unique("wd-dies"), unique("wd-back")
    v5(broker, delayed_id, will=will, properties={0x11: 60}).close()
    v5(
        broker,
        resumed_id,
        will=Will(topic, b"never", qos=1, properties={0x18: 1}),
        properties={0x11: 60},
    ).close()
    v5(broker, resumed_id, clean=False, session_present=True, properties={0x11: 60})
    watcher.expect_nothing(0.5)  # not before the delay
    assert expect_publish(watcher, timeout=3).payload == b"late"
    watcher.expect_nothing(1.0)  # the resumed session's will is never sent
    watcher.close()


# ----- server DISCONNECT reasons --------------------------------------------------------


def test_session_taken_over_gets_0x8e(broker: BrokerProcess) -> None:
    client_id = unique("taken")
    first = v5(broker, client_id)
    second = v5(broker, client_id)
    assert first.expect() == told(0x8E, "session taken over by another connection")
    assert first.is_closed_by_broker()
    second.close()


def test_keep_alive_timeout_gets_0x8d(broker: BrokerProcess) -> None:
    client = v5(broker, unique("silent"), keepalive=1)
    disconnect = client.expect(timeout=4)  # after 1.5 s of silence
    assert disconnect.reason_code == 0x8D
    assert disconnect.properties[REASON].startswith("keep-alive timeout: silent for 1.")
    assert client.is_closed_by_broker()


def test_shutdown_gets_0x8b(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory()
    client = v5(broker, unique("bye"))
    assert broker.stop() == 0
    assert client.expect() == told(0x8B, "server shutting down")


def test_a_disconnect_leaves_its_reason_string_out_beyond_the_maximum_packet_size(
    broker: BrokerProcess,
) -> None:
    # [MQTT-3.14.2-3]: the 3-byte DISCONNECT fits in 16 bytes, with the string it would not.
    client_id = unique("tiny")
    first = v5(broker, client_id, properties={0x27: 16})
    second = v5(broker, client_id)
    assert first.expect() == Disconnect(reason_code=0x8E)
    assert first.is_closed_by_broker()
    second.close()


def test_request_problem_information_0_keeps_reason_strings_to_connack_and_disconnect(
    broker: BrokerProcess,
) -> None:
    # [MQTT-3.1.2-29]: no Reason String on PUBCOMP/PUBREL, but DISCONNECT may still say why.
    client_id = unique("rpi0")
    client = v5(broker, client_id, properties={0x17: 0})
    client.send(PubRel(3))
    assert client.expect() == PubComp(3, 0x92)
    client.send(PubRec(4))
    assert client.expect() == PubRel(4, 0x92)
    second = v5(broker, client_id)
    assert client.expect() == told(0x8E, "session taken over by another connection")
    second.close()


def test_a_suback_says_why_a_filter_was_refused(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[mqtt]\nwildcard_subscriptions = false\n")
    client = v5(broker, unique("wild"))
    client.send(Subscribe(1, [Subscription("ok", 1), Subscription("a/#", 1)]))
    assert client.expect() == SubAck(
        1, [1, 0xA2], {REASON: "'a/#': wildcard subscriptions are not supported"}
    )
    quiet = v5(broker, unique("wild-rpi0"), properties={0x17: 0})  # [MQTT-3.1.2-29]
    quiet.send(Subscribe(1, [Subscription("a/#", 1)]))
    assert quiet.expect() == SubAck(1, [0xA2])
    client.close()
    quiet.close()


def test_a_clean_start_takeover_ends_the_session_and_sends_the_delayed_will(
    broker: BrokerProcess,
) -> None:
    topic, client_id = unique("wd-clean"), unique("wd-clean")
    watcher = v5(broker, unique("wd-clean-watch"))
    subscribe_raw(watcher, 1, (topic, 1))
    will = Will(topic, b"ended", qos=1, properties={0x18: 30})
    first = v5(broker, client_id, will=will, properties={0x11: 60})
    second = v5(broker, client_id, clean=True)  # discards the session [MQTT-3.1.2-4]
    assert first.expect() == told(0x8E, "session taken over by another connection")
    assert expect_publish(watcher).payload == b"ended"  # the session ended: no waiting
    for client in (first, second, watcher):
        client.close()
