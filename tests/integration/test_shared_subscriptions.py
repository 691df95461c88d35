"""Shared subscriptions (`$share/{group}/{filter}`, MQTT 5.0 section 4.8.2) over real sockets:
paho-mqtt MQTTv5 and 3.1.1 clients, and raw clients where a test must withhold a PUBACK or
send what paho will not (a No Local shared subscription, a malformed share name)."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mqtt.packets import Disconnect, PubAck, Publish, SubAck, Subscribe, Subscription
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import PahoCollector, connect_raw, expect_publish, unique
from tests.support.raw_client import RawClient

V5 = paho.MQTTv5


@pytest.fixture(scope="module")
def round_robin(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[BrokerProcess]:
    config = '[store]\nkind = "memory"\n[shared_subscriptions]\nstrategy = "round_robin"\n'
    with running_broker(tmp_path_factory.mktemp("share"), config) as broker:
        yield broker


def members(broker: BrokerProcess, shared_filter: str, count: int, **kwargs: Any) -> list[Any]:
    clients = []
    for _ in range(count):
        client = PahoCollector(broker, unique("member"), **kwargs)
        codes = client.subscribe(shared_filter, 1)
        assert [int(getattr(code, "value", code)) for code in codes] == [1], codes
        clients.append(client)
    return clients


def drain(client: PahoCollector, within: float = 0.5) -> list[bytes]:
    """Every payload the client receives until `within` seconds pass without one."""
    payloads = []
    while True:
        try:
            payloads.append(client.next_message(timeout=within).payload)
        except queue.Empty:
            return payloads


def publish_numbered(broker: BrokerProcess, topic: str, count: int, qos: int = 1) -> list[bytes]:
    publisher = PahoCollector(broker, unique("publisher"), protocol=V5)
    payloads = [f"m{n}".encode() for n in range(count)]
    for payload in payloads:
        publisher.publish(topic, payload, qos)
    publisher.close()
    return payloads


def test_each_message_once_per_group_in_turn_beside_normal_subscribers(
    round_robin: BrokerProcess,
) -> None:
    topic = unique("jobs")
    group_a = members(round_robin, f"$share/a/{topic}/#", 3, protocol=V5)
    group_b = members(round_robin, f"$share/b/{topic}/+", 2, protocol=V5)
    normal = PahoCollector(round_robin, unique("normal"), protocol=V5)
    normal.subscribe(f"{topic}/#", 1)
    sent = publish_numbered(round_robin, f"{topic}/x", 12)
    got_a = [drain(client) for client in group_a]
    got_b = [drain(client) for client in group_b]
    # One delivery per group per message; round robin gives each member its turn.
    assert sorted(p for got in got_a for p in got) == sorted(sent)
    assert sorted(p for got in got_b for p in got) == sorted(sent)
    assert [len(got) for got in got_a] == [4, 4, 4]
    assert [len(got) for got in got_b] == [6, 6]
    assert sorted(drain(normal)) == sorted(sent)  # ordinary subscriptions all get a copy
    for client in [*group_a, *group_b, normal]:
        client.close()


def test_a_group_reading_sys_topics_gets_each_of_them_once(
    tmp_path_factory: pytest.TempPathFactory, workers: int
) -> None:
    # The broker's own messages ($SYS, here the presence events) reach share groups as a
    # client's publish does: one member of the group each [MQTT-4.8.2-3].
    config = '[store]\nkind = "memory"\n[sys]\npresence_events = true\n'
    with running_broker(tmp_path_factory.mktemp("sysshare"), config) as broker:
        group = members(broker, "$share/g/$SYS/brokers/+/clients/#", 2)
        visitors = [unique("visitor") for _ in range(3)]
        for visitor in visitors:
            PahoCollector(broker, visitor).close()
        topics = [m.topic for member in group for m in drain_messages(member)]
        node = topics[0].split("/")[2]  # the broker's node name
        seen = [t for t in topics if t.split("/")[4] in visitors]
        assert sorted(seen) == sorted(  # each event once, across the members
            f"$SYS/brokers/{node}/clients/{visitor}/{event}"
            for visitor in visitors
            for event in ("connected", "disconnected")
        )
        for member in group:
            member.close()


def drain_messages(client: PahoCollector, within: float = 1.0) -> list[Any]:
    """Every message the client receives until `within` seconds pass without one."""
    got = []
    while True:
        try:
            got.append(client.next_message(timeout=within))
        except queue.Empty:
            return got


def test_mqtt_311_clients_share_too(round_robin: BrokerProcess) -> None:
    topic = unique("v3")
    group = members(round_robin, f"$share/g/{topic}", 2, protocol=paho.MQTTv311)
    sent = publish_numbered(round_robin, topic, 6)
    got = [drain(client) for client in group]
    assert sorted(got[0] + got[1]) == sorted(sent)
    assert len(got[0]) == len(got[1]) == 3
    for client in group:
        client.close()


def test_retained_messages_are_not_sent_on_a_shared_subscription(
    round_robin: BrokerProcess,
) -> None:
    topic = unique("lamp")
    publisher = PahoCollector(round_robin, unique("pub"), protocol=V5)
    publisher.publish(topic, b"on", qos=1, retain=True)
    (shared,) = members(round_robin, f"$share/g/{topic}", 1, protocol=V5)
    shared.assert_no_message(within=0.5)  # [MQTT-4.8.2-6]
    normal = PahoCollector(round_robin, unique("normal"), protocol=V5)
    normal.subscribe(topic, 1)
    assert normal.next_message().payload == b"on"  # the retained message exists
    publisher.publish(topic, b"", qos=1, retain=True)  # clear it for other tests
    for client in (publisher, shared, normal):
        client.close()


def test_unsubscribing_leaves_the_group(round_robin: BrokerProcess) -> None:
    topic = unique("unsub")
    leaving, staying = members(round_robin, f"$share/g/{topic}", 2, protocol=V5)
    leaving.client.unsubscribe(f"$share/g/{topic}")
    time.sleep(0.3)
    sent = publish_numbered(round_robin, topic, 4)
    assert drain(leaving) == []
    assert sorted(drain(staying)) == sorted(sent)
    for client in (leaving, staying):
        client.close()


def raw_subscribe(client: RawClient, topic_filter: str, qos: int = 1, **options: Any) -> SubAck:
    client.send(Subscribe(1, [Subscription(topic_filter, qos, **options)]))
    suback = client.expect()
    assert isinstance(suback, SubAck), suback
    return suback


@pytest.mark.parametrize("topic_filter", ["$share/g", "$share//t", "$share/g/"])
def test_malformed_share_names_get_0x8f(round_robin: BrokerProcess, topic_filter: str) -> None:
    # A valid topic filter that is not a valid shared subscription [MQTT-4.8.2-1]: SUBACK
    # 0x8F for that filter, the connection stays.
    client = connect_raw(round_robin, unique("bad"), version=5)
    assert raw_subscribe(client, topic_filter).reason_codes == [ReasonCode.TOPIC_FILTER_INVALID]
    assert raw_subscribe(client, "fine").reason_codes == [1]
    client.close()


@pytest.mark.parametrize("topic_filter", ["$share/g+/t", "$share/#/t"])
def test_share_names_that_break_the_filter_syntax_end_the_connection(
    round_robin: BrokerProcess, topic_filter: str
) -> None:
    # Not even a topic filter ('+' and '#' must be whole levels, [MQTT-4.7.1-2/3]): the
    # codec rejects the SUBSCRIBE as for any such filter, with DISCONNECT 0x8F.
    client = connect_raw(round_robin, unique("bad"), version=5)
    client.send(Subscribe(1, [Subscription(topic_filter, 1)]))
    answer = client.expect()
    assert isinstance(answer, Disconnect)
    assert answer.reason_code == ReasonCode.TOPIC_FILTER_INVALID
    assert answer.properties[0x1F]  # the codec's reason, in words
    assert client.is_closed_by_broker()


def test_no_local_on_a_shared_subscription_is_a_protocol_error(
    round_robin: BrokerProcess,
) -> None:
    # [MQTT-3.8.3-4]: DISCONNECT 0x82, then the connection is closed.
    client = connect_raw(round_robin, unique("nolocal"), version=5)
    client.send(Subscribe(1, [Subscription("$share/g/t", 1, no_local=True)]))
    answer = client.expect()
    assert isinstance(answer, Disconnect)
    assert answer.reason_code == ReasonCode.PROTOCOL_ERROR
    assert "[MQTT-3.8.3-4]" in answer.properties[0x1F]
    assert client.is_closed_by_broker()


def raw_member(broker: BrokerProcess, topic_filter: str, **connect: Any) -> RawClient:
    client = connect_raw(broker, unique("raw-member"), version=5, **connect)
    assert raw_subscribe(client, topic_filter).reason_codes == [1]
    return client


def test_member_killed_with_a_qos1_message_in_flight_hands_it_over(
    round_robin: BrokerProcess,
) -> None:
    topic = unique("failover")
    # Round robin gives each of the two members one of the first two messages (which one
    # comes first depends, in a pool, on the publisher's worker); the raw member never
    # acknowledges its one, and its connection dies.
    doomed = raw_member(round_robin, f"$share/g/{topic}")
    (survivor,) = members(round_robin, f"$share/g/{topic}", 1, protocol=V5)
    sent = publish_numbered(round_robin, topic, 2)
    in_flight = expect_publish(doomed)
    assert in_flight.payload in sent and in_flight.qos == 1
    doomed.expect_nothing(within=0.3)  # one message each
    doomed.sock.close()  # killed: no DISCONNECT, no PUBACK
    got = sorted(survivor.next_message(timeout=5).payload for _ in sent)
    assert got == sorted(sent)  # its own, and the one that was in flight to the other
    survivor.assert_no_message(within=0.3)
    wait_for_log(round_robin, "went to other members of their groups")
    survivor.close()


def test_queued_messages_of_a_killed_member_go_to_another(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    # sticky: every message goes to the member chosen first; with a window of 1 the rest
    # queue behind the unacknowledged one.
    broker = broker_factory(
        '[store]\nkind = "memory"\n[limits]\nmax_inflight = 1\n'
        '[shared_subscriptions]\nstrategy = "sticky"\n'
    )
    topic = unique("queued")
    chosen = raw_member(broker, f"$share/g/{topic}")
    sent = publish_numbered(broker, topic, 5)
    assert expect_publish(chosen).payload == b"m0"
    (other,) = members(broker, f"$share/g/{topic}", 1, protocol=V5)
    chosen.sock.close()
    assert sorted(drain(other, within=1.0)) == sorted(sent)  # in flight and queued: none lost
    other.close()


def test_offline_persistent_member_gets_nothing_while_another_can_take_it(
    round_robin: BrokerProcess,
) -> None:
    topic = unique("offline")
    away_id = unique("away")
    # A 5.0 session outlives its connection only with a Session Expiry Interval [MQTT-3.1.2-11].
    kept = {PropertyId.SESSION_EXPIRY_INTERVAL: 60}
    away = connect_raw(round_robin, away_id, version=5, clean=False, properties=kept)
    assert raw_subscribe(away, f"$share/g/{topic}").reason_codes == [1]
    away.send(Disconnect())
    (online,) = members(round_robin, f"$share/g/{topic}", 1, protocol=V5)
    sent = publish_numbered(round_robin, topic, 4)
    assert sorted(drain(online)) == sorted(sent)
    back = connect_raw(
        round_robin, away_id, version=5, clean=False, session_present=True, properties=kept
    )
    back.expect_nothing(within=0.5)
    back.close()
    online.close()


def test_shared_subscription_of_a_persistent_session_survives_a_restart(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    broker = start_broker(tmp_path, None, ("--data-dir", str(data_dir)))
    topic = unique("durable")
    member_id = unique("durable-member")
    member = connect_raw(broker, member_id, version=4, clean=False)
    assert raw_subscribe(member, f"$share/g/{topic}").reason_codes == [1]
    member.close()
    assert broker.stop() == 0
    broker = start_broker(tmp_path, None, ("--data-dir", str(data_dir)))
    try:
        # The only member is offline: the message waits in its restored session.
        publisher = connect_raw(broker, unique("pub"), version=4)
        publisher.send(Publish(topic, b"after restart", qos=1, packet_id=3))
        assert publisher.expect() == PubAck(3)
        member = connect_raw(broker, member_id, version=4, clean=False, session_present=True)
        delivered = expect_publish(member)
        assert (delivered.topic, delivered.payload) == (topic, b"after restart")
        member.send(PubAck(delivered.packet_id))
        member.close()
        publisher.close()
    finally:
        assert broker.stop() == 0


def test_hash_topic_sends_one_topic_to_one_member(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        '[store]\nkind = "memory"\n[shared_subscriptions]\nstrategy = "hash_topic"\n'
    )
    prefix = unique("hashed")
    group = members(broker, f"$share/g/{prefix}/+", 3, protocol=V5)
    publisher = PahoCollector(broker, unique("publisher"), protocol=V5)
    for n in range(3):
        for topic_number in range(4):
            publisher.publish(f"{prefix}/{topic_number}", f"{topic_number}:{n}".encode(), 1)
    publisher.close()
    holders: dict[str, set[int]] = {}
    total = 0
    for index, client in enumerate(group):
        for payload in drain(client):
            holders.setdefault(payload.decode().split(":")[0], set()).add(index)
            total += 1
        client.close()
    assert total == 12  # each message once
    assert sorted(holders) == ["0", "1", "2", "3"]
    assert all(len(members_of_topic) == 1 for members_of_topic in holders.values()), holders


def suback_codes(client: paho.Client, topic_filter: str) -> list[int]:
    answers: queue.Queue[list[Any]] = queue.Queue()
    client.on_subscribe = lambda _c, _u, _mid, codes, _p: answers.put(list(codes))
    client.subscribe(topic_filter, 1)
    return [int(getattr(code, "value", code)) for code in answers.get(timeout=5)]


def test_turned_off_they_are_announced_unavailable_and_refused(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory('[store]\nkind = "memory"\n[shared_subscriptions]\nenabled = false\n')
    connack: queue.Queue[Any] = queue.Queue()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, unique("off"), protocol=V5)
    client.on_connect = lambda _c, _u, _f, _reason, properties: connack.put(properties)
    client.connect(broker.host, broker.port, properties=Properties(PacketTypes.CONNECT))
    client.loop_start()
    try:
        properties = connack.get(timeout=5)
        assert properties.SharedSubscriptionAvailable == 0
        assert suback_codes(client, "$share/g/t") == [ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED]
        assert suback_codes(client, "t") == [1]
    finally:
        client.disconnect()
        client.loop_stop()
