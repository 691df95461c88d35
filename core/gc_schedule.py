"""When the broker runs CPython's cyclic garbage collector: pure decisions, no clock, no `gc`.

A broker's objects fall in two kinds. What a message or a packet allocates dies young and is
freed by reference counting. What a connection allocates (about 35 tracked objects: the
actors, their inboxes, the channel, the session state, watchers) lives as long as the
connection. The collector's cost is in the second kind: every tracked object that survives
is scanned once by a young collection (measured about 190 ns each in the broker, so 7 µs of a
connect's 65 µs in a 10,000-connection storm) and again by each older one.

So the broker collects when it has time to: a periodic check (`actors.idle_gc`) collects
once the young generation holds `idle_young` objects and the process used less than
`busy_share` of a CPU since the last check. CPython's own trigger stays on as a backstop at
`backstop[0]` young objects, far above `idle_young`, for a process that is never idle: a
burst of 10,000 connections then completes without a collection, and the collection follows
in the next quiet moment. The generation collected is the one CPython would choose, from the
same counters (`gc.get_count()`: young objects, young collections since the last middle one,
middle collections since the last full one) and `backstop` as the thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass

Counts = tuple[int, int, int]  # gc.get_count()


@dataclass(frozen=True, slots=True)
class GcSchedule:
    idle_young: int = 10_000  # young objects worth a collection when the process is quiet
    busy_share: float = 0.5  # CPU share (1.0 = one core) from which the process is busy
    # gc.set_threshold: CPython's own trigger for a process that is never quiet. 400,000
    # young objects scan in about 80 ms: the longest pause, paid only by a process that
    # keeps allocating long-lived objects without a quiet check period.
    backstop: Counts = (400_000, 50, 100)

    def __post_init__(self) -> None:
        if not 0 < self.idle_young <= self.backstop[0]:
            raise ValueError("idle_young must be positive and at most the backstop's")
        if min(self.backstop) < 1:
            raise ValueError("the backstop thresholds must be positive")
        if not self.busy_share > 0:
            raise ValueError("busy_share must be positive")

    def generation_due(self, counts: Counts, cpu_share: float) -> int | None:
        """The generation to collect now (0, 1 or 2), or None: the process is busy, or its
        young generation is still small. `cpu_share` is the CPU the process used since the
        last check, as a share of one core."""
        if cpu_share >= self.busy_share or counts[0] < self.idle_young:
            return None
        # The oldest generation whose count passed its threshold, as CPython's
        # collect_generations picks (its extra rule for full collections, a quarter of the
        # long-lived objects new since the last one, is not visible from Python: a quiet
        # moment is the cheap time for a full collection anyway).
        for generation in (2, 1):
            if counts[generation] > self.backstop[generation]:
                return generation
        return 0
