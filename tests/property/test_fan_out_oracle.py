"""FanOut against a model of the subscriptions (Hypothesis): with any cache size and any
interleaving of subscribes, unsubscribes and publishes, the plan of a topic is the merge of
the client's matching subscriptions [MQTT-3.3.5-1], computed from scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.session_state import SubscriptionOptions
from mqtt.topics import matches
from router.fan_out import FanOut, Route
from router.route_table import RouteTable

NAMES = st.lists(st.sampled_from(["a", "b", "$s"]), min_size=1, max_size=3).map("/".join)
FILTERS = st.builds(
    lambda levels, multi: "/".join([*levels, "#"] if multi else levels),
    st.lists(st.sampled_from(["a", "b", "$s", "+"]), min_size=0, max_size=3),
    st.booleans(),
).filter(bool)
CLIENTS = st.sampled_from(["c1", "c2", "c3"])
OPTIONS = st.builds(
    SubscriptionOptions,
    qos=st.integers(0, 2),
    no_local=st.booleans(),
    retain_as_published=st.booleans(),
    subscription_id=st.none() | st.integers(1, 5),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), FILTERS, CLIENTS, OPTIONS),
        st.tuples(st.just("unsubscribe"), FILTERS, CLIENTS),
        st.tuples(st.just("publish"), NAMES),
    ),
    max_size=40,
)

Merged = tuple[int, int, bool, list[int]]


def expected_plan(model: dict[tuple[str, str], SubscriptionOptions], name: str) -> dict:
    """client id -> (qos, own qos, retain as published, sorted subscription ids)."""
    merged: dict[str, Merged] = {}
    for (topic_filter, client_id), options in model.items():
        if not matches(topic_filter, name):
            continue
        qos, own_qos, rap, ids = merged.get(client_id, (-1, -1, False, []))
        merged[client_id] = (
            max(qos, options.qos),
            own_qos if options.no_local else max(own_qos, options.qos),
            rap or options.retain_as_published,
            sorted([*ids, *([options.subscription_id] if options.subscription_id else [])]),
        )
    return merged


@settings(max_examples=200, deadline=None)
@given(ops=OPS, cache_size=st.integers(1, 3))
def test_plan_equals_the_merge_of_the_matching_subscriptions(
    ops: list[tuple], cache_size: int
) -> None:
    table: RouteTable[str, Route] = RouteTable()
    fan_out = FanOut(table, cache_size=cache_size)
    model: dict[tuple[str, str], SubscriptionOptions] = {}
    for op in ops:
        if op[0] == "subscribe":
            _, topic_filter, client_id, options = op
            table.add(topic_filter, client_id, Route(client_id, options))
            model[(topic_filter, client_id)] = options
        elif op[0] == "unsubscribe":
            _, topic_filter, client_id = op
            table.remove(topic_filter, client_id)
            model.pop((topic_filter, client_id), None)
        else:
            plan = fan_out.plan(op[1])
            assert len({target.client_id for target in plan}) == len(plan)  # once per client
            assert all(target.session == target.client_id for target in plan)
            actual = {
                t.client_id: (t.qos, t.own_qos, t.retain_as_published, sorted(t.subscription_ids))
                for t in plan
            }
            assert actual == expected_plan(model, op[1])
