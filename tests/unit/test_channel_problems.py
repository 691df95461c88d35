"""Reason Strings and User Properties from the broker, in-process (`channel.problems`).

Each test names the MQTT 5.0 rule it checks:
- a refused CONNECT and every server DISCONNECT say why to a 5.0 client, whatever its
  Request Problem Information [MQTT-3.1.2-29]; 3.x packets carry no properties at all;
- refused PUBACK/PUBREC/PUBREL/PUBCOMP and SUBACK say why only when the client left Request
  Problem Information at 1; with 0 no Reason String or User Property goes on any packet but
  PUBLISH, CONNACK and DISCONNECT [MQTT-3.1.2-29];
- successful acknowledgements are unchanged: the shortest form, no properties;
- a Reason String or User Property that would make a packet larger than the client's Maximum
  Packet Size is left out, the packet still goes [MQTT-3.2.2-19/20] [MQTT-3.4.2-2]
  [MQTT-3.5.2-2] [MQTT-3.6.2-2] [MQTT-3.7.2-2] [MQTT-3.9.2-1] [MQTT-3.14.2-3];
- an authentication result's `user_properties` reach a 5.0 CONNACK.
"""

from __future__ import annotations

from typing import Any

import pytest

from channel.actions import InboundQos2, OpenSession, Publish, Send, SubscribeRequest
from channel.channel import Channel, ChannelSettings, Phase
from channel.negotiation import Offer
from channel.problems import reason_string, refusal_ack, with_properties
from core.client import NO_LIMIT, ClientInfo
from core.reasons import DisconnectReason
from hooks.decisions import AuthFailure, AuthResult, Decision
from hooks.events import AuthenticateRequest, AuthorizeRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt import PacketDecoder
from mqtt.encoder import encode
from mqtt.errors import MalformedPacketError
from mqtt.packets import (
    ConnAck,
    Connect,
    PacketType,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    Subscribe,
    Subscription,
)
from mqtt.packets import Publish as PublishPacket
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode

REASON = PropertyId.REASON_STRING
USER = PropertyId.USER_PROPERTY
RPI = PropertyId.REQUEST_PROBLEM_INFORMATION
MAX_PACKET = PropertyId.MAXIMUM_PACKET_SIZE


def decoded(action: Any) -> Any:
    """The one packet a Send action (or bytes) writes, decoded as a 5.0 client would."""
    data = action.data if type(action) is Send else action
    (packet,) = PacketDecoder(max_packet_size=1 << 20, protocol_version=5).feed(data)
    return packet


def denying(topic: str) -> HookBus:
    """A hook bus whose ACL denies publishing and subscribing to `topic`."""
    hooks = HookBus()

    def authorize(request: AuthorizeRequest) -> Decision:
        return Decision.DENY if request.topic == topic else Decision.ALLOW

    hooks.register(HookPoint.CLIENT_AUTHORIZE, authorize)
    return hooks


def connected(
    version: int = 5,
    hooks: HookBus | None = None,
    offer: Offer | None = None,
    properties: dict[int, Any] | None = None,
) -> Channel:
    """A connected channel; `properties` are the CONNECT's (RPI, Maximum Packet Size)."""
    channel = Channel("127.0.0.1:5000", hooks or HookBus(), ChannelSettings(offer=offer or Offer()))
    connect = Connect(client_id="c1", protocol_version=version, properties=properties or {})
    channel.handle_in([connect], 20)
    channel.session_attached(session_present=False)
    assert channel.phase is Phase.CONNECTED
    return channel


def client(version: int = 5, problems: bool = True, limit: int = NO_LIMIT) -> ClientInfo:
    return ClientInfo(
        client_id="c1",
        username=None,
        peer="p",
        protocol_version=version,
        clean_start=True,
        keepalive=0,
        maximum_packet_size=limit,
        request_problem_information=problems,
    )


# ----- CONNACK refusals -------------------------------------------------------------------


@pytest.mark.parametrize("problems", [1, 0])  # CONNACK is exempt from RPI 0 [MQTT-3.1.2-29]
def test_a_refused_connect_says_why_in_a_reason_string(problems: int) -> None:
    channel = Channel("p", HookBus(), ChannelSettings(max_client_id_length=4))
    connect = Connect(client_id="abcdef", protocol_version=5, properties={RPI: problems})
    actions = channel.handle_in([connect], 20)
    assert decoded(actions[0]) == ConnAck(
        False, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, {REASON: "client id too long"}
    )
    assert channel.phase is Phase.CLOSED


