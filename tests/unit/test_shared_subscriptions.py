"""Shared subscriptions in-process: the `$share/{group}/{filter}` syntax, the share-group
table, its fan-out plan cache, the session's hand-over of shared deliveries, and the
channel's SUBACK codes for them (MQTT 5.0 section 4.8.2)."""

from __future__ import annotations

from typing import Any

import pytest

from channel.actions import OpenSession, SubscribeRequest
from channel.channel import Channel, ChannelSettings, Phase
from channel.negotiation import Offer
from core.message import new_message
from core.session_state import Ack, Delivery, SendPublish, SessionState, SubscriptionOptions
from core.share_origin import ShareOrigin
from hooks.decisions import Decision
from hooks.events import AuthorizeRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt.packets import Connect, Subscribe, Subscription
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from mqtt.topics import TopicError
from router.fan_out import FanOut, Route
from router.route_table import RouteTable
from router.shared import SharedSubscriptions, inner_filter, parse_shared


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("$share/g/a/b", ("g", "a/b")),
        ("$share/g/#", ("g", "#")),
        ("$share/group-1/+/x", ("group-1", "+/x")),
        ("$share/g//", ("g", "/")),
    ],
)
def test_valid_shared_filters(text: str, parsed: tuple[str, str]) -> None:
    assert parse_shared(text) == parsed
    assert inner_filter(text) == parsed[1]


@pytest.mark.parametrize(
    "text",
    [
        "$share/",  # no share name [MQTT-4.8.2-1]
        "$share//a",  # empty share name
        "$share/g",  # no filter after the share name
        "$share/g/",  # empty filter
        "$share/g+/a",  # wildcard in the share name [MQTT-4.8.2-2]
        "$share/#/a",
        "$share/g/a/#/b",  # the filter itself is invalid
    ],
)
def test_invalid_shared_filters(text: str) -> None:
    with pytest.raises(TopicError):
        parse_shared(text)
    assert inner_filter(text) == text  # used as is where a filter is only read


def route(name: str, qos: int = 1) -> Route:
    return Route(session=f"session-{name}", options=SubscriptionOptions(qos=qos))


def test_groups_gain_and_lose_members_in_join_order() -> None:
    shares = SharedSubscriptions()
    assert shares.add("$share/g/a/+", "c1", route("c1"))
    assert shares.add("$share/g/a/+", "c2", route("c2"))
    assert not shares.add("$share/g/a/+", "c1", route("c1", qos=2))  # re-subscribe: replaced
    assert shares.add("$share/h/a/+", "c1", route("c1"))
    assert len(shares) == 2
    (group_g, group_h) = sorted(shares.match("a/x"), key=lambda g: g.group)
    assert [m.client_id for m in group_g.members] == ["c1", "c2"]
    assert group_g.members[0].route.options.qos == 2
    assert [m.client_id for m in group_h.members] == ["c1"]
    assert shares.match("b/x") == ()
    assert shares.remove("$share/g/a/+", "c1")
    assert not shares.remove("$share/g/a/+", "c1")
    assert not shares.remove("$share/bad", "c1")  # malformed: no such group, no error
    assert shares.remove("$share/h/a/+", "c1")
    assert len(shares) == 1
    assert shares.remove("$share/g/a/+", "c2")
    assert len(shares) == 0 and shares.match("a/x") == ()


def test_a_group_handed_out_is_never_changed_afterwards() -> None:
    shares = SharedSubscriptions()
    shares.add("$share/g/t", "c1", route("c1"))
    (before,) = shares.match("t")
    shares.add("$share/g/t", "c2", route("c2"))
    assert [m.client_id for m in before.members] == ["c1"]


def test_shared_plan_is_empty_without_groups_and_follows_changes() -> None:
    routes: RouteTable[str, Route] = RouteTable()
    shares = SharedSubscriptions()
    fan_out = FanOut(routes, shares=shares)
    assert fan_out.shared_plan("t") == ()
    shares.add("$share/g/t", "c1", route("c1"))
    (group,) = fan_out.shared_plan("t")
    assert [m.client_id for m in group.members] == ["c1"]
    shares.add("$share/g/t", "c2", route("c2"))  # the cached plan is invalidated
    (group,) = fan_out.shared_plan("t")
    assert [m.client_id for m in group.members] == ["c1", "c2"]
    assert fan_out.plan("t") == ()  # shared members are not ordinary targets


