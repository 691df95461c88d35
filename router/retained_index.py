"""RetainedIndex: retained messages by topic name, searchable by topic filter.

The retainer keeps one value (the retained message) per topic name. On SUBSCRIBE it needs
every stored topic the new filter matches, without scanning all of them: the names are also
kept in a trie of levels, which `match` walks with the filter's levels. A literal level
follows one child, `+` follows every child, `#` takes the whole subtree including the node
itself (`a/#` matches `a` [MQTT-4.7.1-2]). At the first level `+` and `#` skip names starting
with `$` [MQTT-4.7.2-1]. A filter without wildcards is a dict lookup.

Invariant: a name is in `_values` exactly when its trie node has `topic` set, and every
trie node other than the root leads to at least one stored name (empty nodes are pruned).
Semantics are those of `mqtt.topics.matches`, against which the property tests check it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from mqtt.topics import is_wildcard

ValueT = TypeVar("ValueT")


class _NameNode:
    __slots__ = ("children", "topic")

    def __init__(self) -> None:
        self.children: dict[str, _NameNode] = {}
        self.topic: str | None = None


class RetainedIndex(Generic[ValueT]):
    """Topic name -> value, plus `match(topic_filter)` over the stored names."""

    __slots__ = ("_root", "_values")

    def __init__(self) -> None:
        self._values: dict[str, ValueT] = {}
        self._root = _NameNode()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, topic: str) -> ValueT | None:
        return self._values.get(topic)

    def items(self) -> list[tuple[str, ValueT]]:
        """A snapshot of every (topic name, value) stored."""
        return list(self._values.items())

    def set(self, topic: str, value: ValueT) -> None:
        """Store `value` under the topic name `topic`, replacing any earlier one."""
        if topic not in self._values:
            node = self._root
            for level in topic.split("/"):
                child = node.children.get(level)
                if child is None:
                    child = node.children[level] = _NameNode()
                node = child
            node.topic = topic
        self._values[topic] = value

    def delete(self, topic: str) -> bool:
        """Forget `topic`; False if nothing was stored under it."""
        if topic not in self._values:
            return False
        del self._values[topic]
        path: list[tuple[_NameNode, str]] = []
        node = self._root
        for level in topic.split("/"):
            path.append((node, level))
            node = node.children[level]
        node.topic = None
        for parent, level in reversed(path):
            child = parent.children[level]
            if child.children or child.topic is not None:
                break
            del parent.children[level]
        return True

    def match(self, topic_filter: str) -> list[tuple[str, ValueT]]:
        """(topic name, value) for every stored name the valid `topic_filter` matches."""
        if not is_wildcard(topic_filter):
            if topic_filter in self._values:
                return [(topic_filter, self._values[topic_filter])]
            return []
        values = self._values
        return [(topic, values[topic]) for topic in self._matching_names(topic_filter)]

    def _matching_names(self, topic_filter: str) -> list[str]:
        nodes = [self._root]
        for depth, level in enumerate(topic_filter.split("/")):
            at_root = depth == 0
            if level == "#":
                return [topic for node in nodes for topic in _subtree_names(node, at_root)]
            next_nodes: list[_NameNode] = []
            for node in nodes:
                if level == "+":
                    next_nodes.extend(
                        child
                        for name_level, child in node.children.items()
                        if not (at_root and name_level.startswith("$"))  # [MQTT-4.7.2-1]
                    )
                else:
                    child = node.children.get(level)
                    if child is not None:
                        next_nodes.append(child)
            if not next_nodes:
                return []
            nodes = next_nodes
        return [node.topic for node in nodes if node.topic is not None]


def _subtree_names(node: _NameNode, at_root: bool) -> list[str]:
    """Every stored name at or below `node`; at the root, none starting with `$`."""
    names: list[str] = []
    stack = [
        child
        for name_level, child in node.children.items()
        if not (at_root and name_level.startswith("$"))  # [MQTT-4.7.2-1]
    ]
    if node.topic is not None:
        names.append(node.topic)
    while stack:
        current = stack.pop()
        if current.topic is not None:
            names.append(current.topic)
        stack.extend(current.children.values())
    return names
