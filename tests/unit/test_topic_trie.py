"""TopicTrie: the wildcard filter set of the router (MQTT 4.7 matching, pruning, errors)."""

import pytest

from mqtt.topics import TopicError
from router.topic_trie import TopicTrie

SPEC_FILTERS = [
    "sport/tennis/player1/#",
    "sport/#",
    "#",
    "sport/tennis/+",
    "sport/+",
    "+/+",
    "/+",
    "+",
    "+/monitor/Clients",
    "$SYS/#",
    "$SYS/monitor/+",
    "a//b",
    "a/+/b",
    "a/#",
]


def make_trie(filters: list[str]) -> TopicTrie:
    trie = TopicTrie()
    for topic_filter in filters:
        trie.add(topic_filter)
    return trie


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # [MQTT-4.7.1-2]: "#" matches the parent level and any number of child levels
        ("sport/tennis/player1", {"sport/tennis/player1/#", "sport/#", "#", "sport/tennis/+"}),
        ("sport/tennis/player1/ranking", {"sport/tennis/player1/#", "sport/#", "#"}),
        ("sport/tennis/player1/score/wimbledon", {"sport/tennis/player1/#", "sport/#", "#"}),
        ("sport", {"sport/#", "#", "+"}),
        # [MQTT-4.7.1-3]: "+" matches exactly one level, which may be empty
        ("sport/", {"sport/#", "#", "sport/+", "+/+"}),
        ("/finance", {"#", "+/+", "/+"}),
        # [MQTT-4.7.2-1]: names starting with "$" are not matched by a leading "+" or "#"
        ("$SYS/monitor/Clients", {"$SYS/#", "$SYS/monitor/+"}),
        ("$SYS", {"$SYS/#"}),
        ("a/$b", {"#", "+/+", "a/#"}),  # "$" only counts at the first level
        # empty levels are levels
        ("a//b", {"#", "a//b", "a/+/b", "a/#"}),
        ("a/b", {"#", "+/+", "a/#"}),
        ("a", {"#", "+", "a/#"}),
        ("x/y/z", {"#"}),
    ],
)
def test_match_spec_examples(name: str, expected: set[str]) -> None:
    matched = make_trie(SPEC_FILTERS).match(name)
    assert sorted(matched) == sorted(expected)  # also: no filter reported twice


def test_dollar_rule_applies_only_at_first_level_mqtt_4_7_2_1() -> None:
    trie = make_trie(["#", "+/+", "a/+", "a/#"])
    assert sorted(trie.match("a/$SYS")) == ["#", "+/+", "a/#", "a/+"]
    assert trie.match("$SYS/a") == []


def test_multi_level_wildcard_matches_parent_mqtt_4_7_1_2() -> None:
    trie = make_trie(["a/#"])
    assert trie.match("a") == ["a/#"]
    assert trie.match("a/b/c") == ["a/#"]
    assert trie.match("ab") == []


def test_no_filters_matches_nothing() -> None:
    assert TopicTrie().match("a/b") == []


def test_len_and_contains() -> None:
    trie = make_trie(["a/+", "a/#", "#", "a/+/c"])
    assert len(trie) == 4
    assert "a/+" in trie
    assert "a/#" in trie
    assert "a" not in trie
    assert "a/+/c/#" not in trie
    assert "+" not in trie
    assert 42 not in trie


def test_add_is_idempotent() -> None:
    trie = make_trie(["a/+", "a/+", "#", "#"])
    assert len(trie) == 2
    assert sorted(trie.match("a/b")) == ["#", "a/+"]


@pytest.mark.parametrize("bad", ["a/#/b", "a#", "a+", "+a/b", "#/", ""])
def test_add_rejects_invalid_filters_mqtt_4_7_1_2_and_3(bad: str) -> None:
    trie = TopicTrie()
    with pytest.raises(TopicError):
        trie.add(bad)
    assert len(trie) == 0


def test_remove_keeps_longer_and_shorter_filters() -> None:
    trie = make_trie(["a/+", "a/+/c", "a/#", "a"])
    trie.remove("a/+")
    assert sorted(trie.match("a/b/c")) == ["a/#", "a/+/c"]
    assert trie.match("a/b") == ["a/#"]
    trie.remove("a/#")
    assert trie.match("a/b/c") == ["a/+/c"]
    assert trie.match("a") == ["a"]
    assert len(trie) == 2


def test_remove_prunes_every_node() -> None:
    filters = ["a/+/c", "a/+", "+/#", "#", "a//b", "$SYS/+"]
    trie = make_trie(filters)
    for topic_filter in filters:
        trie.remove(topic_filter)
    assert len(trie) == 0
    assert trie._root.is_empty()  # white-box: nothing left behind after the last removal


@pytest.mark.parametrize("absent", ["a", "a/#", "a/+/b", "b/+", "+"])
def test_remove_absent_filter_raises_key_error(absent: str) -> None:
    trie = make_trie(["a/+"])
    with pytest.raises(KeyError):
        trie.remove(absent)
    assert trie.match("a/b") == ["a/+"]
