"""FanOut: one target per subscribing client, merged over overlapping subscriptions
[MQTT-3.3.5-1], and the plan cache in front of the route table (bound, invalidation)."""

from __future__ import annotations

import pytest

from core.session_state import SubscriptionOptions
from router.fan_out import MAX_CACHED_NAME_LENGTH, FanOut, Route, Target, make_plan
from router.route_table import RouteTable

Sub = SubscriptionOptions


def table_of(*routes: tuple[str, str, SubscriptionOptions]) -> RouteTable[str, Route]:
    """A route table of (filter, client id, options); client X's session is "session-X"."""
    table: RouteTable[str, Route] = RouteTable()
    for topic_filter, client_id, options in routes:
        table.add(topic_filter, client_id, Route(f"session-{client_id}", options))
    return table


def plan_of(table: RouteTable[str, Route], topic: str) -> dict[str, Target]:
    return {target.client_id: target for target in FanOut(table).plan(topic)}


# (subscriptions of client "c", expected qos, own_qos, retain_as_published, subscription ids)
MERGES = [
    pytest.param([("a/b", Sub(1))], 1, 1, False, (), id="one subscription"),
    # Overlapping subscriptions: once, at the highest granted QoS [MQTT-3.3.5-1].
    pytest.param([("a/+", Sub(0)), ("a/#", Sub(2)), ("a/b", Sub(1))], 2, 2, False, (), id="max"),
    # No Local leaves the subscription out for the client's own messages [MQTT-3.8.3-3].
    pytest.param([("a/b", Sub(2, no_local=True))], 2, -1, False, (), id="no local"),
    pytest.param(
        [("a/b", Sub(2, no_local=True)), ("a/#", Sub(1))], 2, 1, False, (), id="no local + other"
    ),
    # Retain As Published on any matching subscription keeps RETAIN [MQTT-3.3.1-12].
    pytest.param(
        [("a/b", Sub(0)), ("a/+", Sub(0, retain_as_published=True))], 0, 0, True, (), id="rap"
    ),
    # Every matching subscription's identifier goes with the one PUBLISH (5.0 3.3.4).
    pytest.param(
        [("a/b", Sub(1, subscription_id=7)), ("a/+", Sub(0)), ("#", Sub(0, subscription_id=9))],
        1,
        1,
        False,
        (7, 9),
        id="subscription ids",
    ),
]


@pytest.mark.parametrize(("subscriptions", "qos", "own_qos", "rap", "ids"), MERGES)
def test_overlapping_subscriptions_merge_into_one_target(
    subscriptions: list[tuple[str, SubscriptionOptions]],
    qos: int,
    own_qos: int,
    rap: bool,
    ids: tuple[int, ...],
) -> None:
    table = table_of(*((topic_filter, "c", options) for topic_filter, options in subscriptions))
    (target,) = FanOut(table).plan("a/b")
    assert (target.client_id, target.session) == ("c", "session-c")
    assert (target.qos, target.own_qos, target.retain_as_published) == (qos, own_qos, rap)
    assert sorted(target.subscription_ids) == list(ids)


def test_each_client_is_one_target_with_its_own_options() -> None:
    table = table_of(
        ("a/+", "c1", Sub(1)),
        ("a/b", "c1", Sub(0, subscription_id=3)),
        ("a/#", "c2", Sub(2, no_local=True)),
        ("b/#", "c3", Sub(2)),
    )
    plan = plan_of(table, "a/b")
    assert set(plan) == {"c1", "c2"}
    assert plan["c1"] == Target("c1", "session-c1", 1, 1, False, (3,), False)
    assert plan["c2"] == Target("c2", "session-c2", 2, -1, False, (), False)


def test_persistent_flag_comes_from_the_route() -> None:
    table: RouteTable[str, Route] = RouteTable()
    table.add("a/b", "kept", Route("s-kept", Sub(1), persistent=True))
    table.add("a/b", "clean", Route("s-clean", Sub(1)))
    plan = plan_of(table, "a/b")
    assert (plan["kept"].persistent, plan["clean"].persistent) == (True, False)


def test_no_match_is_an_empty_plan() -> None:
    assert FanOut(table_of(("a/b", "c", Sub(1)))).plan("a/c") == ()
    assert make_plan([]) == ()


def test_plan_follows_subscribes_and_unsubscribes() -> None:
    table = table_of(("a/+", "c1", Sub(1)))
    fan_out = FanOut(table)
    assert [t.client_id for t in fan_out.plan("a/b")] == ["c1"]
    table.add("a/b", "c2", Route("session-c2", Sub(0)))
    assert {t.client_id for t in fan_out.plan("a/b")} == {"c1", "c2"}
    table.add("a/#", "c1", Route("session-c1", Sub(2)))  # overlaps c1's a/+
    assert {t.client_id: t.qos for t in fan_out.plan("a/b")} == {"c1": 2, "c2": 0}
    table.remove("a/+", "c1")
    table.remove("a/b", "c2")
    assert {t.client_id: t.qos for t in fan_out.plan("a/b")} == {"c1": 2}
    table.remove("a/#", "c1")
    assert fan_out.plan("a/b") == ()


def test_a_plan_handed_out_is_not_changed_by_later_routes() -> None:
    table = table_of(("a/b", "c1", Sub(1)))
    fan_out = FanOut(table)
    first = fan_out.plan("a/b")
    table.add("a/b", "c2", Route("session-c2", Sub(0)))
    table.remove("a/b", "c1")
    assert [t.client_id for t in first] == ["c1"]
    assert [t.client_id for t in fan_out.plan("a/b")] == ["c2"]


def test_a_cached_plan_is_reused_until_the_table_changes() -> None:
    table = table_of(("a/+", "c1", Sub(1)))
    fan_out = FanOut(table)
    assert fan_out.plan("a/b") is fan_out.plan("a/b")
    before = fan_out.plan("a/b")
    table.add("x", "c9", Route("session-c9", Sub(0)))  # any change invalidates
    assert fan_out.plan("a/b") is not before
    assert fan_out.plan("a/b") == before


def test_cache_stays_bounded_and_correct() -> None:
    table = table_of(("t/+", "s", Sub(0)))
    fan_out = FanOut(table, cache_size=4)
    for round_ in range(3):
        for index in range(10):
            assert [t.client_id for t in fan_out.plan(f"t/{index}")] == ["s"], round_
            assert len(fan_out._plans) <= 4  # white-box: the bound itself


def test_long_names_are_planned_but_not_cached() -> None:
    fan_out = FanOut(table_of(("#", "s", Sub(0))))
    long_name = "x" * (MAX_CACHED_NAME_LENGTH + 1)
    assert [t.client_id for t in fan_out.plan(long_name)] == ["s"]
    assert long_name not in fan_out._plans  # white-box: memory bound for hostile names


def test_cache_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="cache_size"):
        FanOut(RouteTable(), cache_size=0)
