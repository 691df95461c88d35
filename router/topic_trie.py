"""TopicTrie: the set of wildcard topic filters, searchable by topic name.

The router keeps exact filters in a dict and only wildcard filters (`+`, `#`) here, as in
emqttd (`emqttd_trie`); the trie is nevertheless correct for any valid filter, so other
components (an ACL plugin) may store exact filters in it too. Semantics are those of
`mqtt.topics.matches`, against which the property tests check it.

Theory of operation. Each node stands for a filter prefix. Its `literals` map the next
literal filter level to a node, `single` is the node for a next `+` level, `exact` is set
when a stored filter ends at this node and `multi` when a stored filter ends with `/#` (or
is `#`) right after this prefix; `#` being always the last level [MQTT-4.7.1-2], it needs
no node of its own. Matching a name walks all live nodes level by level:

- a name level follows the literal child of the same text and the `+` child;
- `multi` matches whatever remains, including nothing, so `a/#` matches `a`
  [MQTT-4.7.1-2];
- at the root, a name whose first level starts with `$` follows neither `+` nor `#`
  [MQTT-4.7.2-1].

Every node is reached by exactly one path, so no filter is reported twice. Removing a filter
prunes the nodes left empty, so the trie's size follows the set it holds.
"""

from __future__ import annotations

from mqtt.topics import validate_topic_filter


class _Node:
    __slots__ = ("exact", "literals", "multi", "single")

    def __init__(self) -> None:
        self.literals: dict[str, _Node] = {}
        self.single: _Node | None = None
        self.exact: str | None = None
        self.multi: str | None = None

    def is_empty(self) -> bool:
        return (
            not self.literals and self.single is None and self.exact is None and self.multi is None
        )

    def child(self, level: str) -> _Node | None:
        return self.single if level == "+" else self.literals.get(level)


def _split(topic_filter: str) -> tuple[list[str], bool]:
    """The filter's levels without a trailing `#`, and whether it had one."""
    levels = topic_filter.split("/")
    if levels[-1] == "#":
        levels.pop()
        return levels, True
    return levels, False


class TopicTrie:
    """A set of topic filters that answers "which filters match this topic name?".

    `add`/`remove` change the set; `match` never changes it, and no method leaves the trie
    half-updated, so readers in other greenlets may call `match` at any time.
    """

    __slots__ = ("_count", "_root")

    def __init__(self) -> None:
        self._root = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, topic_filter: object) -> bool:
        if not isinstance(topic_filter, str):
            return False
        levels, ends_multi = _split(topic_filter)
        path = self._path(levels)
        if path is None:
            return False
        return (path[-1].multi if ends_multi else path[-1].exact) is not None

    def add(self, topic_filter: str) -> None:
        """Store `topic_filter` (a no-op if it is stored already).

        Raises TopicError if the filter is not valid [MQTT-4.7.1-2] [MQTT-4.7.1-3].
        """
        validate_topic_filter(topic_filter)
        levels, ends_multi = _split(topic_filter)
        node = self._root
        for level in levels:
            child = node.child(level)
            if child is None:
                child = _Node()
                if level == "+":
                    node.single = child
                else:
                    node.literals[level] = child
            node = child
        if (node.multi if ends_multi else node.exact) is not None:
            return
        if ends_multi:
            node.multi = topic_filter
        else:
            node.exact = topic_filter
        self._count += 1

    def remove(self, topic_filter: str) -> None:
        """Forget `topic_filter` and prune the nodes it alone needed.

        Raises KeyError if the filter is not stored.
        """
        levels, ends_multi = _split(topic_filter)
        path = self._path(levels)
        if path is None or (path[-1].multi if ends_multi else path[-1].exact) is None:
            raise KeyError(topic_filter)
        if ends_multi:
            path[-1].multi = None
        else:
            path[-1].exact = None
        self._count -= 1
        for depth in range(len(levels) - 1, -1, -1):
            if not path[depth + 1].is_empty():
                break
            parent, level = path[depth], levels[depth]
            if level == "+":
                parent.single = None
            else:
                del parent.literals[level]

    def _path(self, levels: list[str]) -> list[_Node] | None:
        """The nodes from the root along `levels`, or None where the trie has no such prefix."""
        path = [self._root]
        for level in levels:
            child = path[-1].child(level)
            if child is None:
                return None
            path.append(child)
        return path

    def match(self, topic_name: str) -> list[str]:
        """The stored filters matching the valid topic name `topic_name`, in no set order."""
        matched: list[str] = []
        nodes = [self._root]
        skip_wildcards = topic_name.startswith("$")  # only at the root [MQTT-4.7.2-1]
        for level in topic_name.split("/"):
            next_nodes: list[_Node] = []
            for node in nodes:
                if not skip_wildcards:
                    if node.multi is not None:
                        matched.append(node.multi)
                    if node.single is not None:
                        next_nodes.append(node.single)
                literal = node.literals.get(level)
                if literal is not None:
                    next_nodes.append(literal)
            if not next_nodes:
                return matched
            nodes = next_nodes
            skip_wildcards = False
        for node in nodes:
            if node.exact is not None:
                matched.append(node.exact)
            if node.multi is not None:
                matched.append(node.multi)
        return matched
