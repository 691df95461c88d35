"""Edge cases of the protocol that Mosquitto answers, over real sockets with raw packets.

- A packet only a server sends (CONNACK, SUBACK, UNSUBACK, PINGRESP) from a client is a
  Protocol Error by its type, whatever its body holds: 5.0 DISCONNECT 0x82, 3.1.1 close.
- A delivery acknowledged with an ack that does not fit it (PUBCOMP for QoS 1, PUBACK for
  QoS 2) is a Protocol Error, instead of a delivery left in flight for good.
- A client id or will topic holding control characters (U+0001-U+001F, U+007F-U+009F) is
  refused, unless `[limits] allow_control_characters`.

Each offence closes only its own connection and leaves a WARNING line naming the client.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Will,
)
from mqtt.reason_codes import ConnackReturnCode, ReasonCode
from tests.fixtures.wire_packets import h
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient


def _closed_with_warning(broker: BrokerProcess, client: RawClient, client_id: str) -> str:
    """Assert the broker closed `client` and logged a WARNING naming it; the line."""
    assert client.is_closed_by_broker(3)
    client.close()
    line = wait_for_log(broker, f"closing client '{client_id}'")
    assert " WARNING " in line, line
    return line


# Each with a body that is broken too (a property not allowed in it, an unknown one, a
# body where none belongs): the type decides before the body is read.
SERVER_ONLY_5 = {
    "connack_bad_property": "20 05 00 00 02 0100",
    "suback_unknown_property": "90 05 0001 01 ff 00",
    "unsuback_bad_property": "b0 06 0001 02 0100 00",
    "pingresp_with_body": "d0 01 00",
}
SERVER_ONLY_4 = {
    "connack_reserved_flags": "21 02 0000",
    "suback": "90 03 0001 00",
    "unsuback": "b0 02 0001",
    "pingresp_with_body": "d0 01 00",
}


@pytest.mark.parametrize("wire", SERVER_ONLY_5.values(), ids=SERVER_ONLY_5.keys())
def test_server_only_packet_from_a_5_0_client_is_disconnect_0x82(
    broker: BrokerProcess, wire: str
) -> None:
    client_id = unique("srvonly5")
    client = connect_raw(broker, client_id, version=5)
    client.send_bytes(h(wire))
    disconnect = client.expect()
    assert isinstance(disconnect, Disconnect), disconnect
    assert disconnect.reason_code == ReasonCode.PROTOCOL_ERROR, disconnect
    line = _closed_with_warning(broker, client, client_id)
    assert "sent only by a server" in line, line


@pytest.mark.parametrize("wire", SERVER_ONLY_4.values(), ids=SERVER_ONLY_4.keys())
def test_server_only_packet_from_a_3_1_1_client_closes_it(broker: BrokerProcess, wire: str) -> None:
    client_id = unique("srvonly4")
    client = connect_raw(broker, client_id)
    client.send_bytes(h(wire))
    line = _closed_with_warning(broker, client, client_id)
    assert "sent only by a server" in line, line


# (QoS of the delivery, the acks the client answers it with; the last one does not fit)
WRONG_ACKS = {
    "qos1_pubcomp": (1, [PubComp]),
    "qos1_pubrec": (1, [PubRec]),
    "qos2_puback": (2, [PubAck]),
    "qos2_pubrec_then_puback": (2, [PubRec, PubAck]),
}


def _deliver_to(broker: BrokerProcess, client: RawClient, qos: int) -> int:
    """Subscribe `client` at `qos` and have another client publish to it at `qos`; the
    delivery's packet id."""
    topic = unique("wrongack")
    subscribe_raw(client, 1, (topic, qos))
    publisher = connect_raw(broker, unique("pub"))
    publisher.send(Publish(topic, b"x", qos=qos, packet_id=1))
    assert publisher.expect().packet_id == 1  # PUBACK or PUBREC: routed
    publisher.close()
    publish = expect_publish(client)
    assert publish.qos == qos and publish.packet_id is not None, publish
    return publish.packet_id


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("case", WRONG_ACKS.values(), ids=WRONG_ACKS.keys())
def test_an_ack_that_does_not_fit_the_delivery_closes_the_connection(
    broker: BrokerProcess, case: tuple[int, list[type]], version: int
) -> None:
    qos, acks = case
    client_id = unique("wrongack")
    client = connect_raw(broker, client_id, version=version)
    packet_id = _deliver_to(broker, client, qos)
    for ack in acks[:-1]:
        client.send(ack(packet_id))
        assert client.expect() == PubRel(packet_id)  # a fitting PUBREC's PUBREL
    client.send(acks[-1](packet_id))
    if version == 5:
        disconnect = client.expect()
        assert isinstance(disconnect, Disconnect), disconnect
        assert disconnect.reason_code == ReasonCode.PROTOCOL_ERROR, disconnect
    assert client.is_closed_by_broker(3)  # at once, not after the keep-alive
    client.close()
    name = acks[-1].__name__.upper()
    line = wait_for_log(broker, f"closing client '{client_id}': protocol violation: {name}")
    assert " WARNING " in line and f"packet id {packet_id}" in line, line


