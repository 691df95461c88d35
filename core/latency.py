"""A histogram of durations in seconds with Prometheus' bucket shape: pure, no locking.

Written by one greenlet or thread at a time (the store writer; hook calls in the event loop);
readers (the metrics collector) copy it between two yields.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

DEFAULT_BOUNDS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


@dataclass(slots=True)
class LatencyHistogram:
    bounds: tuple[float, ...] = DEFAULT_BOUNDS  # upper bounds of the buckets, ascending
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; +Inf last
    total: float = 0.0  # sum of the durations observed

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        # bisect_left: the first bucket whose upper bound is >= seconds (C speed: hook
        # chains are timed on the publish path).
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound as Prometheus writes it, observations at or below it), "+Inf" last."""
        result = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            result.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return result
