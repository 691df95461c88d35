"""A deny rule filters deliveries instead of refusing the wildcards that overlap it.

The reporter's Mosquitto acl_file, side by side with Mosquitto 2: anonymous clients may use
everything but `test/nosubscribe`; user `writer` (no password: no authentication plugin, so
anonymous access decides) may use everything. A SUBSCRIBE to `#` or `+/+` is granted, and
each message is checked for read access as Mosquitto does: the denied topic never arrives,
live or retained, online or queued for an offline session; every other topic does. SIGHUP
that adds a deny line stops that topic at once for an existing `#` subscription.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mqtt.packets import PubAck, Publish
from tests.support.broker_config import wait_for_log_lines
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
MOSQUITTO_SUB = shutil.which("mosquitto_sub") or "/usr/bin/mosquitto_sub"

OPEN_ACL = """\
topic readwrite #
user writer
topic readwrite #
"""
DENY_LINE = "topic deny test/nosubscribe\n"
ACL = DENY_LINE + OPEN_ACL  # Mosquitto reads the anonymous block wherever it starts
CONFIG = """\
[store]
kind = "memory"
[[plugins]]
module = "plugins.acl_file"
acl_file = "acl"
"""
PERSISTENT_CONFIG = CONFIG.replace('"memory"', '"sqlite"')
SUB_LIMITS = ("-q", "1", "-v", "-C", "4", "-W", "10")  # exit after 4 messages or 10 s


def start(
    tmp_path: Path, factory: Callable[..., BrokerProcess], acl: str, config: str = CONFIG
) -> BrokerProcess:
    (tmp_path / "acl").write_text(acl, encoding="utf-8")
    return factory(config)


def broker_args(broker: BrokerProcess) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port)]


def publish_as_writer(broker: BrokerProcess, topic: str, message: str, *flags: str) -> None:
    subprocess.run(
        [
            MOSQUITTO_PUB,
            *broker_args(broker),
            *("-u", "writer", "-t", topic, "-m", message, "-q", "1"),
            *flags,
        ],
        check=True,
        timeout=5,
        capture_output=True,
    )


def connect_writer(broker: BrokerProcess) -> RawClient:
    return connect_raw(broker, unique("writer"), username="writer")


def publish(client: RawClient, topic: str, payload: bytes, packet_id: int) -> None:
    client.send(Publish(topic, payload, qos=1, packet_id=packet_id))
    assert client.expect() == PubAck(packet_id)


@pytest.mark.skipif(
    shutil.which(MOSQUITTO_PUB) is None or shutil.which(MOSQUITTO_SUB) is None,
    reason="mosquitto_pub/mosquitto_sub not installed (Debian package mosquitto-clients)",
)
def test_wildcards_are_granted_and_the_denied_topic_never_arrives(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    broker = start(tmp_path, broker_factory, ACL)
    publish_as_writer(broker, "test/nosubscribe", "retained secret", "-r")
    publish_as_writer(broker, "test/ready", "retained open", "-r")
    subscribers = {
        topic_filter: subprocess.Popen(
            [MOSQUITTO_SUB, *broker_args(broker), "-V", version, "-t", topic_filter, *SUB_LIMITS],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for topic_filter, version in (("#", "mqttv311"), ("+/+", "mqttv5"))
    }
    try:
        for subscriber in subscribers.values():
            assert subscriber.stdout is not None
            # Granted (a refused filter would get no message at all); the retained message on
            # the denied topic, stored before, is not sent.
            assert subscriber.stdout.readline() == "test/ready retained open\n"
        publish_as_writer(broker, "test/nosubscribe", "live secret")
        publish_as_writer(broker, "test/other", "one")
        publish_as_writer(broker, "a/b", "two")
        publish_as_writer(broker, "test/nosubscribe", "live secret again")
        publish_as_writer(broker, "test/end", "three")
        outputs = {f: s.communicate(timeout=10) for f, s in subscribers.items()}
    finally:
        for subscriber in subscribers.values():
            if subscriber.poll() is None:
                subscriber.kill()
                subscriber.wait()
    for topic_filter, (out, err) in outputs.items():
        assert subscribers[topic_filter].returncode == 0, err
        assert out == "test/other one\na/b two\ntest/end three\n", topic_filter


def test_sighup_adding_a_deny_line_stops_that_topic_for_an_existing_subscription(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess], workers: int
) -> None:
    broker = start(tmp_path, broker_factory, OPEN_ACL)
    reader = connect_raw(broker, unique("reader"))
    writer = connect_writer(broker)
    try:
        assert subscribe_raw(reader, 1, ("#", 0)).reason_codes == [0]
        publish(writer, "test/nosubscribe", b"before", 1)
        assert expect_publish(reader).payload == b"before"
        (tmp_path / "acl").write_text(ACL, encoding="utf-8")
        broker.process.send_signal(signal.SIGHUP)
        lines = wait_for_log_lines(broker, "re-authorised the subscriptions of", workers)
        # `#` stays granted: nothing is revoked.
        assert sum(int(line.rsplit(": ", 1)[1].split()[0]) for line in lines) == 0, lines
        publish(writer, "test/nosubscribe", b"after", 2)
        publish(writer, "test/other", b"still", 3)
        packet = expect_publish(reader)
        assert (packet.topic, packet.payload) == ("test/other", b"still")
        reader.expect_nothing(within=0.5)
    finally:
        reader.close()
        writer.close()


def test_a_resumed_session_gets_only_what_its_client_may_read(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    broker = start(tmp_path, broker_factory, ACL, PERSISTENT_CONFIG)
    client_id = unique("sleeper")
    reader = connect_raw(broker, client_id, clean=False)
    assert subscribe_raw(reader, 1, ("test/+", 1)).reason_codes == [1]
    reader.close()
    writer = connect_writer(broker)
    try:
        publish(writer, "test/nosubscribe", b"secret", 1)
        publish(writer, "test/other", b"queued", 2)
    finally:
        writer.close()
    again = connect_raw(broker, client_id, clean=False, session_present=True)
    try:
        packet = expect_publish(again)
        assert (packet.topic, packet.payload) == ("test/other", b"queued")
        again.send(PubAck(packet.packet_id))
        again.expect_nothing(within=0.5)
    finally:
        again.close()


def test_a_shared_subscription_gives_the_denied_topic_to_a_member_that_may_read_it(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    broker = start(tmp_path, broker_factory, ACL)
    anonymous = connect_raw(broker, unique("member"), version=5)
    privileged = connect_raw(broker, unique("member"), version=5, username="writer")
    writer = connect_writer(broker)
    try:
        for member in (anonymous, privileged):
            assert subscribe_raw(member, 1, ("$share/g/test/#", 0)).reason_codes == [0]
        for number in range(4):  # round robin would give two of them to each member
            publish(writer, "test/nosubscribe", b"secret-%d" % number, number + 1)
        payloads = sorted(expect_publish(privileged).payload for _ in range(4))
        assert payloads == [b"secret-%d" % number for number in range(4)]
        anonymous.expect_nothing(within=0.5)
    finally:
        anonymous.close()
        privileged.close()
        writer.close()
