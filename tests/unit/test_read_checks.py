"""Per-delivery read checks, in-process: client.check_reads on the bus, the decision cache
(`hooks.read_checks.ReadChecks`) and the filtered fan-out plans (`router.readable_plans`),
with plugins.acl_file as the ACL.

The property test is the contract: whatever the ACL, the subscriptions and the order of the
messages, a subscriber is given a message exactly when the ACL evaluated directly lets it
read the topic, and each (subscriber, topic) costs one decision however many messages and
subscribers there are.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.session_state import SubscriptionOptions
from hooks.decisions import Decision
from hooks.events import AuthorizeAction, AuthorizeRequest, CheckReads, ClientInfo
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from hooks.read_checks import ReadChecks
from mqtt.topics import matches
from plugins.acl_file import AclTable, parse_acl
from router.fan_out import FanOut, Route
from router.readable_plans import ReadablePlans
from router.route_table import RouteTable

SUB = AuthorizeAction.SUBSCRIBE


def client(client_id: str, username: str | None = None) -> ClientInfo:
    return ClientInfo(
        client_id=client_id,
        username=username,
        peer="127.0.0.1:1",
        protocol_version=4,
        clean_start=True,
        keepalive=60,
    )


class CountingAcl:
    """An acl_file table on a bus, counting the client.authorize calls it answers."""

    def __init__(self, text: str) -> None:
        self.table: AclTable = parse_acl(text, "acl")
        self.asked: Counter[tuple[str, str]] = Counter()
        self.bus = HookBus()
        self.bus.register(HookPoint.CLIENT_AUTHORIZE, self.authorize, owner="acl")
        self.bus.register(HookPoint.CLIENT_CHECK_READS, self.checks_reads, owner="acl")

    def authorize(self, request: AuthorizeRequest) -> Decision:
        self.asked[request.client.client_id, request.topic] += 1
        return self.table.decide(request.client, request.action, request.topic)

    def checks_reads(self, request: CheckReads) -> bool:
        return self.table.checks_reads(request.client)


# -- client.check_reads on the bus --------------------------------------------------------


def test_without_a_callback_no_client_is_checked() -> None:
    assert HookBus().checks_reads(client("c")) is False


def test_any_callback_answering_true_checks_the_client() -> None:
    bus = HookBus()
    bus.register(HookPoint.CLIENT_CHECK_READS, lambda request: False, owner="a")
    assert bus.checks_reads(client("c")) is False
    bus.register(HookPoint.CLIENT_CHECK_READS, lambda request: request.client.client_id == "c")
    assert bus.checks_reads(client("c")) is True
    assert bus.checks_reads(client("d")) is False


def test_a_failing_or_wrong_callback_checks_the_client(caplog: pytest.LogCaptureFixture) -> None:
    def broken(_request: CheckReads) -> bool:
        raise RuntimeError("boom")

    for callback in (broken, lambda _request: "yes"):
        bus = HookBus()
        bus.register(HookPoint.CLIENT_CHECK_READS, callback, owner="bad")
        with caplog.at_level(logging.ERROR, logger="hooks.hook_bus"):
            assert bus.checks_reads(client("c")) is True
    assert len(caplog.records) == 2
    assert all("treated as True" in record.getMessage() for record in caplog.records)


# -- ReadChecks ---------------------------------------------------------------------------

ACL = "topic readwrite #\ntopic deny test/nosubscribe\nuser bob\ntopic read #\n"


def test_only_sessions_whose_client_has_a_deny_rule_are_checked() -> None:
    acl = CountingAcl(ACL)
    checks = ReadChecks(acl.bus)
    assert checks.active is False
    checks.identify("s-bob", client("b", "bob"))  # no deny rule in bob's block
    assert checks.active is False and checks.client_of("s-bob") is None
    checks.identify("s-anon", client("a"))
    assert checks.active is True
    assert checks.keeps("s-anon", "test/nosubscribe") is False
    assert checks.keeps("s-anon", "test/other") is True
    assert checks.keeps("s-bob", "test/nosubscribe") is True  # not checked: not asked
    assert checks.keeps("s-unknown", "test/nosubscribe") is True
    checks.forget("s-anon")
    assert checks.active is False


def test_a_decision_is_made_once_per_client_and_topic_until_reset() -> None:
    acl = CountingAcl(ACL)
    checks = ReadChecks(acl.bus)
    checks.identify("s", client("a"))
    for _ in range(5):
        assert checks.keeps("s", "test/nosubscribe") is False
        assert checks.keeps("s", "x") is True
    assert acl.asked == {("a", "test/nosubscribe"): 1, ("a", "x"): 1}
    acl.table = parse_acl("topic readwrite #\n", "acl")  # as a reload does
    version = checks.version
    checks.reset()
    assert checks.version > version
    assert checks.active is False  # no deny rule any more
    checks.identify("s", client("a"))
    assert checks.keeps("s", "test/nosubscribe") is True


def test_a_reset_checks_sessions_a_new_deny_rule_applies_to() -> None:
    acl = CountingAcl("topic readwrite #\n")
    checks = ReadChecks(acl.bus)
    checks.identify("s", client("a"))
    assert checks.active is False
    acl.table = parse_acl(ACL, "acl")
    checks.reset()
    assert checks.active is True
    assert checks.keeps("s", "test/nosubscribe") is False


def test_the_version_moves_when_a_sessions_identity_changes() -> None:
    acl = CountingAcl("user alice\ntopic deny a\ntopic read #\nuser eve\ntopic deny b\n")
    checks = ReadChecks(acl.bus)
    checks.identify("s", client("c", "alice"))
    first = checks.version
    checks.identify("s", client("c", "alice"))  # resumed by the same identity
    assert checks.version == first
    checks.identify("s", client("c", "eve"))  # taken over by another user
    assert checks.version > first
    assert checks.keeps("s", "a") is False  # eve has no read rule at all


def test_the_cache_is_bounded() -> None:
    acl = CountingAcl(ACL)
    checks = ReadChecks(acl.bus, cache_size=4)
    checks.identify("s", client("a"))
    for number in range(10):
        checks.keeps("s", f"t/{number}")
    assert checks.keeps("s", "t/0") is True
    assert acl.asked["a", "t/0"] == 2  # forgotten when the cache was emptied
    checks.keeps("s", "x" * 600)
    checks.keeps("s", "x" * 600)
    assert acl.asked["a", "x" * 600] == 2  # long names are never kept


# -- ReadablePlans --------------------------------------------------------------------------


def routes_of(*subscriptions: tuple[str, str]) -> RouteTable[str, Route]:
    """(filter, client id) pairs; client X's session is "s-X"."""
    table: RouteTable[str, Route] = RouteTable()
    for topic_filter, client_id in subscriptions:
        table.add(topic_filter, client_id, Route(f"s-{client_id}", SubscriptionOptions(0)))
    return table


