"""Topic name/filter syntax and the reference matcher (MQTT 4.7)."""

import pytest

from mqtt.topics import TopicError, matches, validate_topic_filter, validate_topic_name


@pytest.mark.parametrize(
    ("topic_filter", "name", "expected"),
    [
        ("sport/tennis/player1/#", "sport/tennis/player1", True),  # [MQTT-4.7.1-2] parent
        ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
        ("sport/#", "sport", True),
        ("#", "sport/tennis", True),
        ("sport/tennis/+", "sport/tennis/player1", True),
        ("sport/tennis/+", "sport/tennis/player1/ranking", False),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),  # empty level
        ("+/+", "/finance", True),
        ("/+", "/finance", True),
        ("+", "/finance", False),
        ("#", "$SYS/broker", False),  # [MQTT-4.7.2-1]
        ("+/monitor/Clients", "$SYS/monitor/Clients", False),  # [MQTT-4.7.2-1]
        ("$SYS/#", "$SYS/monitor/Clients", True),
        ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
        ("a/b", "a/b", True),
        ("a/b", "a/b/c", False),
    ],
)
def test_matches_spec_examples(topic_filter: str, name: str, expected: bool) -> None:
    assert matches(topic_filter, name) is expected


@pytest.mark.parametrize("bad", ["a/#/b", "a#", "a+", "+a/b", "#/", ""])
def test_invalid_filters_rejected_mqtt_4_7_1(bad: str) -> None:
    with pytest.raises(TopicError):
        validate_topic_filter(bad)


@pytest.mark.parametrize("good", ["#", "+", "a/+/b/#", "/", "+/+", "$SYS/#"])
def test_valid_filters_accepted(good: str) -> None:
    validate_topic_filter(good)


@pytest.mark.parametrize("bad", ["", "a/+", "a/#", "#"])
def test_invalid_topic_names_rejected_mqtt_3_3_2_2(bad: str) -> None:
    with pytest.raises(TopicError):
        validate_topic_name(bad)
