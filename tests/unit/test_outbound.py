"""channel.outbound: how a 5.0 client's PUBLISHes are written (properties, expiry left,
topic aliases, Maximum Packet Size), decoded back with the project's codec."""

from __future__ import annotations

from typing import Any

from channel.outbound import Outbound
from core.client import ClientInfo
from core.message import Message
from core.reasons import DropReason
from core.session_state import Delivery
from mqtt import PacketDecoder
from mqtt.packets import Publish


def client(**limits: Any) -> ClientInfo:
    return ClientInfo(
        client_id="sub",
        username=None,
        peer="p",
        protocol_version=5,
        clean_start=True,
        keepalive=60,
        **limits,
    )


def decoded(data: bytes | DropReason) -> Publish:
    assert isinstance(data, bytes), data
    (packet,) = PacketDecoder(max_packet_size=1 << 20, protocol_version=5).feed(data)
    assert isinstance(packet, Publish)
    return packet


def delivery(topic: str = "a/b", properties: dict[int, Any] | None = None, **kw: Any) -> Delivery:
    message = Message(topic=topic, payload=b"payload", qos=1, properties=properties or {}, **kw)
    return Delivery(message, 1, False)


USER = [("first", "1"), ("second", "2"), ("first", "3")]


def test_publisher_properties_are_forwarded_in_order_mqtt_3_3_2_17_to_20() -> None:
    properties = {
        0x01: 1,  # Payload Format Indicator
        0x03: "text/plain",  # Content Type
        0x08: "reply/here",  # Response Topic
        0x09: b"\x00corr",  # Correlation Data
        0x26: USER,  # User Properties, order kept
        0x23: 4,  # the publisher's Topic Alias: its connection's, never forwarded
    }
    packet = decoded(Outbound(client()).publish(delivery(properties=properties), 9, False, 0.0))
    assert packet.properties == {
        0x01: 1,
        0x03: "text/plain",
        0x08: "reply/here",
        0x09: b"\x00corr",
        0x26: USER,
    }
    assert packet.topic == "a/b" and packet.packet_id == 9


def test_message_expiry_is_sent_as_what_is_left_mqtt_3_3_2_6() -> None:
    sent = delivery(properties={0x02: 60}, timestamp=1000.0)
    assert decoded(Outbound(client()).publish(sent, 1, False, 1020.5)).properties == {0x02: 40}
    assert Outbound(client()).publish(sent, 1, False, 1060.0) is DropReason.EXPIRED


def test_every_matching_subscription_identifier_is_sent() -> None:
    message = Message(topic="a/b", payload=b"")
    sent = Delivery(message, 0, False, (3, 12))
    assert decoded(Outbound(client()).publish(sent, None, False, 0.0)).properties == {0x0B: [3, 12]}


def test_packets_over_the_clients_maximum_are_not_sent_mqtt_3_1_2_25() -> None:
    outbound = Outbound(client(maximum_packet_size=20))
    assert outbound.publish(delivery(topic="t"), 1, False, 0.0) != DropReason.PACKET_TOO_LARGE
    big = delivery(topic="t/" + "x" * 30)
    assert outbound.publish(big, 1, False, 0.0) is DropReason.PACKET_TOO_LARGE
    assert isinstance(Outbound(client()).publish(big, 1, False, 0.0), bytes)  # no limit set


def test_outgoing_topic_aliases_with_lru_reuse_mqtt_3_3_2_10() -> None:
    outbound = Outbound(client(topic_alias_maximum=2))

    def send(topic: str) -> tuple[str, int]:
        packet = decoded(outbound.publish(delivery(topic=topic), 1, False, 0.0))
        return packet.topic, packet.properties[0x23]

    assert send("a") == ("a", 1)  # first time: topic and alias
    assert send("a") == ("", 1)  # then the alias alone
    assert send("b") == ("b", 2)
    assert send("a") == ("", 1)  # "b" is now the least recently used
    assert send("c") == ("c", 2)  # reassigns b's alias
    assert send("b") == ("b", 1)  # and b takes the LRU one (a's)
    assert send("c") == ("", 2)


def test_no_aliases_for_clients_that_allow_none() -> None:
    packet = decoded(Outbound(client()).publish(delivery(topic="a"), 1, False, 0.0))
    assert packet.topic == "a" and 0x23 not in packet.properties


def test_an_alias_never_sent_is_not_used_later() -> None:
    outbound = Outbound(client(topic_alias_maximum=2, maximum_packet_size=40))
    big = Delivery(Message(topic="big", payload=b"x" * 60), 0, False)
    assert outbound.publish(big, None, False, 0.0) is DropReason.PACKET_TOO_LARGE
    small = Delivery(Message(topic="big", payload=b"x"), 0, False)
    packet = decoded(outbound.publish(small, None, False, 0.0))
    assert packet.topic == "big"  # the client never learnt an alias for "big"
