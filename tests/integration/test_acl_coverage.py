"""The ACL covers every message a client causes or receives, not only SUBSCRIBE and PUBLISH.

Against live brokers with plugins.auth_file and plugins.acl_file (alice may use `alice/#`,
bob `bob/#`), each attack found by the security review, with a control that shows the
allowed case still works:
- a will is authorised like a PUBLISH of its client when it would be published; 5.0 refuses
  an unauthorised will at CONNECT with 0x87 [MQTT-3.2.2-8];
- no client publishes to `$SYS`, as a PUBLISH, retained, or as a will, whatever the ACL;
- a client that resumes someone else's persistent session by its client id receives
  nothing its own identity may not read (subscriptions and queued messages re-checked);
- SIGHUP re-authorises existing subscriptions: a revoked one stops receiving.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mqtt.packets import ConnAck, PubAck, Publish, Will
from mqtt.reason_codes import ReasonCode
from plugins.auth_file import hash_password
from tests.support.broker_config import running_broker, wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
ACL = """\
user alice
topic readwrite alice/#
topic read news/#

user bob
topic readwrite bob/#
topic readwrite news/#
"""
CONFIG = """\
[store]
kind = "memory"
[[plugins]]
module = "plugins.auth_file"
password_file = "passwd"
[[plugins]]
module = "plugins.acl_file"
acl_file = "acl"
"""
NOT_AUTHORIZED_V5 = ReasonCode.NOT_AUTHORIZED


def write_acl_broker_files(directory: Path) -> None:
    lines = (f"{user}:{hash_password(pw.encode()).encode()}\n" for user, pw in PASSWORDS.items())
    (directory / "passwd").write_text("".join(lines), encoding="utf-8")
    (directory / "acl").write_text(ACL, encoding="utf-8")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("acl-coverage")
    write_acl_broker_files(directory)
    with running_broker(directory, CONFIG) as broker:
        yield broker


def connect_as(
    broker: BrokerProcess, user: str, client_id: str | None = None, **kwargs: object
) -> RawClient:
    return connect_raw(
        broker,
        client_id or unique(user),
        username=user,
        password=PASSWORDS[user].encode(),
        **kwargs,  # type: ignore[arg-type]
    )


# ----- wills ----------------------------------------------------------------------------


def test_a_will_on_a_topic_the_client_may_not_publish_is_dropped(
    acl_broker: BrokerProcess,
) -> None:
    bob = connect_as(acl_broker, "bob")
    alice_watch = connect_as(acl_broker, "alice")
    try:
        subscribe_raw(bob, 1, ("bob/inbox", 1))
        subscribe_raw(alice_watch, 1, ("alice/status", 1))
        forger = connect_as(
            acl_broker, "alice", will=Will("bob/inbox", b"forged", qos=1, retain=True)
        )
        honest = connect_as(acl_broker, "alice", will=Will("alice/status", b"gone", qos=1))
        forger.close()  # no DISCONNECT: the will would be published [MQTT-3.1.2-8]
        honest.close()
        will = expect_publish(alice_watch)  # control: an allowed will still goes out
        assert (will.topic, will.payload) == ("alice/status", b"gone")
        bob.expect_nothing(within=0.5)
        wait_for_log(acl_broker, "on 'bob/inbox': not authorised")
    finally:
        bob.close()
        alice_watch.close()
    late = connect_as(acl_broker, "bob")
    try:
        subscribe_raw(late, 1, ("bob/inbox", 1))
        late.expect_nothing(within=0.5)  # the forged will was not retained either
    finally:
        late.close()


def test_mqtt5_connect_with_an_unauthorised_will_gets_0x87(acl_broker: BrokerProcess) -> None:
    client = RawClient(acl_broker.host, acl_broker.port, version=5)
    try:
        connack = client.connect(
            unique("alice"),
            username="alice",
            password=b"alice-pw",
            will=Will("bob/inbox", b"forged"),
        )
        assert isinstance(connack, ConnAck)
        assert connack.reason_code == NOT_AUTHORIZED_V5
        assert client.is_closed_by_broker()
    finally:
        client.close()
    allowed = RawClient(acl_broker.host, acl_broker.port, version=5)
    try:
        connack = allowed.connect(
            unique("alice"), username="alice", password=b"alice-pw", will=Will("alice/x", b"w")
        )
        assert isinstance(connack, ConnAck)
        assert connack.reason_code == ReasonCode.SUCCESS
    finally:
        allowed.close()


# ----- $SYS -------------------------------------------------------------------------------


def test_no_client_publishes_to_sys_even_without_an_acl(broker: BrokerProcess) -> None:
    watcher = connect_raw(broker, unique("watch"))
    publisher = connect_raw(broker, unique("pub"), version=5)
    try:
        subscribe_raw(watcher, 1, ("$SYS/#", 0), ("normal/#", 0))
        publisher.send(Publish("$SYS/broker/uptime", b"forged", qos=1, packet_id=7, retain=True))
        puback = publisher.expect()
        assert isinstance(puback, PubAck)
        assert (puback.packet_id, puback.reason_code) == (7, NOT_AUTHORIZED_V5)
        publisher.send(Publish("$SYS", b"forged", qos=0))
        publisher.send(Publish("normal/x", b"control", qos=0))
        packet = expect_publish(watcher)
        assert packet.topic == "normal/x"  # the control arrives, the $SYS ones never do
        watcher.expect_nothing(within=0.3)
    finally:
        watcher.close()
        publisher.close()
    late = connect_raw(broker, unique("late"))
    try:
        subscribe_raw(late, 1, ("$SYS/#", 0))
        late.expect_nothing(within=0.3)  # not retained
    finally:
        late.close()


def test_a_will_on_sys_is_dropped(broker: BrokerProcess) -> None:
    watcher = connect_raw(broker, unique("watch"))
    try:
        subscribe_raw(watcher, 1, ("$SYS/#", 0))
        client = connect_raw(broker, unique("w"), will=Will("$SYS/broker/version", b"forged"))
        client.close()
        watcher.expect_nothing(within=0.5)
        wait_for_log(broker, "on '$SYS/broker/version': not authorised")
    finally:
        watcher.close()


# ----- resumed sessions -------------------------------------------------------------------


def test_resuming_another_users_session_yields_nothing_it_may_not_read(
    acl_broker: BrokerProcess,
) -> None:
    phone = unique("bobphone")
    bob = connect_as(acl_broker, "bob", phone, clean=False)
    subscribe_raw(bob, 1, ("bob/private", 1))
    bob.close()
    sender = connect_as(acl_broker, "bob")
    try:
        for number in range(3):
            sender.send(Publish("bob/private", b"queued-%d" % number, qos=1, packet_id=number + 1))
            assert isinstance(sender.expect(), PubAck)
        alice = connect_as(acl_broker, "alice", phone, clean=False, session_present=True)
        try:
            alice.expect_nothing(within=0.5)  # none of bob's queued messages
            sender.send(Publish("bob/private", b"live", qos=1, packet_id=9))
            assert isinstance(sender.expect(), PubAck)
            alice.expect_nothing(within=0.5)  # and his subscription is gone
        finally:
            alice.close()
    finally:
        sender.close()
    wait_for_log(acl_broker, f"session '{phone}' of user 'bob' taken by user 'alice'")
    wait_for_log(acl_broker, "revoked: 'bob/private'")


def test_resuming_ones_own_session_keeps_what_the_acl_allows(acl_broker: BrokerProcess) -> None:
    phone = unique("alicephone")
    alice = connect_as(acl_broker, "alice", phone, clean=False)
    subscribe_raw(alice, 1, ("alice/inbox", 1))
    alice.close()
    sender = connect_as(acl_broker, "alice")
    try:
        sender.send(Publish("alice/inbox", b"kept", qos=1, packet_id=1))
        assert isinstance(sender.expect(), PubAck)
    finally:
        sender.close()
    again = connect_as(acl_broker, "alice", phone, clean=False, session_present=True)
    try:
        packet = expect_publish(again)
        assert (packet.topic, packet.payload) == ("alice/inbox", b"kept")
    finally:
        again.close()


# ----- reload -------------------------------------------------------------------------------


def test_sighup_revokes_a_subscription_the_new_acl_denies(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess], workers: int
) -> None:
    write_acl_broker_files(tmp_path)
    broker = broker_factory(CONFIG)
    alice = connect_as(broker, "alice")
    bob = connect_as(broker, "bob")
    try:
        subscribe_raw(alice, 1, ("news/#", 0), ("alice/#", 0))
        bob.send(Publish("news/1", b"before", qos=0))
        assert expect_publish(alice).payload == b"before"
        (tmp_path / "acl").write_text(ACL.replace("topic read news/#\n", ""), encoding="utf-8")
        broker.process.send_signal(signal.SIGHUP)
        # One line per worker (each re-authorises its own sessions); alice's says 1.
        lines = wait_for_log_lines(broker, "re-authorised the subscriptions of", workers)
        assert sum(int(line.rsplit(": ", 1)[1].split()[0]) for line in lines) == 1, lines
        bob.send(Publish("news/2", b"after", qos=0))
        alice.send(Publish("alice/1", b"still mine", qos=0))
        packet = expect_publish(alice)
        assert (packet.topic, packet.payload) == ("alice/1", b"still mine")
        alice.expect_nothing(within=0.5)
    finally:
        alice.close()
        bob.close()