@pytest.mark.parametrize(("version", "code"), [(4, 0x02), (3, 0x02)])
def test_a_refused_3x_connect_has_no_properties(version: int, code: int) -> None:
    # 3.1/3.1.1 CONNACK is two bytes: flags and return code (3.1.1 section 3.2).
    channel = Channel("p", HookBus(), ChannelSettings(max_client_id_length=4))
    actions = channel.handle_in([Connect(client_id="abcdef", protocol_version=version)], 20)
    assert actions[0] == Send(bytes((0x20, 2, 0, code)))


def test_a_refused_connack_drops_the_reason_string_beyond_the_maximum_packet_size() -> None:
    # [MQTT-3.2.2-19]: the CONNACK still goes, without the property.
    channel = Channel("p", HookBus(), ChannelSettings(max_client_id_length=4))
    connect = Connect(client_id="abcdef", protocol_version=5, properties={MAX_PACKET: 10})
    actions = channel.handle_in([connect], 20)
    assert actions[0] == Send(encode(ConnAck(False, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID), 5))


# ----- server DISCONNECT ------------------------------------------------------------------


def close_by_takeover(channel: Channel) -> list[Any]:
    return channel.close(DisconnectReason.TAKEN_OVER)


def close_by_kick(channel: Channel) -> list[Any]:
    return channel.close(DisconnectReason.ADMINISTRATIVE_ACTION, "(kicked by an operator)")


def close_by_shutdown(channel: Channel) -> list[Any]:
    return channel.close(DisconnectReason.SERVER_SHUTDOWN)


def close_by_keepalive(channel: Channel) -> list[Any]:
    return channel.connection_lost(DisconnectReason.KEEPALIVE_TIMEOUT, detail="silent for 91.0 s")


def close_by_malformed(channel: Channel) -> list[Any]:
    error = MalformedPacketError("remaining length over 4 bytes")
    return channel.connection_lost(DisconnectReason.PROTOCOL_ERROR, error)


def close_by_alias(channel: Channel) -> list[Any]:
    return channel.handle_in([PublishPacket("t", b"", properties={0x23: 99})], 9)


def close_by_receive_maximum(channel: Channel) -> list[Any]:
    publishes = [PublishPacket("t", b"", qos=2, packet_id=n) for n in (1, 2, 3)]
    return channel.handle_in(publishes, 30)  # the Offer below announces Receive Maximum 2


@pytest.mark.parametrize(
    ("close", "code", "why"),
    [
        (close_by_takeover, 0x8E, "session taken over by another connection"),
        (close_by_kick, 0x98, "administrative action: kicked by an operator"),
        (close_by_shutdown, 0x8B, "server shutting down"),
        (close_by_keepalive, 0x8D, "keep-alive timeout: silent for 91.0 s"),
        (close_by_malformed, 0x81, "remaining length over 4 bytes"),
        (close_by_alias, 0x94, "Topic Alias 99 outside 1..10, the Topic Alias Maximum announced"),
        (close_by_receive_maximum, 0x93, "more than the Receive Maximum of 2 unacknowledged"),
    ],
)
@pytest.mark.parametrize("problems", [1, 0])  # DISCONNECT is exempt from RPI 0 [MQTT-3.1.2-29]
def test_every_server_disconnect_says_why(close: Any, code: int, why: str, problems: int) -> None:
    channel = connected(offer=Offer(receive_maximum=2), properties={RPI: problems})
    disconnect = decoded(close(channel)[0])
    assert disconnect.reason_code == code
    assert disconnect.properties[REASON].startswith(why)
    assert channel.phase is Phase.CLOSED


def test_a_3x_client_gets_no_server_disconnect() -> None:
    channel = connected(version=4)
    assert not [a for a in close_by_kick(channel) if type(a) is Send]


def test_a_server_disconnect_drops_the_reason_string_beyond_the_maximum_packet_size() -> None:
    # [MQTT-3.14.2-3]: DISCONNECT 0x8E in its three bytes, no properties.
    channel = connected(properties={MAX_PACKET: 8})
    assert close_by_takeover(channel)[0] == Send(bytes((0xE0, 1, 0x8E)))


# ----- acknowledgements: Request Problem Information --------------------------------------


def test_refused_puback_and_pubrec_say_why_when_problem_information_is_asked_for() -> None:
    channel = connected(hooks=denying("secret"))
    actions = channel.handle_in(
        [
            PublishPacket("secret", b"x", qos=1, packet_id=1),
            PublishPacket("secret", b"x", qos=2, packet_id=2),
        ],
        20,
    )
    (send,) = [a for a in actions if type(a) is Send]  # the batch's PUBACKs
    assert decoded(send) == PubAck(1, 0x87, {REASON: "not authorised to publish to 'secret'"})
    (inbound,) = [a for a in actions if type(a) is InboundQos2]
    ((_id, message, pubrec),) = inbound.publishes
    assert message is None
    assert decoded(pubrec) == PubRec(2, 0x87, {REASON: "not authorised to publish to 'secret'"})


