"""A listener's `max_connections` across the pool, pure: the other workers' counts, summed.

Each worker counts the connections open on each of its listeners (`net.endpoint`) and
tells the others in `ListenerCounts` frames; `PeerCounts` keeps the last frame of each peer
and the sum per listener, which the worker adds to its own count when it decides whether a
new connection is over the limit. A peer that goes down takes its connections with it, so
its counts are dropped.

Counts travel coalesced, so the pool-wide count is as fresh as the last frame: `urgent`
says when a change must go out within the loop turn (the listener is at least half full
pool-wide, where a stale count could let the pool take more than its limit) and when it may
wait for the next periodic report (`REPORT_INTERVAL`), which keeps a storm of connections
far below the limit from costing a frame per connection.
"""

from __future__ import annotations

REPORT_INTERVAL = 0.05  # seconds a change may wait while its listener is under half full


def urgent(own: int, elsewhere: int, limit: int) -> bool:
    """Whether a change of a listener's count here must reach the others at once: the
    listener holds at least half its `limit` pool-wide."""
    return 2 * (own + elsewhere) >= limit


class PeerCounts:
    """The other workers' last reported open connections per listener, and their sums."""

    __slots__ = ("_by_worker", "_listeners", "elsewhere")

    def __init__(self, listeners: int) -> None:
        self._listeners = listeners
        self._by_worker: dict[int, tuple[int, ...]] = {}
        self.elsewhere = [0] * listeners  # per listener: the sum over the other workers

    def report(self, worker: int, counts: tuple[int, ...]) -> None:
        """`worker`'s counts now (a peer configured with other listeners: the listeners
        both have count, the rest as 0)."""
        size = self._listeners
        self._by_worker[worker] = (counts + (0,) * size)[:size]
        self._sum()

    def drop_worker(self, worker: int) -> None:
        """`worker` went down: its connections are gone."""
        if self._by_worker.pop(worker, None) is not None:
            self._sum()

    def _sum(self) -> None:
        totals = [0] * self._listeners
        for counts in self._by_worker.values():
            for index, count in enumerate(counts):
                totals[index] += count
        self.elsewhere = totals