# ----- the session state: what a leaving member hands over --------------------------------


def shared_delivery(qos: int, text: str) -> Delivery:
    message = new_message("t", text.encode(), qos, False, "pub", None, {}, None)
    return Delivery(message, qos, False, share=ShareOrigin("g", "t"))


def test_take_shared_hands_over_queued_and_only_qos1_in_flight() -> None:
    state = SessionState("c1", persistent=True, max_inflight=2)
    qos1, qos2 = shared_delivery(1, "in flight 1"), shared_delivery(2, "in flight 2")
    queued = shared_delivery(1, "queued")
    plain = Delivery(new_message("t", b"plain", 1, False, "p", None, {}, None), 1, False)
    actions = state.deliver([qos1, qos2, queued, plain], connected=True)
    assert [type(a) for a in actions] == [SendPublish, SendPublish]
    # The client went away: what is in flight stays for it [MQTT-4.8.2-4].
    assert state.take_shared(in_flight=False) == [queued]
    assert len(state.inflight) == 2 and list(state.queue or []) == [plain]
    # The session ends: QoS 1 in flight moves, QoS 2 never does [MQTT-4.8.2-5].
    assert state.take_shared(in_flight=True) == [qos1]
    assert [entry.delivery for entry in state.inflight.values()] == [qos2]
    # The packet id of the moved delivery is free: its PUBACK now is a stray.
    assert state.acknowledge([(Ack.PUBACK, 1)], connected=True, now=0.0) == []


# ----- the channel's answers to SUBSCRIBE ---------------------------------------------------


def subscribe(channel: Channel, *filters: str) -> SubscribeRequest:
    actions = channel.handle_in([Subscribe(1, [Subscription(f, 1) for f in filters])], 30)
    (request,) = [a for a in actions if type(a) is SubscribeRequest]
    return request


def connect(hooks: HookBus | None = None, **settings: Any) -> tuple[Channel, dict[int, Any]]:
    """A connected 5.0 channel, and the CONNACK properties it opened its session with."""
    channel = Channel("p", hooks or HookBus(), ChannelSettings(**settings))
    actions = channel.handle_in([Connect(client_id="c1", protocol_version=5)], 20)
    (opened,) = [a for a in actions if type(a) is OpenSession]
    channel.session_attached(session_present=False)
    assert channel.phase is Phase.CONNECTED
    return channel, opened.connack_properties


def connected(hooks: HookBus | None = None) -> Channel:
    return connect(hooks)[0]


def test_invalid_share_names_get_topic_filter_invalid() -> None:
    request = subscribe(connected(), "$share/g/a", "$share/g+/a", "$share/g", "plain")
    assert request.refused == {
        1: ReasonCode.TOPIC_FILTER_INVALID,
        2: ReasonCode.TOPIC_FILTER_INVALID,
    }


def test_shared_subscriptions_off_get_0x9e_and_connack_says_so() -> None:
    channel, connack_properties = connect(offer=Offer(shared_subscriptions=False))
    assert connack_properties[PropertyId.SHARED_SUBSCRIPTION_AVAILABLE] == 0
    request = subscribe(channel, "$share/g/a", "a")
    assert request.refused == {0: ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED}


def test_connack_announces_shared_subscriptions_when_they_are_on() -> None:
    _channel, connack_properties = connect()
    assert connack_properties[PropertyId.SHARED_SUBSCRIPTION_AVAILABLE] == 1


def test_the_acl_is_asked_about_the_filter_after_the_share_name() -> None:
    asked: list[str] = []
    hooks = HookBus()

    def authorize(request: AuthorizeRequest) -> Decision:
        asked.append(request.topic)
        return Decision.ALLOW if request.topic.startswith("allowed/") else Decision.DENY

    hooks.register(HookPoint.CLIENT_AUTHORIZE, authorize)
    request = subscribe(connected(hooks), "$share/g/allowed/#", "$share/g/secret/#")
    assert asked == ["allowed/#", "secret/#"]
    assert request.refused == {1: ReasonCode.NOT_AUTHORIZED}
