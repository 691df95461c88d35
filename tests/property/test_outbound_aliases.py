"""Outgoing topic aliases (channel.outbound) against a model of the receiving client.

Whatever the sequence of topics, sizes and alias maximum: a client that keeps the alias
map the spec describes (section 3.3.2.3.4: a PUBLISH with topic and alias sets the alias,
one with the alias alone uses it) reads back every topic the broker meant, never sees an
alias outside 1..Topic Alias Maximum [MQTT-3.3.2-10], never an alias it was not taught, and
never a packet larger than its Maximum Packet Size [MQTT-3.1.2-24].
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from channel.outbound import Outbound
from core.client import ClientInfo
from core.message import Message
from core.reasons import DropReason
from core.session_state import Delivery
from mqtt import PacketDecoder
from mqtt.packets import Publish

TOPICS = st.sampled_from(["a", "b", "c/d", "e/f/g", "long/" + "x" * 40, "h", "i"])


@given(
    sends=st.lists(st.tuples(TOPICS, st.integers(0, 80)), max_size=60),
    alias_maximum=st.integers(1, 4),
    maximum_packet_size=st.sampled_from([0, 60, 90]),
)
def test_the_client_always_recovers_the_topic(
    sends: list[tuple[str, int]], alias_maximum: int, maximum_packet_size: int
) -> None:
    client = ClientInfo(
        client_id="sub",
        username=None,
        peer="p",
        protocol_version=5,
        clean_start=True,
        keepalive=0,
        topic_alias_maximum=alias_maximum,
        maximum_packet_size=maximum_packet_size,
    )
    outbound = Outbound(client)
    decoder = PacketDecoder(max_packet_size=1 << 20, protocol_version=5)
    known: dict[int, str] = {}  # the client's alias map
    for topic, size in sends:
        delivery = Delivery(Message(topic=topic, payload=b"p" * size), 0, False)
        data = outbound.publish(delivery, None, False, 0.0)
        if data is DropReason.PACKET_TOO_LARGE:
            assert maximum_packet_size
            continue
        assert isinstance(data, bytes)
        if maximum_packet_size:
            assert len(data) <= maximum_packet_size
        (packet,) = decoder.feed(data)
        assert isinstance(packet, Publish)
        alias = packet.properties[0x23]
        assert 1 <= alias <= alias_maximum
        if packet.topic:
            known[alias] = packet.topic
        assert known.get(alias) == topic