def test_a_fan_out_to_100_subscribers_costs_one_decision_per_client_and_topic() -> None:
    acl = CountingAcl(ACL + "user carol\ntopic read #\n")
    checks = ReadChecks(acl.bus)
    routes = routes_of(*((("#" if n % 2 else "+/+"), f"c{n}") for n in range(100)))
    for n in range(100):  # half anonymous (checked), half carol (no deny rule: not checked)
        checks.identify(f"s-c{n}", client(f"c{n}", None if n % 2 else "carol"))
    plans = ReadablePlans(FanOut(routes), checks)
    for _ in range(10):
        assert {t.client_id for t in plans.plan("test/nosubscribe")} == {
            f"c{n}" for n in range(100) if n % 2 == 0
        }
        assert len(plans.plan("test/other")) == 100
    assert sum(acl.asked.values()) == 100  # 50 checked clients x 2 topics, once each
    plain = FanOut(routes).plan("test/other")
    assert plans.plan("test/other") == plain


def test_plans_follow_route_changes_and_reloads() -> None:
    acl = CountingAcl("topic readwrite #\n")
    checks = ReadChecks(acl.bus)
    routes = routes_of(("#", "a"))
    checks.identify("s-a", client("a"))
    plans = ReadablePlans(FanOut(routes), checks)
    assert [t.client_id for t in plans.plan("test/nosubscribe")] == ["a"]
    acl.table = parse_acl(ACL, "acl")
    checks.reset()  # the SIGHUP that adds the deny line
    assert plans.plan("test/nosubscribe") == ()
    routes.add("test/#", "b", Route("s-b", SubscriptionOptions(0)))
    checks.identify("s-b", client("b"))
    assert plans.plan("test/nosubscribe") == ()
    assert [t.client_id for t in plans.plan("test/x")] == ["a", "b"]


LEVEL = st.sampled_from(["a", "b", "+"])


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = [draw(st.sampled_from(["a", "b", "+", "$s"])), *draw(st.lists(LEVEL, max_size=2))]
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels) if levels != ["#"] else "#"


NAMES = [
    "/".join(levels)
    for depth in range(1, 4)
    for levels in itertools.product(["a", "b", "$s"], *[["a", "b"]] * (depth - 1))
]
USERS = st.sampled_from(["u0", "u1", None])


@settings(max_examples=120, deadline=None)
@given(
    grants=st.lists(st.tuples(USERS, filters()), max_size=4),
    denies=st.lists(st.tuples(USERS, filters()), max_size=3),
    subscribers=st.lists(st.tuples(USERS, filters()), min_size=1, max_size=6),
    topics=st.lists(st.sampled_from(NAMES), min_size=1, max_size=12),
    shuffle=st.randoms(use_true_random=False),
)
def test_each_delivery_is_what_the_acl_evaluated_directly_allows(
    grants: list[tuple[str | None, str]],
    denies: list[tuple[str | None, str]],
    subscribers: list[tuple[str | None, str]],
    topics: list[str],
    shuffle: Any,
) -> None:
    blocks: dict[str | None, list[str]] = {}
    for user, topic_filter in grants:
        blocks.setdefault(user, []).append(f"topic read {topic_filter}")
    for user, topic_filter in denies:
        blocks.setdefault(user, []).append(f"topic deny {topic_filter}")
    text = "\n".join(blocks.pop(None, []))
    for user, lines in blocks.items():
        text += f"\nuser {user}\n" + "\n".join(lines)
    acl = CountingAcl(text + "\n")
    checks = ReadChecks(acl.bus)
    routes: RouteTable[str, Route] = RouteTable()
    clients = {}
    for number, (user, topic_filter) in enumerate(subscribers):
        who = client(f"c{number}", user)
        # Only granted subscriptions become routes, as the broker's SUBSCRIBE does.
        if acl.table.decide(who, SUB, topic_filter) is Decision.ALLOW:
            routes.add(topic_filter, who.client_id, Route(f"s-{number}", SubscriptionOptions(0)))
            clients[who.client_id] = (who, topic_filter)
        checks.identify(f"s-{number}", who)
    plans = ReadablePlans(FanOut(routes), checks)
    stream = topics * 3
    shuffle.shuffle(stream)
    for topic in stream:
        delivered = {target.client_id for target in plans.plan(topic)}
        expected = {
            client_id
            for client_id, (who, topic_filter) in clients.items()
            if matches(topic_filter, topic)
            and any(matches(f, topic) for u, f in grants if u == who.username)
            and not any(matches(f, topic) for u, f in denies if u == who.username)
        }
        assert delivered == expected, (topic, text)
    assert all(count == 1 for count in acl.asked.values())
