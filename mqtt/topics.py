"""Topic names and topic filters: the syntax rules of MQTT 4.7 and the reference matcher.

This module is the single place that says what a valid topic name or filter is and what
"a filter matches a name" means. The codec validates with it, the router's trie is checked
against `matches` by property tests, and the ACL plugin reuses the router's trie.

Rules (MQTT 3.1.1 / 5.0 section 4.7):
- Both are UTF-8 strings of at least one character [MQTT-4.7.3-1]; levels are separated by
  `/` and may be empty.
- A topic name never contains `+` or `#` [MQTT-3.3.2-2].
- In a filter `#` occupies a whole level and is the last one [MQTT-4.7.1-2]; `+` occupies a
  whole level [MQTT-4.7.1-3].
- A filter starting with `+` or `#` does not match names starting with `$` [MQTT-4.7.2-1].
- `a/#` also matches `a` (the parent level) [MQTT-4.7.1-2].
"""

from __future__ import annotations


class TopicError(ValueError):
    """A topic name or topic filter breaks a syntax rule; the message names the rule."""


def validate_topic_name(name: str) -> None:
    """Raise TopicError unless `name` may be used in a PUBLISH."""
    if not name:
        raise TopicError("topic name is empty [MQTT-4.7.3-1]")
    if "+" in name or "#" in name:
        raise TopicError(f"topic name {name!r} contains a wildcard [MQTT-3.3.2-2]")


def validate_topic_filter(topic_filter: str) -> None:
    """Raise TopicError unless `topic_filter` may be used in a SUBSCRIBE/UNSUBSCRIBE."""
    if not topic_filter:
        raise TopicError("topic filter is empty [MQTT-4.7.3-1]")
    if "+" not in topic_filter and "#" not in topic_filter:
        return
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != last):
            raise TopicError(
                f"topic filter {topic_filter!r}: '#' must be a whole level and the last one "
                "[MQTT-4.7.1-2]"
            )
        if "+" in level and level != "+":
            raise TopicError(
                f"topic filter {topic_filter!r}: '+' must occupy a whole level [MQTT-4.7.1-3]"
            )


def is_wildcard(topic_filter: str) -> bool:
    return "+" in topic_filter or "#" in topic_filter


def matches(topic_filter: str, name: str) -> bool:
    """True if the valid filter `topic_filter` matches the valid topic name `name`.

    A plain level-by-level reference implementation: simple rather than fast. The router uses
    a trie with the same semantics (checked against this function by property tests).
    """
    if name.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False  # [MQTT-4.7.2-1]
    filter_levels = topic_filter.split("/")
    name_levels = name.split("/")
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True  # matches the parent level too: "a/#" matches "a" [MQTT-4.7.1-2]
        if index >= len(name_levels):
            return False
        if level != "+" and level != name_levels[index]:
            return False
    return len(filter_levels) == len(name_levels)
