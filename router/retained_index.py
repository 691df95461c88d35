"""RetainedIndex: retained messages by topic name, searchable by topic filter.

The retainer keeps one value (the retained message) per topic name. On SUBSCRIBE it needs
every stored topic the new filter matches, without scanning all of them: the names are also
kept in a trie of levels, which `match` walks with the filter's levels. A literal level
follows one child, `+` follows every child, `#` takes the whole subtree including the node
itself (`a/#` matches `a` [MQTT-4.7.1-2]). At the first level `+` and `#` skip names starting
with `$` [MQTT-4.7.2-1]. A filter without wildcards is a dict lookup.

The admin API lists the names in code-point order, a page at a time (`page`). From the first
`page` on (before it, nothing: a broker nobody lists pays neither memory nor time), the
names are also kept in a sorted list, brought up to date lazily: `set` and `delete` only
note a name that is new or gone (one set operation on the publish path, whatever the size
of the index), and the next `page` merges the notes in (a binary-search insertion or
deletion per noted name, or one merge sort when many changed). So a page costs O(k log n)
for k names changed since the last one; only the first sorts the whole index. A filter's
literal levels before its first wildcard are a contiguous range of that list (found by
bisection): `#` and `prefix/#` are counted and paged without looking at the names; a
filter with `+` tests the names of its range only.

Invariant: a name is in `_values` exactly when its trie node has `topic` set, and every
trie node other than the root leads to at least one stored name (empty nodes are pruned).
Once `_order` is a list, the names in `_values` are `_order` minus `_removed` plus
`_added` (`_added` and `_order` disjoint, `_removed` a subset of `_order`); while it is
None, both sets are empty. Semantics are those of `mqtt.topics.matches`, against which the
property tests check it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Generic, TypeVar

from mqtt.topics import is_wildcard, matches

ValueT = TypeVar("ValueT")


class _NameNode:
    __slots__ = ("children", "topic")

    def __init__(self) -> None:
        self.children: dict[str, _NameNode] = {}
        self.topic: str | None = None


class RetainedIndex(Generic[ValueT]):
    """Topic name -> value, plus `match(topic_filter)` over the stored names."""

    __slots__ = ("_added", "_order", "_removed", "_root", "_values")

    def __init__(self) -> None:
        self._values: dict[str, ValueT] = {}
        self._root = _NameNode()
        self._order: list[str] | None = None  # the names, sorted, as of the last `page`
        self._added: set[str] = set()  # stored since, not in _order
        self._removed: set[str] = set()  # deleted since, still in _order

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
            if self._order is not None:  # noted for the next page
                if topic in self._removed:
                    self._removed.discard(topic)
                else:
                    self._added.add(topic)
        self._values[topic] = value

    def delete(self, topic: str) -> bool:
        """Forget `topic`; False if nothing was stored under it."""
        if topic not in self._values:
            return False
        del self._values[topic]
        if self._order is not None:  # noted for the next page
            if topic in self._added:
                self._added.discard(topic)
            else:
                self._removed.add(topic)
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

    def page(
        self, topic_filter: str | None, start: int, stop: int
    ) -> tuple[int, list[tuple[str, ValueT]]]:
        """The stored names the valid `topic_filter` matches (every name with None), in
        code-point order: how many there are, and the (name, value) pairs [start:stop] of
        them."""
        order = self._ordered()
        values = self._values
        if topic_filter is None:
            names = order[start:stop]
            return len(order), [(name, values[name]) for name in names]
        if not is_wildcard(topic_filter):
            found = [topic_filter] if topic_filter in values else []
            return len(found), [(name, values[name]) for name in found[start:stop]]
        levels = topic_filter.split("/")
        literal = 0
        while levels[literal] not in ("+", "#"):
            literal += 1
        pieces: list[tuple[list[str], int, int]] = []
        if literal == 0:  # a wildcard first level: no name starting with "$" [MQTT-4.7.2-1]
            dollar, after = bisect_left(order, "$"), bisect_left(order, "%")
            pieces += [(order, 0, dollar), (order, after, len(order))]
        else:
            parent = "/".join(levels[:literal])
            if levels[literal:] == ["#"] and parent in values:
                pieces.append(([parent], 0, 1))  # "a/#" matches "a" [MQTT-4.7.1-2]
            pieces.append((order, *_prefix_range(order, parent + "/")))
        if levels[literal:] == ["#"]:  # every name of the pieces matches
            count = sum(hi - lo for _names, lo, hi in pieces)
            names = _slice(pieces, start, stop)
        else:
            matching = [
                name
                for names, lo, hi in pieces
                for name in names[lo:hi]
                if matches(topic_filter, name)
            ]
            count, names = len(matching), matching[start:stop]
        return count, [(name, values[name]) for name in names]

    def _ordered(self) -> list[str]:
        """Every stored name in code-point order, the noted changes merged in (the first
        time, all the names sorted)."""
        order = self._order
        if order is None:
            order = self._order = sorted(self._values)
            return order
        if self._removed:
            if len(self._removed) * 32 < len(order):
                for name in self._removed:
                    del order[bisect_left(order, name)]
            else:
                order = self._order = [name for name in order if name not in self._removed]
            self._removed.clear()
        if self._added:
            if len(self._added) * 32 < len(order):
                for name in self._added:
                    insort(order, name)
            else:
                order += self._added
                order.sort()  # two runs mostly: a merge
            self._added.clear()
        return order


def _prefix_range(order: list[str], prefix: str) -> tuple[int, int]:
    """The slice of the sorted `order` whose names start with `prefix` (which ends with
    "/": the names after them start with `prefix` with its "/" replaced by "0")."""
    return bisect_left(order, prefix), bisect_left(order, prefix[:-1] + "0")


def _slice(pieces: list[tuple[list[str], int, int]], start: int, stop: int) -> list[str]:
    """Items [start:stop] of the pieces (each `names[lo:hi]`) put end to end."""
    names: list[str] = []
    for piece, lo, hi in pieces:
        if stop <= 0:
            break
        size = hi - lo
        if start < size:
            names += piece[lo + max(start, 0) : lo + min(stop, size)]
        start -= size
        stop -= size
    return names


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