def test_refused_acks_carry_no_reason_string_with_request_problem_information_0() -> None:
    # [MQTT-3.1.2-29]: PUBACK/PUBREC are not PUBLISH, CONNACK or DISCONNECT.
    channel = connected(hooks=denying("secret"), properties={RPI: 0})
    actions = channel.handle_in(
        [
            PublishPacket("secret", b"x", qos=1, packet_id=1),
            PublishPacket("secret", b"x", qos=2, packet_id=2),
        ],
        20,
    )
    sends = [a for a in actions if type(a) is Send]
    assert sends == [Send(bytes((0x40, 3, 0, 1, 0x87)))]
    (inbound,) = [a for a in actions if type(a) is InboundQos2]
    assert inbound.publishes[0][2] == bytes((0x50, 3, 0, 2, 0x87))


def test_successful_acks_are_unchanged() -> None:
    # The common case never reaches channel.problems: PUBACK 0x00 and 0x10, PUBREC 0x00 in
    # their shortest forms (sections 3.4.2.1, 3.5.2.1).
    channel = connected()
    actions = channel.handle_in(
        [
            PublishPacket("a", b"x", qos=1, packet_id=1),
            PublishPacket("b", b"x", qos=1, packet_id=2),
            PublishPacket("c", b"x", qos=2, packet_id=3),
        ],
        30,
    )
    (publish,) = [a for a in actions if type(a) is Publish]
    assert publish.acks is not None
    unmatched = {publish.messages[1].message_id}
    assert publish.acks.routed(unmatched) == bytes((0x40, 2, 0, 1, 0x40, 3, 0, 2, 0x10))
    (inbound,) = [a for a in actions if type(a) is InboundQos2]
    assert inbound.publishes[0][2] == bytes((0x50, 2, 0, 3))


def test_a_refused_puback_drops_the_reason_string_beyond_the_maximum_packet_size() -> None:
    # [MQTT-3.4.2-2]: 5 bytes fit, the Reason String does not.
    channel = connected(hooks=denying("secret"), properties={MAX_PACKET: 5})
    actions = channel.handle_in([PublishPacket("secret", b"x", qos=1, packet_id=1)], 12)
    assert Send(bytes((0x40, 3, 0, 1, 0x87))) in actions


@pytest.mark.parametrize(
    ("packet_type", "ack"),
    [(PacketType.PUBREL, PubRel), (PacketType.PUBCOMP, PubComp), (PacketType.PUBREC, PubRec)],
)
def test_the_sessions_refusals_follow_the_same_rules(packet_type: int, ack: type) -> None:
    # PUBREL/PUBCOMP 0x92 and PUBREC 0x97 are written by the session actor with refusal_ack.
    why = "packet identifier 7 not found"
    code = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
    assert decoded(refusal_ack(packet_type, 7, code, why, client())) == ack(7, code, {REASON: why})
    assert decoded(refusal_ack(packet_type, 7, code, why, client(problems=False))) == ack(7, code)
    assert decoded(refusal_ack(packet_type, 7, code, why, client(limit=5))) == ack(7, code)
    # 3.1.1 acknowledgements have no reason code: the plain four bytes.
    plain = refusal_ack(packet_type, 7, code, why, client(version=4))
    assert plain == bytes((encode(ack(7), 4)[0], 2, 0, 7))


# ----- SUBACK -----------------------------------------------------------------------------


def test_a_suback_with_refusals_names_each_refused_filter() -> None:
    channel = connected(hooks=denying("secret"), offer=Offer(wildcard_subscriptions=False))
    actions = channel.handle_in(
        [Subscribe(1, [Subscription("ok", 1), Subscription("secret", 1), Subscription("a/#")])],
        30,
    )
    (request,) = [a for a in actions if type(a) is SubscribeRequest]
    assert request.refused == {1: 0x87, 2: 0xA2}
    assert request.suback_properties == {
        REASON: "'secret': not authorised; 'a/#': wildcard subscriptions are not supported"
    }


def test_a_suback_without_refusals_has_no_properties() -> None:
    channel = connected()
    actions = channel.handle_in([Subscribe(1, [Subscription("ok", 1)])], 9)
    (request,) = [a for a in actions if type(a) is SubscribeRequest]
    assert request.suback_properties is None


# Request Problem Information 0 [MQTT-3.1.2-29]; no room for the string [MQTT-3.9.2-1].
@pytest.mark.parametrize("properties", [{RPI: 0}, {MAX_PACKET: 12}])
def test_a_suback_says_nothing_without_problem_information_or_room(
    properties: dict[int, Any],
) -> None:
    channel = connected(hooks=denying("secret"), properties=properties)
    actions = channel.handle_in([Subscribe(1, [Subscription("secret", 1)])], 9)
    (request,) = [a for a in actions if type(a) is SubscribeRequest]
    assert request.refused == {0: 0x87} and request.suback_properties is None


