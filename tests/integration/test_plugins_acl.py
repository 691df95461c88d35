"""plugins.acl_file against a live broker: Mosquitto acl_file rules on real SUBSCRIBE / PUBLISH.

One broker for the module, with plugins.auth_file (users alice and bob) and plugins.acl_file
(the ACL below: anonymous `topic` lines, per-user blocks, `%c` / `%u` patterns, a deny rule).
A refused filter gets 0x80 in its own slot of the SUBACK, the others are granted
[MQTT-3.9.3-1] [MQTT-3.9.3-2]; a refused PUBLISH is acknowledged by the normal QoS flow in
3.1.1 but not routed [MQTT-3.3.5-2], and gets PUBACK 0x87 in 5.0.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqtt.packets import PubAck, PubComp, Publish, PubRec, PubRel
from mqtt.reason_codes import SUBACK_FAILURE_V311, ReasonCode
from plugins.auth_file import hash_password
from tests.support.broker_config import running_broker
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
ACL = """\
# anonymous clients
topic read public/#

user alice
topic readwrite alice/#
topic deny alice/private
topic read shared/#

user bob
topic readwrite shared/#

# every client
pattern readwrite devices/%c/#
pattern read users/%u/#
"""
CONFIG = """\
[store]
kind = "memory"
[auth]
allow_anonymous = true
[[plugins]]
module = "plugins.auth_file"
password_file = "passwd"
[[plugins]]
module = "plugins.acl_file"
acl_file = "acl"
"""
REFUSED_V3 = SUBACK_FAILURE_V311
NOT_AUTHORIZED_V5 = ReasonCode.NOT_AUTHORIZED


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("acl")
    lines = (f"{user}:{hash_password(pw.encode()).encode()}\n" for user, pw in PASSWORDS.items())
    (directory / "passwd").write_text("".join(lines), encoding="utf-8")
    (directory / "acl").write_text(ACL, encoding="utf-8")
    with running_broker(directory, CONFIG) as broker:
        yield broker


def connect_as(
    broker: BrokerProcess, user: str | None, version: int = 4, client_id: str | None = None
) -> RawClient:
    """A connected raw client, logged in as `user` (None: anonymous)."""
    password = PASSWORDS[user].encode() if user is not None else None
    return connect_raw(
        broker,
        client_id or unique(user or "anon"),
        version=version,
        username=user,
        password=password,
    )


def test_denied_filter_gets_0x80_others_granted_MQTT_3_9_3_1(acl_broker: BrokerProcess) -> None:
    alice = connect_as(acl_broker, "alice")
    suback = subscribe_raw(
        alice,
        1,
        ("alice/inbox", 1),
        ("shared/#", 2),
        ("bob/inbox", 0),  # no rule for alice
        ("alice/private", 0),  # deny rule
        ("alice/#", 1),  # overlaps the deny rule: granted, checked per message
        ("public/#", 0),  # anonymous-only rule
    )
    assert suback.reason_codes == [1, 2, REFUSED_V3, REFUSED_V3, 1, REFUSED_V3]
    alice.close()


def test_denied_filter_gets_0x87_in_mqtt5(acl_broker: BrokerProcess) -> None:
    alice = connect_as(acl_broker, "alice", version=5)
    suback = subscribe_raw(alice, 1, ("bob/inbox", 0), ("alice/inbox", 1))
    assert suback.reason_codes == [NOT_AUTHORIZED_V5, 1]
    alice.close()


def test_anonymous_topic_rules_apply_only_to_anonymous_clients(acl_broker: BrokerProcess) -> None:
    anonymous = connect_as(acl_broker, None)
    suback = subscribe_raw(anonymous, 1, ("public/#", 0), ("shared/#", 0), ("alice/inbox", 0))
    assert suback.reason_codes == [0, REFUSED_V3, REFUSED_V3]
    anonymous.close()


def test_client_id_pattern_grants_own_subtree_only(acl_broker: BrokerProcess) -> None:
    client_id = unique("dev")
    other_id = unique("dev")
    device = connect_as(acl_broker, None, client_id=client_id)
    other = connect_as(acl_broker, None, client_id=other_id)
    suback = subscribe_raw(device, 1, (f"devices/{client_id}/#", 1), (f"devices/{other_id}/#", 0))
    assert suback.reason_codes == [1, REFUSED_V3]
    assert subscribe_raw(other, 1, (f"devices/{other_id}/#", 1)).reason_codes == [1]
    # Writing into another client's subtree: acknowledged, not routed.
    device.send(Publish(f"devices/{other_id}/cmd", b"intrusion", qos=1, packet_id=2))
    assert device.expect() == PubAck(2)
    # Writing into its own subtree is routed (the device reads its own topic).
    device.send(Publish(f"devices/{client_id}/temp", b"21.5", qos=1, packet_id=3))
    packets = [device.expect(), device.expect()]
    publishes = [p for p in packets if isinstance(p, Publish)]
    assert PubAck(3) in packets
    assert [(p.topic, p.payload) for p in publishes] == [(f"devices/{client_id}/temp", b"21.5")]
    other.expect_nothing(0.3)
    device.close()
    other.close()


def test_user_name_pattern_applies_to_logged_in_users_only(acl_broker: BrokerProcess) -> None:
    alice = connect_as(acl_broker, "alice")
    assert subscribe_raw(alice, 1, ("users/alice/#", 0), ("users/bob/#", 0)).reason_codes == [
        0,
        REFUSED_V3,
    ]
    anonymous = connect_as(acl_broker, None)
    assert subscribe_raw(anonymous, 1, ("users/alice/#", 0)).reason_codes == [REFUSED_V3]
    alice.close()
    anonymous.close()


def reader_on_shared(broker: BrokerProcess) -> RawClient:
    """alice, who may read shared/#, subscribed to it."""
    alice = connect_as(broker, "alice")
    assert subscribe_raw(alice, 1, ("shared/#", 2)).reason_codes == [2]
    return alice


