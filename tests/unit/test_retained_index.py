"""RetainedIndex: retained messages by topic name, found by topic filter (MQTT 4.7)."""

import pytest

from router.retained_index import RetainedIndex

STORED = [
    "sport/tennis/player1",
    "sport/tennis/player1/ranking",
    "sport/tennis/player2",
    "sport",
    "sport/",
    "/finance",
    "a//b",
    "$SYS/broker/uptime",
    "$SYS",
    "a/$x",
]


def make_index() -> RetainedIndex[str]:
    index: RetainedIndex[str] = RetainedIndex()
    for topic in STORED:
        index.set(topic, f"payload of {topic}")
    return index


@pytest.mark.parametrize(
    ("topic_filter", "expected"),
    [
        # [MQTT-4.7.1-2]: "#" takes the parent level and every level below
        ("sport/tennis/player1/#", {"sport/tennis/player1", "sport/tennis/player1/ranking"}),
        ("sport/#", {n for n in STORED if n.startswith("sport")}),
        # [MQTT-4.7.1-3]: "+" takes exactly one level, possibly empty
        ("sport/tennis/+", {"sport/tennis/player1", "sport/tennis/player2"}),
        ("sport/+", {"sport/"}),
        ("+/+", {"sport/", "/finance", "a/$x"}),
        ("/+", {"/finance"}),
        ("+", {"sport"}),
        ("a/+/b", {"a//b"}),
        ("a/+", {"a/$x"}),  # "$" only counts at the first level
        # [MQTT-4.7.2-1]: leading "+"/"#" never return "$" topics
        ("#", {n for n in STORED if not n.startswith("$")}),
        ("+/broker/uptime", set()),
        ("$SYS/#", {"$SYS/broker/uptime", "$SYS"}),
        ("$SYS/+/uptime", {"$SYS/broker/uptime"}),
        # exact filters are plain lookups
        ("sport/tennis/player2", {"sport/tennis/player2"}),
        ("sport/tennis", set()),
        ("nothing/#", set()),
    ],
)
def test_match_spec_examples(topic_filter: str, expected: set[str]) -> None:
    matched = make_index().match(topic_filter)
    assert sorted(matched) == sorted((topic, f"payload of {topic}") for topic in expected)


def test_set_get_replace_delete() -> None:
    index: RetainedIndex[int] = RetainedIndex()
    index.set("a/b", 1)
    index.set("a/b", 2)
    index.set("a", 3)
    assert index.get("a/b") == 2
    assert len(index) == 2
    assert sorted(index.items()) == [("a", 3), ("a/b", 2)]
    assert index.delete("a/b") is True
    assert index.delete("a/b") is False
    assert index.get("a/b") is None
    assert index.match("a/#") == [("a", 3)]


def test_delete_of_prefix_keeps_longer_names() -> None:
    index: RetainedIndex[int] = RetainedIndex()
    index.set("a", 1)
    index.set("a/b/c", 2)
    assert index.delete("a") is True
    assert index.match("#") == [("a/b/c", 2)]
    assert index.delete("a/b") is False
    assert index.match("a/+/c") == [("a/b/c", 2)]


def test_delete_prunes_every_node() -> None:
    index = make_index()
    for topic in STORED:
        assert index.delete(topic) is True
    assert len(index) == 0
    assert index.match("#") == []
    assert index._root.children == {}  # white-box: nothing left behind


def test_none_values_are_stored_and_deleted() -> None:
    index: RetainedIndex[None] = RetainedIndex()
    index.set("a", None)
    assert index.match("+") == [("a", None)]
    assert index.match("a") == [("a", None)]
    assert index.delete("a") is True
    assert len(index) == 0


def test_items_is_a_snapshot() -> None:
    index: RetainedIndex[int] = RetainedIndex()
    index.set("a", 1)
    items = index.items()
    index.set("b", 2)
    assert items == [("a", 1)]