# ----- the size rule itself ---------------------------------------------------------------


def test_a_reason_string_goes_exactly_when_the_whole_packet_fits() -> None:
    # The limit is the whole packet, fixed header included (section 3.1.2.11.4).
    ack = PubAck(1, 0x87)
    with_reason = encode(PubAck(1, 0x87, {REASON: "why"}), 5)
    assert with_properties(ack, (reason_string("why"),), len(with_reason))[1] == with_reason
    assert with_properties(ack, (reason_string("why"),), len(with_reason) - 1)[1] == encode(ack, 5)
    assert with_properties(ack, (reason_string("why"),), NO_LIMIT)[1] == with_reason


def test_a_later_addition_that_fits_still_goes() -> None:
    # A long Reason String that does not fit does not keep a short user property out.
    connack = ConnAck(False, 0x86)
    packet, _data = with_properties(connack, (reason_string("x" * 200), {USER: [("k", "v")]}), 64)
    assert packet.properties == {USER: [("k", "v")]}


def test_reason_strings_are_well_formed_utf8_strings() -> None:
    # No U+0000 [MQTT-1.5.4-2], no control characters (section 1.5.4), no lone surrogate,
    # and a bounded length.
    assert reason_string("a\x00b\nc\x7f\ud800") == {REASON: "a b c ?"}
    assert len(reason_string("x" * 100_000)[REASON]) == 1024


def test_a_property_that_cannot_be_encoded_is_left_out() -> None:
    # A plugin's value over 65535 bytes (section 1.5.4) does not break the CONNACK.
    connack = ConnAck(False, 0)
    packet, data = with_properties(connack, ({USER: [("k", "v" * 70_000)]},), NO_LIMIT)
    assert packet == connack and data == encode(connack, 5)


# ----- User Properties from authentication ------------------------------------------------


def authenticating(result: AuthResult, seen: list[AuthenticateRequest] | None = None) -> HookBus:
    hooks = HookBus(allow_anonymous=False)

    def authenticate(request: AuthenticateRequest) -> AuthResult:
        if seen is not None:
            seen.append(request)
        return result

    hooks.register(HookPoint.CLIENT_AUTHENTICATE, authenticate)
    return hooks


PAIRS = (("tier", "gold"), ("region", "eu"), ("tier", "again"))


def test_auth_result_user_properties_reach_the_connack_in_order() -> None:
    seen: list[AuthenticateRequest] = []
    hooks = authenticating(AuthResult(allowed=True, user_properties=PAIRS), seen)
    channel = Channel("p", hooks, ChannelSettings())
    user = [("app", "1")]
    actions = channel.handle_in(
        [Connect(client_id="c1", protocol_version=5, properties={USER: user})], 20
    )
    (opened,) = [a for a in actions if type(a) is OpenSession]
    assert opened.connack_properties[USER] == list(PAIRS)
    # ... and the plugin saw the CONNECT's own User Properties.
    assert seen[0].client.properties[USER] == user


def test_auth_result_user_properties_go_on_a_refusal_too() -> None:
    refusal = AuthResult(
        allowed=False, reason=AuthFailure.BAD_CREDENTIALS, user_properties=(("retry", "no"),)
    )
    channel = Channel("p", authenticating(refusal), ChannelSettings())
    actions = channel.handle_in([Connect(client_id="c1", protocol_version=5)], 20)
    assert decoded(actions[0]) == ConnAck(
        False,
        ReasonCode.BAD_USER_NAME_OR_PASSWORD,
        {REASON: "authentication failed: bad_credentials", USER: [("retry", "no")]},
    )


def test_auth_result_user_properties_are_left_out_beyond_the_maximum_packet_size() -> None:
    # [MQTT-3.2.2-20]; a 3.x client gets no properties at all.
    hooks = authenticating(AuthResult(allowed=True, user_properties=(("k", "v" * 100),)))
    small = Channel("p", hooks, ChannelSettings())
    actions = small.handle_in(
        [Connect(client_id="c1", protocol_version=5, properties={MAX_PACKET: 64})], 20
    )
    (opened,) = [a for a in actions if type(a) is OpenSession]
    assert USER not in opened.connack_properties
    old = Channel("p", hooks, ChannelSettings())
    (opened,) = [
        a
        for a in old.handle_in([Connect(client_id="c1", protocol_version=4)], 20)
        if type(a) is OpenSession
    ]
    assert opened.connack_properties == {}


def test_auth_result_user_properties_must_be_string_pairs() -> None:
    with pytest.raises(ValueError, match="not a"):
        AuthResult(allowed=True, user_properties=(("k", 1),))  # type: ignore[arg-type]
