"""MQTT 5 clients get version-5 answers; features the broker does not offer are refused."""

from __future__ import annotations

from mqtt.packets import Disconnect, Publish
from mqtt.reason_codes import ReasonCode
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, unique
from tests.support.raw_client import RawClient


def test_topic_alias_above_the_announced_maximum_is_refused_mqtt_3_3_2_9(
    broker: BrokerProcess,
) -> None:
    client = connect_raw(broker, unique("alias"), version=5)  # CONNACK allows 10 aliases
    client.send(Publish("a/b", b"x", properties={0x23: 11}))
    answer = client.expect()
    assert isinstance(answer, Disconnect)
    assert answer.reason_code == ReasonCode.TOPIC_ALIAS_INVALID
    # ... and says why in a Reason String [MQTT-3.14.2-3]
    assert answer.properties[0x1F].startswith("Topic Alias 11 outside 1..10")
    assert client.is_closed_by_broker()
    assert "Topic Alias" in broker.log()


def test_empty_client_id_gets_an_assigned_identifier_mqtt_3_2_2_16(broker: BrokerProcess) -> None:
    client = RawClient(broker.host, broker.port, version=5)
    connack = client.connect("", clean=True)
    assert connack.reason_code == ReasonCode.SUCCESS
    assigned = connack.properties[0x12]
    assert assigned.startswith("auto-")
    client.close()
