"""Share groups across the workers of a pool: what this worker announces of its members, and
the pool-wide members of a group as this worker sees them (docs/pool.md). Pure state, no I/O.

The pool replicates share groups the way it replicates routes (`router.route_replica`), at
the level of workers: the others need to know that worker 2 has 3 members of
`$share/g/sensors/#`, not which sessions those are.

- `ShareAnnouncer` counts this worker's members per shared filter (`$share/{group}/{filter}`)
  and gives the counts that changed since the last call as one `SharesChanged`, so a burst
  of joins costs one frame per loop turn.
- `RemoteShares` is this worker's replica of the other workers' counts: a `RouteTable` from
  the inner filter to {(share name, worker): members}. A snapshot replaces what a worker had
  announced; a dead worker's groups are dropped at once.
- `pool_groups` / `pool_group` merge this worker's `ShareGroup`s with the replica into
  pool-wide groups, in worker order: this worker's real members at its place, and for each
  other worker one stand-in member per member it has (`ShareMember(stand_in(w), None, w)`).
  A strategy (`router.share_strategy`) picks among them as among any members, so every
  strategy keeps its meaning pool-wide: round robin gives each member its turn (a worker
  with 3 members gets 3 turns, which it hands round among its own), random is uniform over
  the members, the hashes pick the same member whichever worker publishes (every worker
  sees the same slots in the same order, and the picked worker hashes over its own
  members), sticky sticks to a worker which sticks to a member (per publishing worker),
  `local` prefers this worker's real members. A stand-in picked means "forward the message
  to worker w for this group"; w then picks one of its own members.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from mqtt.topics import TopicError
from router.route_table import RouteTable
from router.shared import ShareGroup, ShareMember, parse_shared


class GroupCounts(NamedTuple):
    """How many members one worker has in each share group (`$share/group/filter`), as it
    announces them (the pool carries them in its `SharesChanged` / `SharesSnapshot` frames)."""

    filters: tuple[str, ...]
    counts: tuple[int, ...]


logger = logging.getLogger(__name__)

MAX_CACHED_TOPICS = 100_000  # pool-wide plans remembered; past that the cache starts over

GroupKey = tuple[str, str]  # (share name, inner topic filter)
# Share ids from this one on are the workers of other nodes of a cluster (cluster.shares),
# above any pool's worker ids.
PEER_SHARE_IDS = 1 << 16


def by_worker(worker: int) -> tuple[str, int]:
    """A pool's order of its workers' members: by worker id."""
    return "", worker


def stand_in(worker: int) -> str:
    """The client id of the stand-ins for `worker`'s members. It starts with U+0000, which no
    client id holds [MQTT-1.5.4-2], so an `avoid`/`tried` set can hold it beside real ids:
    then no member on that worker is picked."""
    return f"\0{worker}"


class ShareAnnouncer:
    """This worker's members per shared filter, and the counts not yet announced."""

    __slots__ = ("_announced", "_counts", "_dirty")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}  # shared filter -> local members
        self._announced: dict[str, int] = {}  # what the other workers were last told
        self._dirty: set[str] = set()

    def joined(self, shared_filter: str) -> None:
        """A local session became a member of the group of `shared_filter`."""
        self._counts[shared_filter] = self._counts.get(shared_filter, 0) + 1
        self._dirty.add(shared_filter)

    def left(self, shared_filter: str) -> None:
        """A local member of the group of `shared_filter` left it."""
        count = self._counts.get(shared_filter, 0)
        if count <= 1:
            if count == 1:
                del self._counts[shared_filter]
                self._dirty.add(shared_filter)
            return
        self._counts[shared_filter] = count - 1
        self._dirty.add(shared_filter)

    def changes(self) -> GroupCounts | None:
        """The counts to tell the other workers now (None: nothing changed)."""
        changed = [
            (shared_filter, self._counts.get(shared_filter, 0))
            for shared_filter in self._dirty
            if self._counts.get(shared_filter, 0) != self._announced.get(shared_filter, 0)
        ]
        self._dirty.clear()
        if not changed:
            return None
        for shared_filter, count in changed:
            if count:
                self._announced[shared_filter] = count
            else:
                del self._announced[shared_filter]
        return GroupCounts(tuple(f for f, _ in changed), tuple(c for _, c in changed))

    def snapshot(self) -> GroupCounts:
        """Every count, for a worker whose link just came up; pending changes are included."""
        self._dirty.clear()
        self._announced = dict(self._counts)
        return GroupCounts(tuple(self._counts), tuple(self._counts.values()))


