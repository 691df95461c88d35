"""RouteTable: topic filter -> {subscriber: value}, matched by the topic name of a PUBLISH.

One writer changes it (`add`, `remove`: `actors.router_actor.RouteWriter`, on the
worker's one thread); publishers in other greenlets call `match` directly. Exact filters
live in a dict looked up by the topic name itself; wildcard filters live in a `TopicTrie`,
walked only when there are any.

Invariants:
- every filter present has at least one subscriber; `len(table)` counts (filter, subscriber)
  routes and `version` grows on every change;
- a wildcard filter is in `_wildcard` exactly when it is in the trie;
- copy-on-write: the subscriber dicts returned by `match` are never changed afterwards. A
  change to a filter whose dict a `match` may have handed out (one made at or before the last
  match) replaces the dict with an updated copy, so a publisher may keep iterating a result
  across greenlet switches. Changes made between publishes edit in place; the copy costs
  O(subscribers of that filter) only when publishes and subscriptions interleave.

`match` keeps no cache: the publish path caches per topic name what it derives from the
match (`router.fan_out.FanOut`, keyed by name and invalidated by `version`), and one cache
with the same key, bound and invalidation in front of another only cost memory.

Callers must not mutate what `match` returns (the dicts are shared with other publishers).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

from mqtt.topics import is_wildcard, validate_topic_filter
from router.topic_trie import TopicTrie

SubscriberT = TypeVar("SubscriberT", bound=Hashable)
ValueT = TypeVar("ValueT")

Match = list[tuple[str, Mapping[SubscriberT, ValueT]]]


class RouteTable(Generic[SubscriberT, ValueT]):
    """The subscriptions of the broker: which subscribers want which topic filters.

    `value` is whatever the broker keeps per route (e.g. the session's route object with its
    SubscriptionOptions); `add` on an existing (filter, subscriber) replaces it.
    """

    __slots__ = (
        "_exact",
        "_made_at",
        "_routes",
        "_shared_at",
        "_trie",
        "_wildcard",
        "version",
    )

    def __init__(self) -> None:
        self._exact: dict[str, dict[SubscriberT, ValueT]] = {}
        self._wildcard: dict[str, dict[SubscriberT, ValueT]] = {}
        self._trie = TopicTrie()
        self._made_at: dict[str, int] = {}  # filter -> version its current dict was made at
        self._shared_at = -1  # version of the last match
        self._routes = 0
        self.version = 0

    def __len__(self) -> int:
        return self._routes

    @property
    def filter_count(self) -> int:
        return len(self._exact) + len(self._wildcard)

    def add(self, topic_filter: str, subscriber: SubscriberT, value: ValueT) -> bool:
        """Route `topic_filter` to `subscriber`; True if the subscriber was new on that filter.

        Raises TopicError if the filter is not valid [MQTT-4.7.1-2] [MQTT-4.7.1-3].
        """
        validate_topic_filter(topic_filter)
        self.version += 1
        subscribers = self._writable(topic_filter)
        is_new = subscriber not in subscribers
        subscribers[subscriber] = value
        self._routes += is_new
        return is_new

    def remove(self, topic_filter: str, subscriber: SubscriberT) -> bool:
        """Drop one route; False if `subscriber` was not on `topic_filter`."""
        table = self._wildcard if is_wildcard(topic_filter) else self._exact
        subscribers = table.get(topic_filter)
        if subscribers is None or subscriber not in subscribers:
            return False
        self.version += 1
        if len(subscribers) == 1:
            del table[topic_filter]
            del self._made_at[topic_filter]
            if table is self._wildcard:
                self._trie.remove(topic_filter)
        else:
            del self._writable(topic_filter)[subscriber]
        self._routes -= 1
        return True

    def subscribers(self, topic_filter: str) -> Mapping[SubscriberT, ValueT]:
        """A read-only view of the subscribers of `topic_filter` (empty if it has none).

        O(1); read it now: after the next change it may show either the old or the new state.
        """
        table = self._wildcard if is_wildcard(topic_filter) else self._exact
        return MappingProxyType(table.get(topic_filter, {}))

    def match(self, topic_name: str) -> Match[SubscriberT, ValueT]:
        """(filter, {subscriber: value}) for every filter matching the valid `topic_name`.

        The dicts in the result are shared: do not mutate them.
        """
        exact = self._exact.get(topic_name)
        matched: Match[SubscriberT, ValueT] = [] if exact is None else [(topic_name, exact)]
        if self._wildcard:
            wildcard = self._wildcard
            matched.extend([(found, wildcard[found]) for found in self._trie.match(topic_name)])
        self._shared_at = self.version
        return matched

    def _writable(self, topic_filter: str) -> dict[SubscriberT, ValueT]:
        """The dict of `topic_filter` that may be edited in place now (created if missing)."""
        wildcard = is_wildcard(topic_filter)
        table = self._wildcard if wildcard else self._exact
        subscribers = table.get(topic_filter)
        if subscribers is None:
            subscribers = table[topic_filter] = {}
            if wildcard:
                self._trie.add(topic_filter)
        elif self._made_at[topic_filter] <= self._shared_at:
            subscribers = table[topic_filter] = dict(subscribers)
        else:
            return subscribers
        self._made_at[topic_filter] = self.version
        return subscribers