def test_fitting_acks_keep_the_connection(broker: BrokerProcess) -> None:
    """The same exchanges with the acks that fit leave the connection served."""
    client = connect_raw(broker, unique("rightack"), version=5)
    client.send(PubAck(_deliver_to(broker, client, 1)))
    packet_id = _deliver_to(broker, client, 2)
    client.send(PubRec(packet_id))
    assert client.expect() == PubRel(packet_id)
    client.send(PubRec(packet_id))  # a repeated PUBREC: its PUBREL again [MQTT-4.3.3-1]
    assert client.expect() == PubRel(packet_id)
    client.send(PubComp(packet_id))
    _deliver_to(broker, client, 1)
    client.close()


@pytest.mark.parametrize(
    ("version", "code"),
    [(4, ConnackReturnCode.IDENTIFIER_REJECTED), (5, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID)],
)
@pytest.mark.parametrize("control", ["\x01", "\x1b", "\x7f", "\x9f"])
def test_client_id_with_a_control_character_is_refused(
    broker: BrokerProcess, version: int, code: int, control: str
) -> None:
    client_id = unique("ctl") + control
    client = RawClient(broker.host, broker.port, version=version)
    connack = client.connect(client_id)
    assert isinstance(connack, ConnAck) and connack.reason_code == code, connack
    assert client.is_closed_by_broker(3)
    client.close()
    line = wait_for_log(broker, f"client id {client_id!r} holds control characters")
    assert "refused CONNECT" in line, line


def test_will_topic_with_a_control_character_is_refused(broker: BrokerProcess) -> None:
    """5.0: CONNACK 0x90 Topic Name invalid; 3.1.1 has no return code for it: closed."""
    topic = unique("will") + "/\x1b[2J"
    client = RawClient(broker.host, broker.port, version=5)
    connack = client.connect(unique("ctlwill"), will=Will(topic, b"x"))
    assert isinstance(connack, ConnAck), connack
    assert connack.reason_code == ReasonCode.TOPIC_NAME_INVALID, connack
    assert client.is_closed_by_broker(3)
    client.close()
    client = RawClient(broker.host, broker.port, version=4)
    client.send(Connect(client_id=unique("ctlwill"), protocol_version=4, will=Will(topic, b"x")))
    with pytest.raises(ConnectionError):  # closed, without a CONNACK
        client.expect(3)
    client.close()
    wait_for_log(broker, f"will topic {topic!r} holds control characters")
    line = wait_for_log(broker, "protocol violation: will topic")
    assert " WARNING " in line, line


@pytest.mark.parametrize("version", [4, 5])
def test_control_characters_accepted_when_configured(
    broker_factory: Callable[..., BrokerProcess], version: int
) -> None:
    broker = broker_factory("[limits]\nallow_control_characters = true\n")
    client_id = unique("ctl") + "\x01"
    client = connect_raw(broker, client_id, version=version, will=Will("w/\x1b", b"x"))
    client.send(PingReq())
    assert isinstance(client.expect(), PingResp)
    client.close()
