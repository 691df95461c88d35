"""Incoming QoS 2 beyond `limits.max_awaiting_rel`, in-process: the channel holds a QoS 2
PUBLISH with a new packet id (and what follows it) until a PUBREL frees room, and goes on
reading PUBRELs meanwhile, instead of closing the connection (docs/overload.md).

The property test drives the channel with a model client that keeps more QoS 2 messages in
flight than the bound, and hands the channel's session inputs to a `SessionState` as the
session actor does: every message completes, is routed once and in order, and the session
never holds more ids than the bound.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channel.actions import (
    End,
    InboundQos2,
    InputHandled,
    Publish,
    Released,
    Send,
    SubscribeRequest,
)
from channel.channel import Channel, ChannelSettings, Phase
from channel.negotiation import Offer
from core.reasons import DisconnectReason
from core.session_state import SessionState
from hooks.hook_bus import HookBus
from mqtt import PacketDecoder
from mqtt.packets import Connect, Disconnect, Packet, PingReq, PubRel, Subscribe, Subscription
from mqtt.packets import Publish as PublishPacket
from tests.unit.test_channel import acl, of_type


def attached(
    version: int = 4,
    awaiting_rel: frozenset[int] = frozenset(),
    hooks: HookBus | None = None,
    **settings: Any,
) -> Channel:
    """A connected channel whose session holds `awaiting_rel` (a resumed session's ids)."""
    channel = Channel("127.0.0.1:5000", hooks or HookBus(), ChannelSettings(**settings))
    channel.handle_in([Connect(client_id="c1", protocol_version=version)], 20)
    channel.session_attached(bool(awaiting_rel), awaiting_rel)
    assert channel.phase is Phase.CONNECTED
    return channel


def qos2(packet_id: int, payload: bytes = b"x", *, dup: bool = False) -> PublishPacket:
    return PublishPacket("t", payload, qos=2, packet_id=packet_id, dup=dup)


def ids_to_session(actions: list[Any]) -> list[int]:
    """The packet ids of every QoS 2 PUBLISH the answer hands to the session, in order."""
    return [p[0] for inbound in of_type(actions, InboundQos2) for p in inbound.publishes]


def test_a_qos2_publish_beyond_the_bound_waits_with_what_follows_until_a_pubrel() -> None:
    channel = attached(max_awaiting_rel=2)
    subscribe = Subscribe(9, [Subscription("s", 1)])
    actions = channel.handle_in(
        [qos2(1), qos2(2), qos2(3), subscribe, PublishPacket("t", b"q0"), PingReq()], 60
    )
    assert ids_to_session(actions) == [1, 2]
    assert not of_type(actions, SubscribeRequest) and not of_type(actions, Publish)
    assert Send(b"\xd0\x00") in actions  # PINGREQ is answered at once
    assert InputHandled(6, 60) in actions  # the reads go on: PUBRELs come behind them
    assert channel.phase is Phase.CONNECTED
    # The PUBREL frees room: the session forgets id 1 first, then gets id 3, then the
    # SUBSCRIBE and the QoS 0 PUBLISH, in the order the client sent them.
    actions = channel.handle_in([PubRel(1)], 4)
    released, inbound, request, published = (a for a in actions if type(a) is not InputHandled)
    assert type(released) is Released and released.packet_ids == [1]
    assert type(inbound) is InboundQos2 and [p[0] for p in inbound.publishes] == [3]
    assert type(request) is SubscribeRequest and request.packet_id == 9
    assert type(published) is Publish and published.messages[0].payload == b"q0"
    # Nothing waits any more: a QoS 0 PUBLISH goes straight through.
    assert of_type(channel.handle_in([PublishPacket("t", b"now")], 9), Publish)


def test_a_resent_id_at_the_bound_takes_no_room_and_is_answered_at_once() -> None:
    # The session acknowledges it again without routing it [MQTT-4.3.3-2].
    channel = attached(max_awaiting_rel=2)
    channel.handle_in([qos2(1), qos2(2)], 20)
    assert ids_to_session(channel.handle_in([qos2(2, dup=True)], 10)) == [2]


@pytest.mark.parametrize("version", [4, 5])
def test_a_resumed_sessions_ids_count_until_their_pubrel(version: int) -> None:
    # A resumed session still awaits PUBREL for 1 and 2. A 5.0 client's send quota starts
    # afresh on the new connection (section 4.9), so its new PUBLISH is within its Receive
    # Maximum: it waits for room rather than being refused or closed.
    channel = attached(
        version, frozenset({1, 2}), max_awaiting_rel=2, offer=Offer(receive_maximum=2)
    )
    actions = channel.handle_in([qos2(1, dup=True), qos2(3)], 20)
    assert ids_to_session(actions) == [1]  # the resend is answered, the new one waits
    assert channel.phase is Phase.CONNECTED
    assert ids_to_session(channel.handle_in([PubRel(2)], 4)) == [3]


def test_the_pubrels_of_a_batch_reach_the_session_before_the_publishes_that_take_their_room() -> (
    None
):
    # A reconnecting client resends its PUBRELs and then new PUBLISHes in one read: the
    # session must forget the released ids before it counts the new ones.
    channel = attached(4, frozenset({1, 2}), max_awaiting_rel=2)
    actions = channel.handle_in([PubRel(1), PubRel(2), qos2(3), qos2(4)], 28)
    (released,) = of_type(actions, Released)
    (inbound,) = of_type(actions, InboundQos2)
    assert released.packet_ids == [1, 2] and [p[0] for p in inbound.publishes] == [3, 4]
    assert actions.index(released) < actions.index(inbound)


@pytest.mark.parametrize("version", [4, 5])
def test_more_waiting_than_the_unhandled_input_bound_closes(version: int) -> None:
    channel = attached(
        version, frozenset({1}), max_awaiting_rel=1, max_waiting_packets=2, offer=Offer()
    )
    actions = channel.handle_in([qos2(2), qos2(3), qos2(4)], 30)
    assert channel.phase is Phase.CLOSED
    (end,) = of_type(actions, End)
    assert end.reason is DisconnectReason.QOS2_BACKLOG
    sent = of_type(actions, Send)
    if version == 4:
        assert not sent  # 3.1.1 has no way to say why
    else:
        (disconnect,) = PacketDecoder(1 << 20, protocol_version=5).feed(sent[0].data)
        assert disconnect.reason_code == 0x93  # Receive Maximum exceeded
        assert "limits.max_awaiting_rel" in disconnect.properties[0x1F]
    assert not ids_to_session(actions)


def test_disconnect_while_publishes_wait_closes_without_them() -> None:
    channel = attached(4, frozenset({1}), max_awaiting_rel=1)
    actions = channel.handle_in([qos2(2), Disconnect()], 12)
    (end,) = of_type(actions, End)
    assert end.reason is DisconnectReason.CLIENT_DISCONNECT
    assert not ids_to_session(actions)  # never acknowledged: the client still holds it


def test_a_refused_qos2_publish_takes_no_room_in_5_0() -> None:
    # PUBREC 0x87 ends the exchange (the id is new again [MQTT-4.3.3-9]) and gives the
    # client its send quota back (section 4.9): it counts neither for the bound nor for the
    # Receive Maximum.
    channel = attached(5, hooks=acl({"secret"}), max_awaiting_rel=1, offer=Offer(receive_maximum=1))
    refused = channel.handle_in([PublishPacket("secret", b"x", qos=2, packet_id=1)], 12)
    ((_, message, _pubrec),) = of_type(refused, InboundQos2)[0].publishes
    assert message is None
    actions = channel.handle_in([qos2(2)], 10)
    assert channel.phase is Phase.CONNECTED
    ((_, message, _pubrec),) = of_type(actions, InboundQos2)[0].publishes
    assert message is not None and message.topic == "t"


# ----- a model client beyond the bound, with a session ---------------------------------


class _ModelClient:
    """A 3.1.1 client keeping up to `window` QoS 2 messages in flight: it writes a PUBLISH
    as soon as its window allows and a PUBREL as soon as it reads a PUBREC."""

    def __init__(self, count: int, window: int) -> None:
        self.count = count
        self.window = window
        self.next_id = 1
        self.outstanding: set[int] = set()
        self.wire: list[Packet] = []

    def write(self) -> None:
        while len(self.outstanding) < self.window and self.next_id <= self.count:
            self.outstanding.add(self.next_id)
            self.wire.append(qos2(self.next_id, b"%d" % self.next_id))
            self.next_id += 1

    @property
    def done(self) -> bool:
        return not self.outstanding and self.next_id > self.count


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    bound=st.integers(1, 6),
    beyond=st.integers(0, 12),
    count=st.integers(1, 40),
)
def test_a_client_beyond_the_bound_completes_every_message_once_and_in_order(
    data: st.DataObject, bound: int, beyond: int, count: int
) -> None:
    channel = attached(max_awaiting_rel=bound, max_waiting_packets=beyond + 1)
    session = SessionState(client_id="c1", persistent=False, max_awaiting_rel=bound)
    client = _ModelClient(count, bound + beyond)
    routed: list[bytes] = []
    for _step in range(20 * count + 20):
        client.write()
        if client.done or not client.wire:
            break
        # TCP delivers any prefix of what the client wrote as one read.
        size = data.draw(st.integers(1, len(client.wire)))
        batch, client.wire = client.wire[:size], client.wire[size:]
        for action in channel.handle_in(batch, 10 * size):
            if type(action) is InboundQos2:
                for packet_id, message, _pubrec in action.publishes:
                    # Raises TooManyAwaitingRelError if the channel let too many through.
                    if session.receive_qos2(packet_id):
                        assert message is not None
                        routed.append(message.payload)
                    client.wire.append(PubRel(packet_id))  # the client read the PUBREC
            elif type(action) is Released:
                for packet_id in action.packet_ids:
                    assert session.release(packet_id)
                    client.outstanding.discard(packet_id)  # the client read the PUBCOMP
        assert channel.phase is Phase.CONNECTED
    assert client.done, (client.outstanding, client.wire)
    assert routed == [b"%d" % n for n in range(1, count + 1)]
