"""Routes across workers: which filters this worker announces, and which workers want a topic.

The pool replicates routes at the level of filters and workers, like emqttd's route -> node
table (docs/pool.md): the other workers need to know that worker 2 has subscribers to
`sensors/+/temp`, not which sessions those are. Pure state, no I/O.

- `RouteAnnouncer` turns this worker's subscription changes into the transitions the others
  need: a filter is announced when its first local subscriber arrives and withdrawn when the
  last one leaves. `changes()` gives what changed since the last call as one
  `RoutesChanged`, so a burst of subscriptions costs one frame, and a filter added and
  removed within it costs nothing.
- `RemoteRoutes` is this worker's replica of the other workers' filters: a `RouteTable` from
  filter to worker id, matched by topic name once per topic (the fan-out plan caches it, keyed
  by `version`). A snapshot replaces what a worker had announced before (its link came up or
  came back); a dead worker's filters are dropped at once.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from mqtt.topics import TopicError
from router.route_table import RouteTable


class FilterChanges(NamedTuple):
    """Filters that appeared and went, as one worker announces them (the pool carries them
    in its `RoutesChanged` frame)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]


logger = logging.getLogger(__name__)

MAX_CACHED_TOPICS = 100_000  # remote matches remembered; past that the cache starts over


class RouteAnnouncer:
    """This worker's filters with local subscribers, and the changes not yet announced."""

    __slots__ = ("_announced", "_counts", "_dirty")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}  # filter -> local subscribers
        self._announced: set[str] = set()  # what the other workers were last told
        self._dirty: set[str] = set()  # filters whose count crossed zero since then

    def subscribed(self, topic_filter: str) -> None:
        """A local session now subscribes to `topic_filter` (a new route, not a renewal)."""
        count = self._counts.get(topic_filter, 0)
        self._counts[topic_filter] = count + 1
        if count == 0:
            self._dirty.add(topic_filter)

    def unsubscribed(self, topic_filter: str) -> None:
        """A local session's route to `topic_filter` is gone."""
        count = self._counts.get(topic_filter, 0)
        if count <= 1:
            if count == 1:
                del self._counts[topic_filter]
                self._dirty.add(topic_filter)
            return
        self._counts[topic_filter] = count - 1

    def changes(self) -> FilterChanges | None:
        """What to tell the other workers now (None: nothing changed)."""
        if not self._dirty:
            return None
        added = tuple(f for f in self._dirty if f in self._counts and f not in self._announced)
        removed = tuple(f for f in self._dirty if f not in self._counts and f in self._announced)
        self._dirty.clear()
        self._announced.update(added)
        self._announced.difference_update(removed)
        return FilterChanges(added, removed) if added or removed else None

    def snapshot(self) -> tuple[str, ...]:
        """Everything, for a worker whose link just came up; pending changes are included."""
        self._dirty.clear()
        self._announced = set(self._counts)
        return tuple(self._counts)


class RemoteRoutes:
    """The other workers' filters, matched by topic name."""

    __slots__ = ("_by_worker", "_cache", "_cached_at", "_table")

    def __init__(self) -> None:
        self._table: RouteTable[int, bool] = RouteTable()
        self._by_worker: dict[int, set[str]] = {}
        self._cache: dict[str, tuple[int, ...]] = {}  # topic -> workers, at `_cached_at`
        self._cached_at = 0

    @property
    def version(self) -> int:
        """Grows on every change: a cached match is stale once this moved."""
        return self._table.version

    def changed(self, worker: int, frame: FilterChanges) -> None:
        """`worker` announced filters and withdrew others."""
        filters = self._by_worker.setdefault(worker, set())
        for topic_filter in frame.removed:
            if self._table.remove(topic_filter, worker):
                filters.discard(topic_filter)
        for topic_filter in frame.added:
            self._add(worker, filters, topic_filter)

    def replace(self, worker: int, announced: tuple[str, ...]) -> None:
        """`worker`'s whole set of filters: what it announced before is forgotten."""
        self.drop_worker(worker)
        filters = self._by_worker.setdefault(worker, set())
        for topic_filter in announced:
            self._add(worker, filters, topic_filter)

    def filters_of(self, worker: int) -> frozenset[str]:
        """The filters `worker` announced."""
        return frozenset(self._by_worker.get(worker, ()))

    def drop_worker(self, worker: int) -> None:
        """`worker` is down: none of its filters match any more."""
        for topic_filter in self._by_worker.pop(worker, ()):
            self._table.remove(topic_filter, worker)

    def workers_for(self, topic_name: str) -> set[int]:
        """The workers with a subscriber whose filter matches `topic_name`."""
        workers: set[int] = set()
        for _filter, subscribers in self._table.match(topic_name):
            workers.update(subscribers)
        return workers

    def workers_cached(self, topic_name: str) -> tuple[int, ...]:
        """`workers_for`, sorted, remembered per topic until the replica changes (a publish
        batch then costs one dict lookup per message, as the local fan-out plan does)."""
        if self._cached_at != self._table.version:
            self._cache.clear()
            self._cached_at = self._table.version
        workers = self._cache.get(topic_name)
        if workers is None:
            if len(self._cache) >= MAX_CACHED_TOPICS:
                self._cache.clear()
            workers = self._cache[topic_name] = tuple(sorted(self.workers_for(topic_name)))
        return workers

    def _add(self, worker: int, filters: set[str], topic_filter: str) -> None:
        try:
            self._table.add(topic_filter, worker, True)
        except TopicError as error:
            logger.warning(
                "worker %d announced the invalid filter %r (%s): ignored; that worker runs "
                "other code than this one, restart the pool with one version",
                worker,
                topic_filter,
                error,
            )
            return
        filters.add(topic_filter)
