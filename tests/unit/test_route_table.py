"""RouteTable: routes by filter, exact + wildcard matching, snapshots of match results."""

from collections.abc import Mapping

import pytest

from mqtt.topics import TopicError
from router.route_table import RouteTable


def as_sets(matched: list[tuple[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    return {topic_filter: dict(subscribers) for topic_filter, subscribers in matched}


def test_add_reports_new_subscriber_and_replaces_value() -> None:
    table: RouteTable[str, int] = RouteTable()
    assert table.add("a/b", "s1", 1) is True
    assert table.add("a/b", "s1", 2) is False
    assert table.add("a/b", "s2", 3) is True
    assert table.subscribers("a/b") == {"s1": 2, "s2": 3}
    assert len(table) == 2
    assert table.filter_count == 1


def test_match_combines_exact_and_wildcard_filters() -> None:
    table: RouteTable[str, int] = RouteTable()
    table.add("sport/tennis/player1", "exact", 0)
    table.add("sport/tennis/player1/#", "parent", 1)  # [MQTT-4.7.1-2]
    table.add("sport/+/player1", "plus", 2)
    table.add("sport/tennis", "other", 3)
    assert as_sets(table.match("sport/tennis/player1")) == {
        "sport/tennis/player1": {"exact": 0},
        "sport/tennis/player1/#": {"parent": 1},
        "sport/+/player1": {"plus": 2},
    }
    assert table.match("sport/golf") == []


def test_dollar_topics_not_matched_by_leading_wildcards_mqtt_4_7_2_1() -> None:
    table: RouteTable[str, int] = RouteTable()
    table.add("#", "all", 0)
    table.add("+/broker/uptime", "plus", 0)
    table.add("$SYS/#", "sys", 0)
    table.add("$SYS/broker/uptime", "exact", 0)
    assert as_sets(table.match("$SYS/broker/uptime")) == {
        "$SYS/#": {"sys": 0},
        "$SYS/broker/uptime": {"exact": 0},
    }


def test_match_sees_subscriber_added_after_a_match() -> None:
    table: RouteTable[str, int] = RouteTable()
    table.add("a/+", "s1", 1)
    assert as_sets(table.match("a/b")) == {"a/+": {"s1": 1}}
    table.add("a/+", "s2", 2)
    assert as_sets(table.match("a/b")) == {"a/+": {"s1": 1, "s2": 2}}
    table.add("a/b", "s3", 3)
    assert as_sets(table.match("a/b")) == {"a/+": {"s1": 1, "s2": 2}, "a/b": {"s3": 3}}
    table.add("a/+", "s1", 10)
    assert as_sets(table.match("a/b"))["a/+"] == {"s1": 10, "s2": 2}


def test_match_sees_subscriber_removed_after_a_match() -> None:
    table: RouteTable[str, int] = RouteTable()
    table.add("a/#", "s1", 1)
    table.add("a/#", "s2", 2)
    table.add("a/b", "s3", 3)
    assert len(table.match("a/b")) == 2
    assert table.remove("a/#", "s1") is True
    assert as_sets(table.match("a/b")) == {"a/#": {"s2": 2}, "a/b": {"s3": 3}}
    assert table.remove("a/b", "s3") is True
    assert as_sets(table.match("a/b")) == {"a/#": {"s2": 2}}
    assert table.remove("a/#", "s2") is True
    assert table.match("a/b") == []
    assert table.filter_count == 0


def test_match_results_are_snapshots_not_changed_by_later_routes() -> None:
    table: RouteTable[str, int] = RouteTable()
    table.add("a/+", "s1", 1)
    table.add("a/b", "s2", 2)
    first = table.match("a/b")
    table.add("a/+", "s3", 3)
    table.remove("a/b", "s2")
    table.add("a/b", "s4", 4)
    table.add("a/+", "s1", 100)
    assert as_sets(first) == {"a/+": {"s1": 1}, "a/b": {"s2": 2}}
    assert as_sets(table.match("a/b")) == {"a/+": {"s1": 100, "s3": 3}, "a/b": {"s4": 4}}


def test_iterating_a_result_survives_a_change_between_items() -> None:
    """A publisher may switch greenlets mid fan-out while the router changes the table."""
    table: RouteTable[str, int] = RouteTable()
    for index in range(3):
        table.add("a/b", f"s{index}", index)
    ((_, subscribers),) = table.match("a/b")
    seen = []
    for subscriber in subscribers:
        seen.append(subscriber)
        table.add("a/b", f"late{len(seen)}", 0)
        table.remove("a/b", "s2")
    assert seen == ["s0", "s1", "s2"]


def test_remove_absent_route_changes_nothing() -> None:
    table: RouteTable[str, int] = RouteTable()
    table.add("a/+", "s1", 1)
    version = table.version
    assert table.remove("a/+", "s2") is False
    assert table.remove("a/b", "s1") is False
    assert table.remove("b/#", "s1") is False
    assert table.version == version
    assert len(table) == 1


def test_version_grows_on_every_change() -> None:
    table: RouteTable[str, int] = RouteTable()
    versions = [table.version]
    table.add("a", "s1", 1)
    versions.append(table.version)
    table.add("a", "s1", 2)
    versions.append(table.version)
    table.remove("a", "s1")
    versions.append(table.version)
    assert versions == sorted(set(versions))


def test_subscribers_is_read_only() -> None:
    table: RouteTable[str, int] = RouteTable()
    table.add("a/+", "s1", 1)
    view = table.subscribers("a/+")
    assert view == {"s1": 1}
    with pytest.raises(TypeError):
        view["intruder"] = 0  # type: ignore[index]
    assert table.subscribers("a/+") == {"s1": 1}
    assert table.subscribers("none") == {}


def test_add_rejects_invalid_filter_without_change_mqtt_4_7_1_2() -> None:
    table: RouteTable[str, int] = RouteTable()
    with pytest.raises(TopicError):
        table.add("a/#/b", "s1", 1)
    assert len(table) == 0
    assert table.version == 0
