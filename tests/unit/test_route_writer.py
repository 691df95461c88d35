"""actors.router_actor.RouteWriter in-process: the one way routes change, synchronously.

A change is in the table when the call returns (what makes a SUBSCRIBE in force for the
PUBLISH after it, docs/channel.md "Routes in read order"); a removal only takes routes that
still point at the session asking; the pool's replica hears each route that appears or
goes, and each persistent route. Also `SubscribeRequest.granted`, the options the client
actor and the session both route with.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.router_actor import RouteWriter
from channel.actions import SubscribeRequest
from core.session_state import SubscriptionOptions
from mqtt.packets import Subscription
from router.fan_out import FanOut, Route
from router.route_table import RouteTable
from router.shared import SharedSubscriptions


class Replica:
    """Records what the writer tells the pool."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str, bool]] = []

    def route_changed(self, topic_filter: str, added: bool) -> None:
        self.told.append(("route", topic_filter, added))

    def durable_route_changed(self, topic_filter: str, added: bool) -> None:
        self.told.append(("durable", topic_filter, added))

    def when_routes_known(self, then: Callable[[], object]) -> None:
        then()


def _writer(replica: Replica | None = None) -> tuple[RouteWriter, RouteTable, FanOut]:
    table: RouteTable[str, Route] = RouteTable()
    shares = SharedSubscriptions()
    return RouteWriter(table, shares, replica), table, FanOut(table, shares=shares)


def test_a_route_added_is_in_the_plan_of_the_next_publish() -> None:
    writer, _table, plans = _writer()
    assert plans.plan("t/1") == ()  # cached: the write must move the table's version
    writer.add("sub", [("t/+", Route("session", SubscriptionOptions(qos=1)))])
    assert [target.client_id for target in plans.plan("t/1")] == ["sub"]
    writer.remove("sub", ["t/+"], "session")
    assert plans.plan("t/1") == ()


def test_a_removal_leaves_a_route_that_points_at_another_session() -> None:
    writer, table, _plans = _writer()
    writer.add("sub", [("t", Route("new session", SubscriptionOptions(qos=0)))])
    writer.remove("sub", ["t"], "old session")  # the session that ended, told late
    assert dict(table.subscribers("t")) == {"sub": Route("new session", SubscriptionOptions(qos=0))}


def test_the_replica_hears_new_and_gone_routes_and_persistent_ones() -> None:
    replica = Replica()
    writer, _table, _plans = _writer(replica)
    clean = Route("session", SubscriptionOptions(qos=0))
    writer.add("a", [("t", clean)])
    writer.add("a", [("t", clean)])  # the same subscription again: nothing new
    writer.add("a", [("t", Route("session", SubscriptionOptions(qos=0), persistent=True))])
    writer.add("b", [("$share/g/t", clean)])
    writer.remove("a", ["t"], "session")
    writer.remove("b", ["$share/g/t"], "session")
    assert replica.told == [
        ("route", "t", True),
        ("durable", "t", True),
        ("route", "$share/g/t", True),
        ("route", "t", False),
        ("durable", "t", False),
        ("route", "$share/g/t", False),
    ]


def test_granted_gives_each_filter_not_refused_with_its_options() -> None:
    request = SubscribeRequest(
        1,
        [
            Subscription("a", 1, no_local=True),
            Subscription("b", 2),
            Subscription("c", 0, retain_as_published=True, retain_handling=2),
        ],
        refused={1: 0x87},
        subscription_id=7,
    )
    assert request.granted() == [
        ("a", SubscriptionOptions(qos=1, no_local=True, subscription_id=7)),
        (
            "c",
            SubscriptionOptions(
                qos=0, retain_as_published=True, retain_handling=2, subscription_id=7
            ),
        ),
    ]