class RemoteShares:
    """The other workers' members of each share group, merged with this worker's on demand."""

    __slots__ = ("_by_worker", "_cache", "_cached_at", "_table", "order")

    def __init__(self) -> None:
        # The place of each worker's members in a group, the same on every worker (a
        # cluster orders them by node, then worker: cluster.shares).
        self.order: Callable[[int], tuple[str, int]] = by_worker
        self._table: RouteTable[tuple[str, int], int] = RouteTable()
        self._by_worker: dict[int, dict[str, GroupKey]] = {}  # worker -> its shared filters
        self._cache: dict[str, tuple[ShareGroup, ...]] = {}  # topic -> pool-wide groups
        self._cached_at = (-1, -1)  # (local version, replica version) of the cached plans

    def __len__(self) -> int:
        """The number of (group, worker) entries: 0 while no other worker has a member."""
        return len(self._table)

    @property
    def version(self) -> int:
        return self._table.version

    def changed(self, worker: int, frame: GroupCounts) -> None:
        """`worker` now has `count` members of each group of `frame` (0: none)."""
        groups = self._by_worker.setdefault(worker, {})
        for shared_filter, count in zip(frame.filters, frame.counts, strict=True):
            key = groups.get(shared_filter) or self._parse(worker, shared_filter)
            if key is None:
                continue
            group, topic_filter = key
            if count:
                self._table.add(topic_filter, (group, worker), count)
                groups[shared_filter] = key
            elif groups.pop(shared_filter, None) is not None:
                self._table.remove(topic_filter, (group, worker))

    def replace(self, worker: int, frame: GroupCounts) -> None:
        """`worker`'s whole set of groups: what it announced before is forgotten."""
        self.drop_worker(worker)
        self.changed(worker, frame)

    def drop_worker(self, worker: int) -> None:
        """`worker` is down: none of its members can be picked any more."""
        for group, topic_filter in self._by_worker.pop(worker, {}).values():
            self._table.remove(topic_filter, (group, worker))

    def pool_groups(
        self, topic: str, local: tuple[ShareGroup, ...], local_version: int
    ) -> tuple[ShareGroup, ...]:
        """The pool-wide share groups of a message on `topic`, given this worker's groups
        matching it (`local`, read at `local_version` of its share table); remembered per
        topic until either table changes."""
        stamp = (local_version, self._table.version)
        if stamp != self._cached_at:
            self._cache.clear()
            self._cached_at = stamp
        groups = self._cache.get(topic)
        if groups is None:
            if len(self._cache) >= MAX_CACHED_TOPICS:
                self._cache.clear()
            groups = self._cache[topic] = self._merge(topic, local)
        return groups

    def pool_group(
        self, group: str, topic_filter: str, local: ShareGroup | None
    ) -> ShareGroup | None:
        """One group pool-wide (this worker's members being `local`); None if it has no member
        anywhere."""
        counts = {
            worker: count
            for (name, worker), count in self._table.subscribers(topic_filter).items()
            if name == group
        }
        if not counts:
            return local
        if local is None:
            return ShareGroup(group, topic_filter, _stand_ins(counts, self.order))
        return local._replace(members=_in_worker_order(local.members, counts, self.order))

    def _merge(self, topic: str, local: tuple[ShareGroup, ...]) -> tuple[ShareGroup, ...]:
        remote: dict[GroupKey, dict[int, int]] = {}
        for topic_filter, entries in self._table.match(topic):
            for (group, worker), count in entries.items():
                remote.setdefault((group, topic_filter), {})[worker] = count
        merged = []
        for share_group in local:
            counts = remote.pop((share_group.group, share_group.topic_filter), None)
            if counts is None:
                merged.append(share_group)
            else:
                members = _in_worker_order(share_group.members, counts, self.order)
                merged.append(share_group._replace(members=members))
        merged.extend(
            ShareGroup(g, f, _stand_ins(counts, self.order)) for (g, f), counts in remote.items()
        )
        return tuple(merged)

    def _parse(self, worker: int, shared_filter: str) -> GroupKey | None:
        try:
            return parse_shared(shared_filter)
        except TopicError as error:
            logger.warning(
                "worker %d announced the invalid shared subscription %r (%s): ignored; that "
                "worker runs other code than this one, restart the pool with one version",
                worker,
                shared_filter,
                error,
            )
            return None


def _in_worker_order(
    local: tuple[ShareMember, ...],
    counts: dict[int, int],
    order: Callable[[int], tuple[str, int]],
) -> tuple[ShareMember, ...]:
    """This worker's members (all on one worker) and the others' stand-ins, in `order`."""
    here = order(local[0].worker)
    before = _stand_ins({w: n for w, n in counts.items() if order(w) < here}, order)
    after = _stand_ins({w: n for w, n in counts.items() if order(w) > here}, order)
    return before + local + after


def _stand_ins(
    counts: dict[int, int], order: Callable[[int], tuple[str, int]]
) -> tuple[ShareMember, ...]:
    return tuple(
        ShareMember(stand_in(worker), None, worker)
        for worker in sorted(counts, key=order)
        for _ in range(counts[worker])
    )
