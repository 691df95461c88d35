"""The channel in-process: packets in, actions out, table-driven from the MQTT specifications.

No sockets and no actors: each test feeds `Channel` packets (or the session attached, the
connection lost, a server close) and checks the exact actions it answers with.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from channel.actions import (
    Acknowledged,
    Drop,
    End,
    InboundQos2,
    InputHandled,
    OpenSession,
    Publish,
    Released,
    Send,
    SetReadTimeout,
    SubscribeRequest,
    UnsubscribeRequest,
)
from channel.channel import Channel, ChannelSettings, Phase
from channel.negotiation import Offer
from core.reasons import DisconnectReason, DropReason
from core.session_state import Ack
from hooks.decisions import Decision
from hooks.events import AuthorizeRequest, ClientDisconnected
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt import PacketDecoder
from mqtt.encoder import encode, encode_ack
from mqtt.errors import MalformedPacketError, UnsupportedProtocolVersionError
from mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PacketType,
    PingReq,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Subscribe,
    Subscription,
    Unsubscribe,
    Will,
)
from mqtt.packets import (
    Publish as PublishPacket,
)
from mqtt.reason_codes import ReasonCode


def new_channel(hooks: HookBus | None = None, **settings: Any) -> Channel:
    return Channel("127.0.0.1:5000", hooks or HookBus(), ChannelSettings(**settings))


def connected(
    version: int = 4,
    hooks: HookBus | None = None,
    settings: ChannelSettings | None = None,
    **connect: Any,
) -> Channel:
    channel = Channel("127.0.0.1:5000", hooks or HookBus(), settings or ChannelSettings())
    channel.handle_in([Connect(client_id="c1", protocol_version=version, **connect)], 20)
    channel.session_attached(session_present=False)
    assert channel.phase is Phase.CONNECTED
    return channel


def acl(denied_topics: set[str]) -> HookBus:
    """A hook bus whose ACL denies publishing and subscribing to `denied_topics`."""
    hooks = HookBus()

    def authorize(request: AuthorizeRequest) -> Decision:
        return Decision.DENY if request.topic in denied_topics else Decision.ALLOW

    hooks.register(HookPoint.CLIENT_AUTHORIZE, authorize)
    return hooks


def of_type(actions: list[Any], kind: type) -> list[Any]:
    return [a for a in actions if type(a) is kind]


def told(packet: Any, why: str) -> bytes:
    """`packet` as a 5.0 client gets it with the Reason String `why` (`channel.problems`)."""
    return encode(replace(packet, properties={**packet.properties, 0x1F: why}), 5)


def said(action: Any) -> tuple[int, str | None]:
    """(reason code, Reason String or None) of the one 5.0 packet a Send action writes."""
    assert type(action) is Send, action
    (packet,) = PacketDecoder(max_packet_size=1 << 20, protocol_version=5).feed(action.data)
    return packet.reason_code, packet.properties.get(0x1F)


# ----- CONNECT -------------------------------------------------------------------------


def test_first_packet_must_be_connect() -> None:
    # [MQTT-3.1.0-1]: anything else first closes the network connection, with no CONNACK.
    channel = new_channel()
    actions = channel.handle_in([PingReq()], 2)
    assert actions == [
        End(DisconnectReason.PROTOCOL_ERROR, was_connected=False),
        InputHandled(1, 2),
    ]
    assert channel.phase is Phase.CLOSED


@pytest.mark.parametrize(
    ("keepalive", "timeout"),
    [(60, 90.0), (1, 1.5), (0, None)],  # 1.5 x keep-alive [MQTT-3.1.2-24]; 0: none [-23]
)
def test_accepted_connect_sets_read_timeout_and_opens_the_session(
    keepalive: int, timeout: float | None
) -> None:
    channel = new_channel()
    actions = channel.handle_in([Connect(client_id="c1", keepalive=keepalive)], 20)
    assert actions[0] == SetReadTimeout(timeout)
    assert type(actions[1]) is OpenSession
    assert actions[1].client.client_id == "c1"
    assert actions[1].client.keepalive == keepalive
    assert len(actions) == 2  # the CONNECT's input counts as unhandled until attached
    assert channel.phase is Phase.CONNECTING


@pytest.mark.parametrize(
    ("version", "clean_start", "refused_with"),
    [
        (4, False, 0x02),  # 3.1.1: empty id needs clean session 1 [MQTT-3.1.3-8]
        (3, True, 0x02),  # 3.1: 1..23 characters
    ],
)
def test_empty_client_id_refused(version: int, clean_start: bool, refused_with: int) -> None:
    channel = new_channel()
    actions = channel.handle_in(
        [Connect(client_id="", protocol_version=version, clean_start=clean_start)], 12
    )
    assert actions[0] == Send(bytes((0x20, 2, 0, refused_with)))
    assert actions[1] == End(DisconnectReason.NOT_AUTHORIZED, was_connected=False)


def test_empty_client_id_assigned_in_v5() -> None:
    # [MQTT-3.1.3-6]; 5.0 tells the client its id in Assigned Client Identifier.
    channel = new_channel()
    actions = channel.handle_in([Connect(client_id="", protocol_version=5)], 12)
    (opened,) = of_type(actions, OpenSession)
    assert opened.client.client_id.startswith("auto-")
    assert opened.connack_properties[0x12] == opened.client.client_id


def test_client_id_too_long_refused() -> None:
    channel = new_channel(max_client_id_length=4)
    actions = channel.handle_in([Connect(client_id="abcde", protocol_version=5)], 12)
    assert actions[0] == Send(
        told(ConnAck(reason_code=ReasonCode.CLIENT_IDENTIFIER_NOT_VALID), "client id too long")
    )
    assert channel.phase is Phase.CLOSED


def _is_control(character: str) -> bool:
    """The reference: U+0001-U+001F and U+007F-U+009F (3.1.1 1.5.3, 5.0 1.5.4)."""
    return 0x01 <= ord(character) <= 0x1F or 0x7F <= ord(character) <= 0x9F


@hypothesis.settings(max_examples=200, deadline=None)
@given(st.text(st.characters(min_codepoint=1, max_codepoint=0x2FF), min_size=1, max_size=12))
def test_a_client_id_is_refused_exactly_when_it_holds_a_control_character(
    client_id: str,
) -> None:
    channel = new_channel()
    actions = channel.handle_in([Connect(client_id=client_id, protocol_version=5)], 12)
    if any(map(_is_control, client_id)):
        code, why = said(actions[0])
        assert code == ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
        assert why is not None and "control characters (section 1.5.4)" in why
        assert channel.phase is Phase.CLOSED
    else:
        assert of_type(actions, OpenSession)


@pytest.mark.parametrize(
    ("version", "connack"),
    [
        (4, bytes((0x20, 2, 0, 0x02))),  # 3.1.1: 2 identifier rejected
        (
            5,
            told(
                ConnAck(reason_code=0x85),
                "client id 'c\\x01' holds control characters (section 1.5.4)",
            ),
        ),
    ],
)
def test_client_id_with_a_control_character_refused(version: int, connack: bytes) -> None:
    channel = new_channel()
    actions = channel.handle_in([Connect(client_id="c\x01", protocol_version=version)], 12)
    assert actions == [
        Send(connack),
        End(DisconnectReason.NOT_AUTHORIZED, was_connected=False),
        InputHandled(1, 12),
    ]


@pytest.mark.parametrize("control", ["\x01", "\x1f", "\x7f", "\x9f"])
def test_will_topic_with_a_control_character_refused(control: str) -> None:
    """5.0: CONNACK 0x90, the will topic is not accepted (3.2.2.2); 3.1.1 has no return
    code for it: closed without CONNACK."""
    will = Will(f"w/{control}", b"x")
    v5 = new_channel()
    actions = v5.handle_in([Connect(client_id="c1", protocol_version=5, will=will)], 12)
    assert said(actions[0]) == (
        ReasonCode.TOPIC_NAME_INVALID,
        f"will topic {will.topic!r} holds control characters (section 1.5.4)",
    )
    assert v5.phase is Phase.CLOSED and not of_type(actions, Publish)
    v4 = new_channel()
    actions = v4.handle_in([Connect(client_id="c1", protocol_version=4, will=will)], 12)
    assert actions == [
        End(DisconnectReason.PROTOCOL_ERROR, was_connected=False),
        InputHandled(1, 12),
    ]


def test_control_characters_accepted_when_allowed() -> None:
    """`limits.allow_control_characters`: the client id and will topic go through."""
    channel = new_channel(allow_control_characters=True)
    will = Will("w/\x07", b"x")
    actions = channel.handle_in([Connect(client_id="c\x01", protocol_version=5, will=will)], 12)
    (opened,) = of_type(actions, OpenSession)
    assert opened.client.client_id == "c\x01"


@pytest.mark.parametrize(
    ("version", "connack"),
    [
        (4, bytes((0x20, 2, 0, 0x05))),  # 3.x: a return code, no properties
        (5, told(ConnAck(reason_code=0x87), "authentication failed: not_authorized")),
    ],
)
def test_authentication_refusal(version: int, connack: bytes) -> None:
    hooks = HookBus(allow_anonymous=False)
    channel = new_channel(hooks)
    actions = channel.handle_in([Connect(client_id="c1", protocol_version=version)], 12)
    assert actions[0] == Send(connack)
    assert actions[1] == End(DisconnectReason.NOT_AUTHORIZED, was_connected=False)


def test_unsupported_protocol_version_gets_connack() -> None:
    # [MQTT-3.1.2-2]: CONNACK 0x01, then close; the level is unknown, so 3.1.1's format.
    channel = new_channel()
    error = UnsupportedProtocolVersionError("protocol level 9", "MQTT", 9)
    actions = channel.connection_lost(DisconnectReason.PROTOCOL_ERROR, error, "level 9")
    assert actions == [
        Send(bytes((0x20, 2, 0, 0x01))),
        End(DisconnectReason.NOT_AUTHORIZED, was_connected=False),
    ]


def test_v5_will_denied_by_acl_refuses_connect() -> None:
    # 5.0 can say why [MQTT-3.2.2-8]: CONNACK 0x87.
    channel = new_channel(acl({"forbidden"}))
    will = Will(topic="forbidden", payload=b"x")
    actions = channel.handle_in([Connect(client_id="c1", protocol_version=5, will=will)], 20)
    assert actions[0] == Send(
        told(ConnAck(reason_code=ReasonCode.NOT_AUTHORIZED), "will on 'forbidden' not authorised")
    )
    assert channel.phase is Phase.CLOSED


def test_identity_as_username() -> None:
    with_cert = Channel(
        "p",
        HookBus(allow_anonymous=False),
        ChannelSettings(identity_as_username=True),
    )
    with_cert.identify("device-7")
    (opened,) = of_type(with_cert.handle_in([Connect(client_id="c", username="x")], 9), OpenSession)
    assert opened.client.username == "device-7"  # the certificate's CN, not the CONNECT's
    without = Channel("p", HookBus(), ChannelSettings(identity_as_username=True))
    actions = without.handle_in([Connect(client_id="c", protocol_version=5)], 9)
    code, why = said(actions[0])
    assert code == ReasonCode.NOT_AUTHORIZED
    assert why is not None and why.startswith("no client certificate")


def test_second_connect_is_a_protocol_violation() -> None:
    # [MQTT-3.1.0-2]; a 5.0 client hears why (DISCONNECT 0x82) [MQTT-4.13.1-1].
    channel = connected(version=5)
    actions = channel.handle_in([Connect(client_id="c1", protocol_version=5)], 12)
    assert actions[:2] == [
        Send(
            told(
                Disconnect(reason_code=ReasonCode.PROTOCOL_ERROR),
                "Connect is not a client-to-server packet",
            )
        ),
        End(DisconnectReason.PROTOCOL_ERROR, was_connected=True),
    ]


# ----- held packets and the input bound ------------------------------------------------


def test_packets_while_connecting_are_held_then_handled_in_order() -> None:
    channel = new_channel()
    first = channel.handle_in([Connect(client_id="c1"), PublishPacket(topic="a", payload=b"1")], 30)
    assert not of_type(first, Publish) and not of_type(first, InputHandled)
    second = channel.handle_in([PublishPacket(topic="a", payload=b"2"), PingReq()], 12)
    assert second == []  # still connecting: held, and their input still unhandled
    attached = channel.session_attached(session_present=False)
    (published,) = of_type(attached, Publish)
    assert [m.payload for m in published.messages] == [b"1", b"2"]
    assert Send(b"\xd0\x00") in attached  # PINGRESP
    assert attached[-1] == InputHandled(4, 42)  # every held packet and byte, CONNECT's too


def test_connected_batch_reports_its_input_handled() -> None:
    channel = connected()
    actions = channel.handle_in([PingReq(), PingReq()], 4)
    assert actions == [Send(b"\xd0\x00"), Send(b"\xd0\x00"), InputHandled(2, 4)]


def test_an_idle_channel_keeps_no_answer_of_its_own() -> None:
    """An answer belongs to its caller: the channel holds no list (nor its actions) until
    the next input, so an idle connection costs none of it."""
    channel = connected()
    answer = channel.handle_in([PingReq()], 2)
    assert channel._actions is not answer and channel._actions == []
    again = channel.handle_in([PingReq()], 2)
    assert again is not answer and answer == [Send(b"\xd0\x00"), InputHandled(1, 2)]


# ----- PUBLISH and its acknowledgement, one path for every QoS --------------------------


def test_qos0_routed_without_ack() -> None:
    channel = connected()
    (published, handled) = channel.handle_in([PublishPacket(topic="t", payload=b"x")], 5)
    assert type(published) is Publish and published.acks is None
    assert published.messages[0].publisher == "c1"
    assert handled == InputHandled(1, 5)


def test_qos1_batch_routed_once_with_all_its_pubacks() -> None:
    # [MQTT-4.3.2-2]: PUBACK for each; written once the messages are durable.
    channel = connected()
    packets = [PublishPacket(topic="t", payload=b"x", qos=1, packet_id=i) for i in (1, 2)]
    actions = channel.handle_in(packets, 20)
    (published,) = of_type(actions, Publish)
    assert len(published.messages) == 2
    assert published.acks is not None and not published.acks.waits_for_routing
    assert published.acks.routed() == encode_ack(PacketType.PUBACK, 1, 0, 4) + encode_ack(
        PacketType.PUBACK, 2, 0, 4
    )


def test_qos2_goes_to_the_session_with_its_pubrec() -> None:
    channel = connected()
    actions = channel.handle_in(
        [PublishPacket(topic="t", payload=b"x", qos=2, packet_id=7), PubRel(packet_id=7)], 20
    )
    (inbound,) = of_type(actions, InboundQos2)
    ((packet_id, message, pubrec),) = inbound.publishes
    assert (packet_id, message.topic, pubrec) == (7, "t", bytes((0x50, 2, 0, 7)))
    (released,) = of_type(actions, Released)
    assert released.packet_ids == [7]  # the session answers with PUBCOMP (0x92 if unknown)
    # The PUBLISH reaches the session before its PUBREL.
    assert actions.index(inbound) < actions.index(released)


@pytest.mark.parametrize(
    ("version", "qos", "ack"),
    [
        (4, 1, bytes((0x40, 2, 0, 3))),  # 3.1.1 acknowledges a denied publish anyway
        # 5.0 says why: the code, and a Reason String (Request Problem Information 1)
        (5, 1, told(PubAck(3, 0x87), "not authorised to publish to 'secret'")),
        (4, 2, bytes((0x50, 2, 0, 3))),
        (5, 2, told(PubRec(3, 0x87), "not authorised to publish to 'secret'")),
    ],
)
def test_denied_publish_acknowledged_not_routed(version: int, qos: int, ack: bytes) -> None:
    channel = connected(version=version, hooks=acl({"secret"}))
    actions = channel.handle_in(
        [PublishPacket(topic="secret", payload=b"x", qos=qos, packet_id=3)], 10
    )
    assert not of_type(actions, Publish)
    (drop,) = of_type(actions, Drop)
    assert drop.reason is DropReason.NOT_AUTHORIZED
    if qos == 1:
        assert Send(ack) in actions
    else:
        ((_, message, pubrec),) = of_type(actions, InboundQos2)[0].publishes
        assert message is None and pubrec == ack


@pytest.mark.parametrize(
    "topic",
    [
        "$SYS",
        "$SYS/broker/uptime",
        "$SYS/broker/connection/edge/status",
        "$SYS/broker/connection/a/b/state",
        "$SYS/broker/connection/edge/state/x",
        "$SYS/broker/connections/edge/state",
    ],
)
def test_sys_publish_refused_without_any_acl(topic: str) -> None:
    channel = connected(version=5)
    actions = channel.handle_in([PublishPacket(topic=topic, payload=b"x", qos=1, packet_id=1)], 9)
    assert not of_type(actions, Publish)
    assert Send(told(PubAck(1, 0x87), f"not authorised to publish to {topic!r}")) in actions


@pytest.mark.parametrize("version", [4, 5])
def test_another_brokers_bridge_may_publish_its_state_and_leave_it_as_its_will(
    version: int,
) -> None:
    # Mosquitto's one exception to "$SYS is the broker's": a bridge's state topic, which a
    # Mosquitto bridge connecting here uses for its will and its "1" by default.
    state = "$SYS/broker/connection/edge-7.cloud/state"
    will = Will(topic=state, payload=b"0", qos=1, retain=True)
    channel = connected(version=version, will=will)  # refused at CONNECT: not connected
    actions = channel.handle_in(
        [PublishPacket(topic=state, payload=b"1", qos=1, packet_id=1, retain=True)], 9
    )
    (publish,) = of_type(actions, Publish)
    assert [(m.topic, m.payload, m.retain) for m in publish.messages] == [(state, b"1", True)]


def test_topic_alias_is_a_protocol_error_when_none_is_allowed() -> None:
    # Topic Alias Maximum is 0 [MQTT-3.2.2-17], so a Topic Alias is invalid [MQTT-3.3.2-8].
    channel = connected(version=5, settings=ChannelSettings(offer=Offer(topic_alias_maximum=0)))
    packet = PublishPacket(topic="t", payload=b"", properties={0x23: 1})
    actions = channel.handle_in([packet], 9)
    code, why = said(actions[0])
    assert code == ReasonCode.TOPIC_ALIAS_INVALID
    assert why is not None and why.startswith("Topic Alias 1 outside 1..0")


def test_too_many_topic_levels_close_the_connection() -> None:
    channel = new_channel(max_topic_levels=2)
    channel.handle_in([Connect(client_id="c")], 9)
    channel.session_attached(False)
    actions = channel.handle_in([PublishPacket(topic="a/b/c", payload=b"")], 9)
    assert End(DisconnectReason.PROTOCOL_ERROR, was_connected=True) in actions


# ----- acknowledgements from the client ------------------------------------------------


def test_acks_only_read_goes_straight_to_the_session_when_connected() -> None:
    channel = new_channel()
    packets: list[Any] = [PubAck(packet_id=1), PubRec(packet_id=2), PubComp(packet_id=3)]
    assert channel.acks_only(packets, 12) is None  # not connected yet
    channel.handle_in([Connect(client_id="c")], 9)
    channel.session_attached(False)
    assert channel.acks_only(packets, 12) == Acknowledged(
        [(Ack.PUBACK, 1), (Ack.PUBREC, 2), (Ack.PUBCOMP, 3)], size=12
    )
    assert channel.acks_only([*packets, PingReq()], 14) is None  # not acks only


def test_acks_in_a_mixed_batch_become_one_session_input() -> None:
    channel = connected()
    actions = channel.handle_in([PubAck(packet_id=1), PingReq(), PubAck(packet_id=2)], 10)
    assert of_type(actions, Acknowledged) == [Acknowledged([(Ack.PUBACK, 1), (Ack.PUBACK, 2)])]


# ----- SUBSCRIBE and UNSUBSCRIBE ------------------------------------------------------


def test_subscribe_refusals_chosen_by_the_channel() -> None:
    hooks = acl({"secret/#"})
    channel = Channel("p", hooks, ChannelSettings(max_topic_levels=3))
    channel.handle_in([Connect(client_id="c", protocol_version=5)], 9)
    channel.session_attached(False)
    subscribe = Subscribe(
        packet_id=5,
        subscriptions=[
            Subscription("ok/#", 1),
            Subscription("secret/#", 1),
            Subscription("a/b/c/d", 0),
        ],
        properties={0x0B: [42]},
    )
    (request,) = of_type(channel.handle_in([subscribe], 30), SubscribeRequest)
    assert request.refused == {1: ReasonCode.NOT_AUTHORIZED, 2: ReasonCode.TOPIC_FILTER_INVALID}
    assert request.subscription_id == 42
    assert request.packet_id == 5


def test_publishes_before_a_subscribe_are_routed_before_it() -> None:
    channel = connected()
    actions = channel.handle_in(
        [
            PublishPacket(topic="t", payload=b"1"),
            Subscribe(packet_id=1, subscriptions=[Subscription("t", 0)]),
            Unsubscribe(packet_id=2, topic_filters=["t"]),
        ],
        30,
    )
    kinds = [type(a) for a in actions]
    assert kinds == [Publish, SubscribeRequest, UnsubscribeRequest, InputHandled]


@pytest.mark.parametrize("version", [4, 5])
def test_a_session_refused_after_connect_gets_connack_banned_and_no_will(version: int) -> None:
    # A pool's home worker refused the claim (the client id is banned): the CONNECT is
    # refused as at admission, 0x8A (3.1.1: 0x05), and its will is never stored
    # [MQTT-3.1.2-8].
    channel = new_channel()
    will = Will(topic="last", payload=b"bye")
    channel.handle_in([Connect(client_id="c1", protocol_version=version, will=will)], 20)
    assert channel.phase is Phase.CONNECTING
    send, end = channel.session_refused(ReasonCode.BANNED, "banned (clientid c1: flapping)")
    if version == 5:
        assert said(send) == (ReasonCode.BANNED, "banned (clientid c1: flapping)")
    else:
        assert send == Send(bytes([0x20, 2, 0, 5]))
    assert (end.reason, end.was_connected, end.will) == (
        DisconnectReason.NOT_AUTHORIZED,
        False,
        None,
    )
    assert channel.phase is Phase.CLOSED
    assert channel.session_refused(ReasonCode.BANNED, "again") == []  # ended once


# ----- the end of a connection: once, with the will when it is due -------------------------


def will_channel(hooks: HookBus | None = None, version: int = 4) -> Channel:
    return connected(version=version, hooks=hooks, will=Will(topic="last", payload=b"bye"))


def test_disconnect_discards_the_will() -> None:
    # [MQTT-3.14.4-3]
    channel = will_channel()
    actions = channel.handle_in([Disconnect()], 2)
    assert actions == [
        End(DisconnectReason.CLIENT_DISCONNECT, was_connected=True),
        InputHandled(1, 2),
    ]


def test_v5_disconnect_with_will_message_publishes_it() -> None:
    channel = will_channel(version=5)
    actions = channel.handle_in(
        [Disconnect(reason_code=ReasonCode.DISCONNECT_WITH_WILL_MESSAGE)], 3
    )
    (will,) = of_type(actions, Publish)
    assert will.messages[0].topic == "last"


@pytest.mark.parametrize(
    "reason",
    [
        DisconnectReason.SOCKET_CLOSED,
        DisconnectReason.KEEPALIVE_TIMEOUT,
        DisconnectReason.TAKEN_OVER,
    ],
)
def test_other_closes_publish_the_will(reason: DisconnectReason) -> None:
    # [MQTT-3.1.2-8]
    channel = will_channel()
    actions = (
        channel.close(reason)
        if reason is DisconnectReason.TAKEN_OVER
        else channel.connection_lost(reason)
    )
    (will,) = of_type(actions, Publish)
    assert (will.messages[0].topic, will.messages[0].payload) == ("last", b"bye")
    assert actions[-1] == End(reason, was_connected=True)


def test_will_denied_at_close_is_dropped_not_published() -> None:
    denied: set[str] = set()
    channel = will_channel(acl(denied))
    denied.add("last")  # the ACL changed after CONNECT
    actions = channel.connection_lost(DisconnectReason.SOCKET_CLOSED)
    assert not of_type(actions, Publish)
    assert of_type(actions, Drop)[0].reason is DropReason.NOT_AUTHORIZED


def test_connection_ends_once_and_the_disconnected_hook_runs_once() -> None:
    hooks = HookBus()
    seen: list[ClientDisconnected] = []
    hooks.register(HookPoint.CLIENT_DISCONNECTED, seen.append)
    channel = will_channel(hooks)
    first = channel.close(DisconnectReason.SERVER_SHUTDOWN)
    assert first[-1] == End(DisconnectReason.SERVER_SHUTDOWN, was_connected=True)
    assert channel.connection_lost(DisconnectReason.SOCKET_CLOSED) == []
    assert channel.close(DisconnectReason.SERVER_ERROR) == []
    assert [e.reason for e in seen] == [DisconnectReason.SERVER_SHUTDOWN]


def test_malformed_input_v5_gets_disconnect_with_its_reason() -> None:
    channel = connected(version=5)
    actions = channel.connection_lost(
        DisconnectReason.PROTOCOL_ERROR, MalformedPacketError("bad remaining length")
    )
    assert actions[0] == Send(
        told(Disconnect(reason_code=ReasonCode.MALFORMED_PACKET), "bad remaining length")
    )
    assert actions[-1] == End(DisconnectReason.PROTOCOL_ERROR, was_connected=True)


def test_pending_batch_flushed_before_the_end() -> None:
    channel = connected()
    actions = channel.handle_in(
        [PublishPacket(topic="t", payload=b"x", qos=1, packet_id=1), Disconnect()], 12
    )
    assert [type(a) for a in actions] == [Publish, End, InputHandled]


def test_unsuback_codes_are_the_sessions_and_not_chosen_here() -> None:
    # UNSUBACK needs the session's subscriptions; the channel only forwards the request.
    channel = connected(version=5)
    actions = channel.handle_in([Unsubscribe(packet_id=9, topic_filters=["a", "b"])], 12)
    assert of_type(actions, UnsubscribeRequest) == [UnsubscribeRequest(9, ["a", "b"])]
    assert not of_type(actions, Send)


# ----- MQTT 5.0: CONNECT terms, limits the broker announced, reason codes ---------------


def v5_channel(offer: Offer | None = None, hooks: HookBus | None = None, **connect: Any) -> Channel:
    settings = ChannelSettings(offer=offer or Offer())
    return connected(version=5, hooks=hooks, settings=settings, **connect)


def opened_client(offer: Offer, version: int = 5, **connect: Any) -> OpenSession:
    channel = Channel("127.0.0.1:5000", HookBus(), ChannelSettings(offer=offer))
    actions = channel.handle_in([Connect(client_id="c1", protocol_version=version, **connect)], 9)
    (opened,) = of_type(actions, OpenSession)
    return opened


@pytest.mark.parametrize(
    ("version", "clean_start", "properties", "offer", "expiry", "connack"),
    [
        # 5.0: absent means 0, the session ends with the connection [MQTT-3.1.2-11]
        (5, False, {}, Offer(), 0.0, None),
        (5, True, {0x11: 60}, Offer(), 60.0, None),
        (5, False, {0x11: 0xFFFFFFFF}, Offer(), math.inf, None),  # never expires
        # the server maximum lowers it, and CONNACK says so (3.2.2.3.2)
        (5, False, {0x11: 0xFFFFFFFF}, Offer(max_session_expiry=30), 30.0, 30),
        (5, False, {0x11: 10}, Offer(max_session_expiry=30), 10.0, None),
        # 3.x: clean session 0 keeps it limits.session_expiry (0 = forever), capped too
        (4, False, {}, Offer(session_expiry_3x=7200), 7200.0, None),
        (4, False, {}, Offer(session_expiry_3x=0), math.inf, None),
        (4, False, {}, Offer(session_expiry_3x=0, max_session_expiry=5), 5.0, None),
        (4, True, {}, Offer(), 0.0, None),
    ],
)
def test_session_expiry_is_negotiated_at_connect(  # noqa: PLR0917 - one row of the table
    version: int,
    clean_start: bool,
    properties: dict[int, Any],
    offer: Offer,
    expiry: float,
    connack: int | None,
) -> None:
    opened = opened_client(offer, version, clean_start=clean_start, properties=properties)
    assert opened.client.session_expiry == expiry
    assert opened.client.keeps_session is (expiry > 0)
    assert opened.connack_properties.get(0x11) == connack


def test_connack_announces_what_the_config_offers() -> None:
    offer = Offer(
        receive_maximum=20,
        maximum_packet_size=5000,
        maximum_qos=1,
        retain_available=False,
        wildcard_subscriptions=False,
        subscription_identifiers=False,
        shared_subscriptions=False,
        topic_alias_maximum=3,
    )
    assert opened_client(offer).connack_properties == {
        0x21: 20,  # Receive Maximum
        0x27: 5000,  # Maximum Packet Size
        0x22: 3,  # Topic Alias Maximum
        0x24: 1,  # Maximum QoS (absent would mean 2)
        0x25: 0,  # Retain Available
        0x28: 0,  # Wildcard Subscription Available
        0x29: 0,  # Subscription Identifier Available
        0x2A: 0,  # Shared Subscription Available
    }
    assert opened_client(offer, version=4).connack_properties == {}  # 3.x: no properties


def test_client_limits_from_connect_reach_the_session() -> None:
    properties = {0x21: 5, 0x27: 300, 0x22: 4, 0x17: 0}
    client = opened_client(Offer(), properties=properties).client
    assert (client.receive_maximum, client.maximum_packet_size) == (5, 300)
    assert client.topic_alias_maximum == 4
    assert client.request_problem_information is False
    assert client.properties == properties  # hooks see every CONNECT property


@pytest.mark.parametrize(
    ("requested", "maximum", "enforced", "announced"),
    [
        (60, 0, 60, None),
        (600, 120, 120, 120),  # Server Keep Alive replaces the client's [MQTT-3.2.2-21]
        (0, 120, 120, 120),  # 0 (no keep-alive) is more than any maximum
        (30, 120, 30, None),
    ],
)
def test_server_keep_alive(requested: int, maximum: int, enforced: int, announced: int) -> None:
    channel = Channel("p", HookBus(), ChannelSettings(offer=Offer(max_keepalive=maximum)))
    actions = channel.handle_in(
        [Connect(client_id="c1", protocol_version=5, keepalive=requested)], 9
    )
    assert actions[0] == SetReadTimeout(enforced * 1.5)
    (opened,) = of_type(actions, OpenSession)
    assert opened.connack_properties.get(0x13) == announced


@pytest.mark.parametrize(
    ("asked", "configured", "sent"), [(1, "r/", "r/"), (0, "r/", None), (1, "", None)]
)
def test_response_information_only_when_asked_and_configured(
    asked: int, configured: str, sent: str | None
) -> None:
    offer = Offer(response_information=configured)
    opened = opened_client(offer, properties={0x19: asked})
    assert opened.connack_properties.get(0x1A) == sent


def test_v5_puback_waits_for_routing_to_say_0x10() -> None:
    channel = v5_channel(hooks=acl({"secret"}))
    actions = channel.handle_in(
        [
            PublishPacket(topic="a", payload=b"x", qos=1, packet_id=1),
            PublishPacket(topic="secret", payload=b"x", qos=1, packet_id=2),
            PublishPacket(topic="b", payload=b"x", qos=1, packet_id=3),
        ],
        30,
    )
    (publish,) = of_type(actions, Publish)
    assert [m.topic for m in publish.messages] == ["a", "b"]
    assert publish.acks is not None and publish.acks.waits_for_routing
    # The refusal is decided at once, with its Reason String; the others wait for routing.
    refusal = told(PubAck(2, 0x87), "not authorised to publish to 'secret'")
    assert publish.acks.routed() == bytes((0x40, 2, 0, 1)) + refusal + bytes((0x40, 2, 0, 3))
    # Routing found nobody for "b": its PUBACK says 0x10; order kept [MQTT-4.6.0-2].
    unmatched = {publish.messages[1].message_id}
    assert publish.acks.routed(unmatched) == (
        bytes((0x40, 2, 0, 1)) + refusal + bytes((0x40, 3, 0, 3, 0x10))
    )


@pytest.mark.parametrize(
    ("offer", "packet", "code"),
    [
        (Offer(maximum_qos=1), PublishPacket("t", b"", qos=2, packet_id=1), 0x9B),
        (Offer(maximum_qos=0), PublishPacket("t", b"", qos=1, packet_id=1), 0x9B),
        (Offer(retain_available=False), PublishPacket("t", b"", retain=True), 0x9A),
        (Offer(topic_alias_maximum=2), PublishPacket("t", b"", properties={0x23: 3}), 0x94),
        # an alias used before it was set is a Protocol Error (section 3.3.4)
        (Offer(), PublishPacket("", b"", properties={0x23: 1}), 0x82),
    ],
)
def test_publish_beyond_what_connack_allowed_closes_with_its_code(
    offer: Offer, packet: PublishPacket, code: int
) -> None:
    channel = v5_channel(offer)
    actions = channel.handle_in([packet], 9)
    told_code, why = said(actions[0])
    assert told_code == code and why  # the code, and the violation in words
    assert channel.phase is Phase.CLOSED
    assert not of_type(actions, Publish)


def test_incoming_topic_aliases_are_resolved_per_connection() -> None:
    channel = v5_channel(Offer(topic_alias_maximum=2))
    actions = channel.handle_in(
        [
            PublishPacket("sensors/1", b"a", properties={0x23: 1}),
            PublishPacket("", b"b", properties={0x23: 1}),
            PublishPacket("sensors/2", b"c", properties={0x23: 1}),  # re-mapped (3.3.2.3.4)
            PublishPacket("", b"d", properties={0x23: 1}),
        ],
        40,
    )
    (publish,) = of_type(actions, Publish)
    assert [(m.topic, m.payload) for m in publish.messages] == [
        ("sensors/1", b"a"),
        ("sensors/1", b"b"),
        ("sensors/2", b"c"),
        ("sensors/2", b"d"),
    ]
    # A new connection starts with no aliases.
    fresh = v5_channel(Offer(topic_alias_maximum=2))
    assert fresh.handle_in([PublishPacket("", b"", properties={0x23: 1})], 9)[0] == Send(
        told(Disconnect(reason_code=0x82), "Topic Alias 1 used before it was set (section 3.3.4)")
    )


def test_receive_maximum_exceeded_gets_disconnect_0x93() -> None:
    # The client may have at most Receive Maximum unacknowledged QoS 1/2 PUBLISHes
    # [MQTT-3.3.4-7]: QoS 2 ones count until their PUBREL.
    channel = v5_channel(Offer(receive_maximum=2))
    first = channel.handle_in(
        [PublishPacket("t", b"", qos=2, packet_id=1), PublishPacket("t", b"", qos=2, packet_id=2)],
        20,
    )
    assert channel.phase is Phase.CONNECTED and of_type(first, InboundQos2)
    # a resend of one already counted is no new one
    channel.handle_in([PublishPacket("t", b"", qos=2, packet_id=2, dup=True)], 10)
    assert channel.phase is Phase.CONNECTED
    channel.handle_in([PubRel(packet_id=1)], 4)  # one slot free again
    channel.handle_in([PublishPacket("t", b"", qos=2, packet_id=3)], 10)
    assert channel.phase is Phase.CONNECTED
    actions = channel.handle_in([PublishPacket("t", b"", qos=1, packet_id=4)], 10)
    code, why = said(actions[0])
    assert code == 0x93 and why is not None and "[MQTT-3.3.4-7]" in why
    assert channel.phase is Phase.CLOSED


def test_utf8_payload_validation_refuses_with_0x99() -> None:
    channel = v5_channel(Offer(validate_utf8_payloads=True))
    actions = channel.handle_in(
        [
            PublishPacket("t", b"\xff\xfe", qos=1, packet_id=1, properties={0x01: 1}),
            PublishPacket("t", "ünïcode".encode(), qos=1, packet_id=2, properties={0x01: 1}),
            PublishPacket("t", b"\xff", qos=1, packet_id=3),  # not marked UTF-8: not checked
        ],
        30,
    )
    (drop,) = of_type(actions, Drop)
    assert drop.reason is DropReason.PAYLOAD_FORMAT_INVALID
    (publish,) = of_type(actions, Publish)
    assert [m.payload for m in publish.messages] == ["ünïcode".encode(), b"\xff"]
    assert publish.acks is not None
    refusal = told(
        PubAck(1, 0x99), "payload on 't' is not the UTF-8 its Payload Format Indicator says"
    )
    assert publish.acks.routed() == refusal + bytes((0x40, 2, 0, 2, 0x40, 2, 0, 3))


@pytest.mark.parametrize(
    ("offer", "subscription", "properties", "code"),
    [
        (Offer(shared_subscriptions=False), Subscription("$share/g/t", 1), {}, 0x9E),
        (Offer(wildcard_subscriptions=False), Subscription("a/+", 1), {}, 0xA2),
        (Offer(wildcard_subscriptions=False), Subscription("a/#", 1), {}, 0xA2),
        (Offer(subscription_identifiers=False), Subscription("a", 1), {0x0B: [5]}, 0xA1),
    ],
)
def test_subscribe_refusals_for_what_is_not_offered(
    offer: Offer, subscription: Subscription, properties: dict[int, Any], code: int
) -> None:
    channel = v5_channel(offer)
    actions = channel.handle_in([Subscribe(1, [subscription], properties=properties)], 9)
    (request,) = of_type(actions, SubscribeRequest)
    assert request.refused == {0: code}


def test_subscription_qos_is_granted_at_most_the_maximum_qos() -> None:
    channel = v5_channel(Offer(maximum_qos=1))
    actions = channel.handle_in([Subscribe(1, [Subscription("a", 2), Subscription("b", 0)])], 9)
    (request,) = of_type(actions, SubscribeRequest)
    assert [s.qos for s in request.subscriptions] == [1, 0]


@pytest.mark.parametrize(
    ("connect_expiry", "disconnect_expiry", "detach_with", "violation"),
    [
        (60, 0, 0.0, False),  # may end the session now
        (60, 3600, 3600.0, False),
        (60, 0xFFFFFFFF, math.inf, False),
        (60, None, None, False),  # unchanged
        (0, 60, None, True),  # 0 at CONNECT cannot become non-zero (section 3.14.2.2.2)
    ],
)
def test_disconnect_may_change_the_session_expiry(
    connect_expiry: int, disconnect_expiry: int | None, detach_with: float | None, violation: bool
) -> None:
    channel = v5_channel(properties={0x11: connect_expiry})
    properties = {} if disconnect_expiry is None else {0x11: disconnect_expiry}
    actions = channel.handle_in([Disconnect(properties=properties)], 9)
    (end,) = of_type(actions, End)
    if violation:
        code, why = said(actions[0])
        assert code == 0x82 and why is not None and "section 3.14.2.2.2" in why
        assert end.reason is DisconnectReason.PROTOCOL_ERROR
    else:
        assert end.reason is DisconnectReason.CLIENT_DISCONNECT
        assert end.session_expiry == detach_with


@pytest.mark.parametrize(
    ("reason", "code", "why"),
    [
        (DisconnectReason.TAKEN_OVER, 0x8E, "session taken over by another connection"),
        (DisconnectReason.SERVER_SHUTDOWN, 0x8B, "server shutting down"),
        (DisconnectReason.SERVER_ERROR, 0x83, "server error"),
    ],
)
def test_server_close_tells_a_v5_client_why(reason: DisconnectReason, code: int, why: str) -> None:
    channel = v5_channel()
    assert channel.close(reason)[0] == Send(told(Disconnect(reason_code=code), why))
    quiet = connected(version=4)
    assert not of_type(quiet.close(reason), Send)  # 3.x has no server DISCONNECT


def test_keepalive_timeout_tells_a_v5_client_0x8d() -> None:
    channel = v5_channel()
    actions = channel.connection_lost(DisconnectReason.KEEPALIVE_TIMEOUT, detail="silent for 9 s")
    assert actions[0] == Send(
        told(Disconnect(reason_code=0x8D), "keep-alive timeout: silent for 9 s")
    )


@pytest.mark.parametrize(
    ("will_delay", "session_expiry", "delay"),
    [
        (10, 60, 10.0),  # the session waits 10 s before publishing it
        (100, 60, 60.0),  # the session ends first: then [MQTT-3.1.3-9]
        (10, 0, 0.0),  # no session left: published now
        (0, 60, 0.0),
    ],
)
def test_will_delay_hands_the_will_to_the_session(
    will_delay: int, session_expiry: int, delay: float
) -> None:
    user = [("k", "v")]
    properties = {0x18: will_delay, 0x26: user} if will_delay else {0x26: user}
    will = Will("w", b"gone", properties=properties)
    channel = v5_channel(will=will, properties={0x11: session_expiry})
    actions = channel.connection_lost(DisconnectReason.SOCKET_CLOSED)
    (end,) = of_type(actions, End)
    if delay:
        assert not of_type(actions, Publish)
        assert end.will is not None and end.will.topic == "w" and end.will_delay == delay
        message = end.will
    else:
        (publish,) = of_type(actions, Publish)
        assert publish.messages[0].payload == b"gone" and end.will is None
        message = publish.messages[0]
    # Will Delay Interval is not a PUBLISH property: the message goes out without it
    # (a pool's fabric refuses a forwarded message carrying it), the rest go along.
    assert message.properties == {0x26: user}


def test_hooks_get_the_properties_of_subscribe_and_disconnect() -> None:
    hooks = HookBus()
    seen: list[Any] = []
    hooks.register(HookPoint.CLIENT_SUBSCRIBE, seen.append)
    hooks.register(HookPoint.CLIENT_DISCONNECTED, seen.append)
    channel = v5_channel(hooks=hooks, properties={0x11: 10})
    user = [("k", "v")]
    channel.handle_in(
        [
            Subscribe(1, [Subscription("a", 1, no_local=True, retain_handling=2)], {0x26: user}),
            Disconnect(properties={0x26: user}),
        ],
        20,
    )
    subscribe, disconnected = seen
    assert subscribe.properties == {0x26: user}
    assert subscribe.filters[0].no_local is True and subscribe.filters[0].retain_handling == 2
    assert disconnected.properties == {0x26: user}
    assert disconnected.client.protocol_version == 5


@pytest.mark.parametrize(
    ("offer", "will", "code_v5", "code_v3"),
    [
        (Offer(maximum_qos=1), Will("w", b"", qos=2), 0x9B, 0x03),
        (Offer(retain_available=False), Will("w", b"", retain=True), 0x9A, 0x03),
    ],
)
def test_will_beyond_what_is_offered_refuses_the_connect(
    offer: Offer, will: Will, code_v5: int, code_v3: int
) -> None:
    for version, code in ((5, code_v5), (4, code_v3)):
        channel = Channel("p", HookBus(), ChannelSettings(offer=offer))
        actions = channel.handle_in(
            [Connect(client_id="c", protocol_version=version, will=will)], 9
        )
        if version == 5:
            connack = told(
                ConnAck(reason_code=code),
                f"will with QoS {will.qos}, retain {will.retain}: not offered ([mqtt])",
            )
        else:
            connack = encode(ConnAck(reason_code=code), version)
        assert actions[0] == Send(connack)
        assert channel.phase is Phase.CLOSED


@pytest.mark.parametrize(
    ("reason", "session_ended", "delayed"),
    [
        (DisconnectReason.TAKEN_OVER, False, True),  # resumed elsewhere: the session decides
        (DisconnectReason.TAKEN_OVER, True, False),  # a clean start ends the session: now
        (DisconnectReason.SERVER_SHUTDOWN, False, False),  # timers do not survive a restart
    ],
)
def test_a_delayed_will_goes_out_at_once_when_the_session_ends_too(
    reason: DisconnectReason, session_ended: bool, delayed: bool
) -> None:
    will = Will("w", b"gone", properties={0x18: 30})
    channel = v5_channel(will=will, properties={0x11: 60})
    actions = channel.close(reason, session_ended=session_ended)
    (end,) = of_type(actions, End)
    assert (end.will is not None) is delayed
    assert bool(of_type(actions, Publish)) is not delayed
