"""The router's structures against the reference matcher `mqtt.topics.matches` (Hypothesis).

Filters and names are drawn from a small alphabet of levels, including empty levels and a
`$`-prefixed level (the `$` rule [MQTT-4.7.2-1] only bites at the first level), so that
matches are frequent and every wildcard shape occurs.
"""

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from mqtt.topics import matches
from router.retained_index import RetainedIndex
from router.route_table import RouteTable
from router.topic_trie import TopicTrie

NAME_LEVELS = st.sampled_from(["a", "b", "", "$s"])
names = st.lists(NAME_LEVELS, min_size=1, max_size=4).map("/".join).filter(bool)
filters = st.builds(
    lambda levels, multi: "/".join([*levels, "#"] if multi else levels),
    st.lists(st.sampled_from(["a", "b", "", "$s", "+"]), min_size=0, max_size=4),
    st.booleans(),
).filter(bool)
subscribers = st.sampled_from(["s1", "s2", "s3"])

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None)


@PROPERTY_SETTINGS
@given(
    stored=st.sets(filters, max_size=12),
    probes=st.lists(names, min_size=1, max_size=8),
    removed=st.data(),
)
def test_trie_match_equals_oracle_before_and_after_removals(
    stored: set[str], probes: list[str], removed: st.DataObject
) -> None:
    trie = TopicTrie()
    for topic_filter in stored:
        trie.add(topic_filter)
    for name in probes:
        matched = trie.match(name)
        assert len(matched) == len(set(matched))
        assert set(matched) == {f for f in stored if matches(f, name)}
    to_remove = removed.draw(st.sets(st.sampled_from(sorted(stored)))) if stored else set()
    for topic_filter in to_remove:
        trie.remove(topic_filter)
    remaining = stored - to_remove
    assert len(trie) == len(remaining)
    assert all(topic_filter in trie for topic_filter in remaining)
    assert not any(topic_filter in trie for topic_filter in to_remove)
    for name in probes:
        assert set(trie.match(name)) == {f for f in remaining if matches(f, name)}


route_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), filters, subscribers, st.integers(0, 3)),
        st.tuples(st.just("remove"), filters, subscribers),
        st.tuples(st.just("match"), names),
    ),
    max_size=40,
)


def snapshot(matched: list[tuple[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    return {topic_filter: dict(routes) for topic_filter, routes in matched}


@PROPERTY_SETTINGS
@given(ops=route_ops)
def test_route_table_match_equals_oracle_with_interleaved_changes(ops: list[tuple]) -> None:
    table: RouteTable[str, int] = RouteTable()
    model: dict[str, dict[str, int]] = {}
    handed_out: list[tuple[list[tuple[str, Mapping[str, int]]], dict[str, dict[str, int]]]] = []
    for op in ops:
        if op[0] == "add":
            _, topic_filter, subscriber, value = op
            is_new = subscriber not in model.get(topic_filter, {})
            assert table.add(topic_filter, subscriber, value) is is_new
            model.setdefault(topic_filter, {})[subscriber] = value
        elif op[0] == "remove":
            _, topic_filter, subscriber = op
            was_there = subscriber in model.get(topic_filter, {})
            assert table.remove(topic_filter, subscriber) is was_there
            if was_there:
                del model[topic_filter][subscriber]
                if not model[topic_filter]:
                    del model[topic_filter]
        else:
            name = op[1]
            matched = table.match(name)
            expected = {f: dict(routes) for f, routes in model.items() if matches(f, name)}
            assert len(matched) == len(expected)
            assert snapshot(matched) == expected
            handed_out.append((matched, expected))
        assert len(table) == sum(len(routes) for routes in model.values())
        assert table.filter_count == len(model)
    for matched, expected in handed_out:
        assert snapshot(matched) == expected  # results are never changed afterwards


retained_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), names, st.integers(0, 3)),
        st.tuples(st.just("delete"), names),
    ),
    max_size=30,
)


@PROPERTY_SETTINGS
@given(ops=retained_ops, probes=st.lists(filters, min_size=1, max_size=8))
def test_retained_index_match_equals_oracle(ops: list[tuple], probes: list[str]) -> None:
    index: RetainedIndex[int] = RetainedIndex()
    model: dict[str, int] = {}
    for op in ops:
        if op[0] == "set":
            index.set(op[1], op[2])
            model[op[1]] = op[2]
        else:
            assert index.delete(op[1]) is (op[1] in model)
            model.pop(op[1], None)
    assert len(index) == len(model)
    assert sorted(index.items()) == sorted(model.items())
    for topic_filter in probes:
        matched = index.match(topic_filter)
        assert len(matched) == len(set(matched))
        assert set(matched) == {(n, v) for n, v in model.items() if matches(topic_filter, n)}


retained_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), names),
        st.tuples(st.just("delete"), names),
        st.tuples(
            st.just("page"),
            st.one_of(st.none(), filters, names),
            st.integers(0, 6),
            st.integers(0, 8),
        ),
    ),
    max_size=40,
)


@PROPERTY_SETTINGS
@given(ops=retained_ops)
def test_retained_pages_equal_the_sorted_oracle(ops: list[tuple]) -> None:
    """`page` (the admin API's listing) is the oracle's sorted matches, sliced, whatever
    the sets and deletes before it (the sorted list is brought up to date lazily)."""
    index: RetainedIndex[str] = RetainedIndex()
    stored: dict[str, str] = {}
    for op in ops:
        if op[0] == "set":
            index.set(op[1], f"v-{op[1]}")
            stored[op[1]] = f"v-{op[1]}"
        elif op[0] == "delete":
            assert index.delete(op[1]) == (stored.pop(op[1], None) is not None)
        else:
            _, topic_filter, start, size = op
            expected = sorted(
                name for name in stored if topic_filter is None or matches(topic_filter, name)
            )
            count, items = index.page(topic_filter, start, start + size)
            assert count == len(expected)
            assert items == [(name, stored[name]) for name in expected[start : start + size]]


@PROPERTY_SETTINGS
@given(
    before=st.sets(names, max_size=40),
    churn=st.lists(st.tuples(st.booleans(), names), max_size=60),
)
def test_retained_pages_after_bulk_and_single_changes(
    before: set[str], churn: list[tuple[bool, str]]
) -> None:
    """Both merge paths: many names noted at once (a re-sort) and a few (bisection)."""
    index: RetainedIndex[int] = RetainedIndex()
    for name in before:
        index.set(name, 0)
    assert index.page(None, 0, 100) == (len(before), [(n, 0) for n in sorted(before)])
    stored = set(before)
    for add, name in churn:
        if add:
            index.set(name, 0)
            stored.add(name)
        else:
            index.delete(name)
            stored.discard(name)
        assert index.page("#", 0, 1000)[1] == [
            (n, 0) for n in sorted(stored) if not n.startswith("$")
        ]
