"""ReadablePlans: a topic's fan-out plan less the targets that may not read the topic.

The dispatcher uses it instead of `FanOut` while some subscriber has its deliveries checked
for read access (`hooks.read_checks`). Each topic's filtered plan is kept beside the plan it
was made from: while `FanOut` answers the same plan (the route table did not change) and the
checks' `version` has not moved, it is answered as it is, so a message costs one lookup and
a delivery nothing, and each (subscriber, topic) is decided once per plan. A plan nobody is
removed from is answered itself.

The cache is bounded as `FanOut`'s: at most `cache_size` topics (emptied when full), names
up to `MAX_CACHED_NAME_LENGTH` characters.
"""

from __future__ import annotations

from typing import Any, Protocol

from router.fan_out import DEFAULT_CACHE_SIZE, MAX_CACHED_NAME_LENGTH, FanOut, Plan


class ReadFilter(Protocol):
    """Who may read what (`hooks.read_checks.ReadChecks`)."""

    version: int  # moves when an answer of `keeps` may have changed

    def keeps(self, session: Any, topic: str) -> bool:
        """Whether the subscriber `session` may be given a message on `topic`."""
        ...


class ReadablePlans:
    """`FanOut.plan` with the targets `reads` does not keep left out, cached per topic."""

    __slots__ = ("_cache_size", "_filtered", "_plans", "_reads", "_version")

    def __init__(
        self, plans: FanOut, reads: ReadFilter, cache_size: int = DEFAULT_CACHE_SIZE
    ) -> None:
        self._plans = plans
        self._reads = reads
        self._cache_size = cache_size
        self._filtered: dict[str, tuple[Plan, Plan]] = {}  # topic -> (plan, filtered plan)
        self._version = reads.version

    def plan(self, topic: str) -> Plan:
        """The targets of a message on the valid topic name `topic` that may read it."""
        plan = self._plans.plan(topic)
        version = self._reads.version
        if version != self._version:
            self._filtered.clear()
            self._version = version
        known = self._filtered.get(topic)
        if known is not None and known[0] is plan:
            return known[1]
        keeps = self._reads.keeps
        readable = tuple(target for target in plan if keeps(target.session, topic))
        filtered = plan if len(readable) == len(plan) else readable
        if len(topic) <= MAX_CACHED_NAME_LENGTH:
            if len(self._filtered) >= self._cache_size:
                self._filtered.clear()
            self._filtered[topic] = (plan, filtered)
        return filtered
