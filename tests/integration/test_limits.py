"""Configured limits and malformed input: each closes only the offending connection.

The broker under test runs with small `[limits]`; a bystander client connected before the
offence must keep working afterwards, and every close leaves a log line naming the client.
The bad input comes from the codec's shared wire-fixture table (tests/fixtures/wire_packets).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqtt.errors import UnsupportedProtocolVersionError
from mqtt.packets import (
    ConnAck,
    PingReq,
    PingResp,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    UnsubAck,
)
from mqtt.reason_codes import SUBACK_FAILURE_V311, ConnackReturnCode, ReasonCode
from tests.fixtures.wire_packets import BAD_CASES, WIRE_CASES, BadWireCase, WireCase
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

LIMITS_CONFIG = """
[limits]
max_packet_size = 1024
max_awaiting_rel = 3
max_client_id_length = 23
max_topic_levels = 4
"""


@pytest.fixture(scope="module")
def limited_broker(
    tmp_path_factory: pytest.TempPathFactory, workers: int
) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("limits"), LIMITS_CONFIG) as process:
        yield process


class Bystander:
    """A client connected before the offence; `assert_served` checks it still round-trips."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.topic = unique("by")
        self.client = connect_raw(broker, unique("by"))
        subscribe_raw(self.client, 1, (self.topic, 0))

    def assert_served(self) -> None:
        self.client.send(Publish(self.topic, b"still here"))
        assert expect_publish(self.client).payload == b"still here"
        self.client.send(PingReq())
        assert isinstance(self.client.expect(), PingResp)
        self.client.close()


def _assert_closed_and_logged(broker: BrokerProcess, client: RawClient, client_id: str) -> None:
    assert client.is_closed_by_broker(3)
    client.close()
    line = wait_for_log(broker, f"closing client '{client_id}'")
    assert " WARNING " in line, line


def test_publish_over_max_packet_size_closes_only_that_connection(
    limited_broker: BrokerProcess,
) -> None:
    bystander = Bystander(limited_broker)
    client_id = unique("big")
    client = connect_raw(limited_broker, client_id)
    fits = Publish(bystander.topic, b"x" * 1000)  # 1 + 2 + 2 + len(topic) + 1000 < 1024
    client.send(fits)
    assert expect_publish(bystander.client).payload == fits.payload
    client.send(Publish(bystander.topic, b"x" * 1100))
    _assert_closed_and_logged(limited_broker, client, client_id)
    bystander.client.expect_nothing(0.2)  # the oversized message was not routed
    bystander.assert_served()


def test_fourth_unreleased_qos2_publish_waits_for_a_pubrel(limited_broker: BrokerProcess) -> None:
    """Beyond max_awaiting_rel a QoS 2 PUBLISH waits for room, it does not close the
    connection; the PUBREL that frees the room is still read (docs/overload.md)."""
    bystander = Bystander(limited_broker)
    client_id = unique("rel")
    client = connect_raw(limited_broker, client_id)
    topic = unique("rel")
    for packet_id in (1, 2, 3):
        client.send(Publish(topic, b"q2", qos=2, packet_id=packet_id))
        assert client.expect() == PubRec(packet_id)
    client.send(Publish(topic, b"q2", qos=2, packet_id=4))
    client.send(PingReq())
    assert isinstance(client.expect(), PingResp)  # read and answered; no PUBREC 4 yet
    client.send(PubRel(1))
    assert client.expect() == PubComp(1)
    assert client.expect() == PubRec(4)
    line = wait_for_log(limited_broker, "has 3 QoS 2 messages awaiting PUBREL")
    assert client_id in line, line
    client.close()
    bystander.assert_served()


def test_client_id_over_max_length_refused_0x02_MQTT_3_1_3_5(
    limited_broker: BrokerProcess,
) -> None:
    accepted = connect_raw(limited_broker, "c" * 23)
    accepted.close()
    client = RawClient(limited_broker.host, limited_broker.port)
    connack = client.connect("c" * 24)
    assert isinstance(connack, ConnAck)
    assert connack.reason_code == ConnackReturnCode.IDENTIFIER_REJECTED
    assert client.is_closed_by_broker(3)
    client.close()


def test_topic_levels_over_max_refused(limited_broker: BrokerProcess) -> None:
    bystander = Bystander(limited_broker)
    prefix = unique("lv")
    client_id = unique("levels")
    client = connect_raw(limited_broker, client_id)
    suback = subscribe_raw(client, 1, (f"{prefix}/b/c/d", 0), (f"{prefix}/b/c/d/e", 0))
    assert suback.reason_codes == [ReasonCode.GRANTED_QOS_0, SUBACK_FAILURE_V311]
    client.send(Publish(f"{prefix}/b/c/d", b"four levels"))
    assert expect_publish(client).payload == b"four levels"
    client.send(Publish(f"{prefix}/b/c/d/e", b"five levels"))
    _assert_closed_and_logged(limited_broker, client, client_id)
    bystander.assert_served()


AFTER_CONNECT = [case for case in BAD_CASES if case.version is not None]
BEFORE_CONNECT = [case for case in BAD_CASES if case.version is None]
# Valid packets only a server sends: from a client they are a protocol violation, and the
# receiver closes the connection [MQTT-4.8.0-1].
SERVER_ONLY = [
    case
    for case in WIRE_CASES
    if case.version in (4, 5) and isinstance(case.packet, ConnAck | SubAck | UnsubAck | PingResp)
]


@pytest.mark.parametrize(
    "case", AFTER_CONNECT + SERVER_ONLY, ids=lambda case: f"{case.name}-v{case.version}"
)
def test_bad_input_closes_only_that_connection(
    broker: BrokerProcess, case: BadWireCase | WireCase
) -> None:
    bystander = Bystander(broker)
    client_id = unique("malformed")
    client = connect_raw(broker, client_id, version=case.version)
    client.send_bytes(case.wire)
    _assert_closed_and_logged(broker, client, client_id)
    bystander.assert_served()


@pytest.mark.parametrize("case", BEFORE_CONNECT, ids=lambda case: case.name)
def test_bad_first_packet_closes_only_that_connection(
    broker: BrokerProcess, case: BadWireCase
) -> None:
    bystander = Bystander(broker)
    client = RawClient(broker.host, broker.port)
    client.send_bytes(case.wire)
    if case.error is UnsupportedProtocolVersionError:
        connack = client.expect()  # [MQTT-3.1.2-2]
        assert isinstance(connack, ConnAck)
        assert connack.reason_code == ConnackReturnCode.UNACCEPTABLE_PROTOCOL_VERSION
    assert client.is_closed_by_broker(3)
    client.close()
    bystander.assert_served()
