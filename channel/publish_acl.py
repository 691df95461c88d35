"""One connection's publish decisions, kept for a while: EMQX's per-client authorization cache.

With an ACL plugin every PUBLISH asks `client.authorize` (channel.authorization). A device
publishes to the same few topics again and again, and the answer rarely changes, so each
connection keeps the answers it got, by (topic, QoS), for `[auth] acl_cache_ttl` seconds
and at most `MAX_ENTRIES` of them (past that the oldest goes), as EMQX does (its defaults:
1 minute, 32 entries). Everything kept is forgotten when the plugins' decisions may have
changed (`HookBus.decisions_epoch`: a plugin reloaded, registered or gone), so a SIGHUP
applies new rules to the next PUBLISH as before. A TTL of 0 keeps nothing: every PUBLISH
asks the plugins.

Pure: the clock is injected.
"""

from __future__ import annotations

from collections.abc import Callable

from channel.authorization import may_publish
from core.client import ClientInfo
from hooks.hook_bus import HookBus

MAX_ENTRIES = 32


class PublishAcl:
    __slots__ = ("_answers", "_clock", "_epoch", "_hooks", "_ttl")

    def __init__(self, hooks: HookBus, ttl: float, clock: Callable[[], float]) -> None:
        self._hooks = hooks
        self._ttl = ttl
        self._clock = clock
        self._answers: dict[tuple[str, int], tuple[bool, float]] = {}
        self._epoch = hooks.decisions_epoch

    def allows(self, client: ClientInfo, topic: str, qos: int) -> bool:
        """Whether `client` may publish to `topic` at `qos` (asked of the plugins unless a
        fresh answer is kept)."""
        if self._ttl <= 0:
            return may_publish(self._hooks, client, topic, qos)
        answers = self._answers
        if self._epoch != self._hooks.decisions_epoch:
            answers.clear()
            self._epoch = self._hooks.decisions_epoch
        key = (topic, qos)
        now = self._clock()
        kept = answers.get(key)
        if kept is not None and kept[1] > now:
            return kept[0]
        allowed = may_publish(self._hooks, client, topic, qos)
        if kept is not None:
            del answers[key]  # re-inserted last: the oldest go first
        elif len(answers) >= MAX_ENTRIES:
            del answers[next(iter(answers))]
        answers[key] = (allowed, now + self._ttl)
        return allowed
