"""One log line per kind of event per second, with counts: for events that come in floods.

Dropped messages, throttled connections and refused accepts can happen thousands of times a
second; a line for each would flood the log and cost the broker more than the event itself.
`RateLimitedLog.note(key, count, text)` logs the first event of a `key` at once; events of the
same key within the next `interval` are only counted, and when the interval ends one summary
line says how many more there were (and the text of the latest). While a key keeps firing,
that is one line per interval; once it is quiet for an interval, its next event is logged at
once again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent


class RateLimitedLog:
    __slots__ = ("_clock", "_interval", "_logger", "_pending", "_schedule")

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        schedule: Callable[..., Any] = gevent.spawn_later,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._schedule = schedule  # schedule(seconds, function, *args), like gevent.spawn_later
        # key -> [events counted since the last line, level, latest text, window start]
        self._pending: dict[str, list[Any]] = {}

    def note(self, key: str, count: int, text: str, level: int = logging.WARNING) -> None:
        """Record `count` events of kind `key`; `text` describes the latest of them."""
        pending = self._pending.get(key)
        if pending is not None:
            pending[0] += count
            pending[1] = max(pending[1], level)
            pending[2] = text
            return
        self._logger.log(level, "%s", text)
        self._pending[key] = [0, level, text, self._clock()]
        self._schedule(self._interval, self._end_window, key)

    def _end_window(self, key: str) -> None:
        pending = self._pending.get(key)
        if pending is None:
            return
        more, level, text, started = pending
        if not more:
            del self._pending[key]  # quiet for a whole interval: log the next event at once
            return
        elapsed = self._clock() - started
        self._logger.log(
            level, "%s: %d more in the last %.1f s; latest: %s", key, more, elapsed, text
        )
        self._pending[key] = [0, logging.NOTSET, text, self._clock()]
        self._schedule(self._interval, self._end_window, key)