def assert_next_is_allowed_publish(broker: BrokerProcess, reader: RawClient, topic: str) -> None:
    """bob (allowed to write) publishes on `topic`: the reader's next packet is bob's message.

    Run after a denied publish on the same topic: had that one been routed, the reader would
    have received it first.
    """
    bob = connect_as(broker, "bob")
    bob.send(Publish(topic, b"from bob", qos=1, packet_id=1))
    assert bob.expect() == PubAck(1)
    delivered = expect_publish(reader)
    assert (delivered.topic, delivered.payload) == (topic, b"from bob")
    reader.expect_nothing(0.2)
    bob.close()


def test_denied_qos1_publish_is_acked_but_not_routed_MQTT_3_3_5_2(
    acl_broker: BrokerProcess,
) -> None:
    reader = reader_on_shared(acl_broker)
    topic = f"shared/{unique('q1')}"
    anonymous = connect_as(acl_broker, None)  # no write rule for shared/#
    anonymous.send(Publish(topic, b"denied", qos=1, packet_id=7))
    assert anonymous.expect() == PubAck(7, reason_code=0)
    assert_next_is_allowed_publish(acl_broker, reader, topic)
    anonymous.close()
    reader.close()


def test_denied_qos1_publish_gets_puback_0x87_in_mqtt5(acl_broker: BrokerProcess) -> None:
    reader = reader_on_shared(acl_broker)
    topic = f"shared/{unique('q1v5')}"
    anonymous = connect_as(acl_broker, None, version=5)
    anonymous.send(Publish(topic, b"denied", qos=1, packet_id=8))
    puback = anonymous.expect()
    assert isinstance(puback, PubAck)
    assert (puback.packet_id, puback.reason_code) == (8, NOT_AUTHORIZED_V5)
    assert_next_is_allowed_publish(acl_broker, reader, topic)
    anonymous.close()
    reader.close()


def test_denied_qos2_publish_completes_the_flow_but_is_not_routed(
    acl_broker: BrokerProcess,
) -> None:
    reader = reader_on_shared(acl_broker)
    topic = f"shared/{unique('q2')}"
    anonymous = connect_as(acl_broker, None)
    anonymous.send(Publish(topic, b"denied", qos=2, packet_id=9))
    assert anonymous.expect() == PubRec(9)
    anonymous.send(PubRel(9))
    assert anonymous.expect() == PubComp(9)
    assert_next_is_allowed_publish(acl_broker, reader, topic)
    anonymous.close()
    reader.close()


def test_allowed_qos2_publish_is_routed(acl_broker: BrokerProcess) -> None:
    """The positive control of the QoS 2 test: bob's QoS 2 publish reaches alice."""
    reader = reader_on_shared(acl_broker)
    topic = f"shared/{unique('q2ok')}"
    bob = connect_as(acl_broker, "bob")
    bob.send(Publish(topic, b"exactly once", qos=2, packet_id=4))
    assert bob.expect() == PubRec(4)
    bob.send(PubRel(4))
    assert bob.expect() == PubComp(4)
    delivered = expect_publish(reader)
    assert (delivered.topic, delivered.payload, delivered.qos) == (topic, b"exactly once", 2)
    bob.close()
    reader.close()
