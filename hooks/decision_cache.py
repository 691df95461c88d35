"""DecisionCache: authentication and authorisation answers kept by key, for a time, bounded.

One structure for every cache of decisions in the broker: the per-delivery read checks
(`hooks.read_checks`: answers kept until the plugins reload) and the backends' caches
(`plugins.backend_cache`: answers of an HTTP service or a database, kept for a TTL so the
service is asked once per client and topic, not once per PUBLISH).

- `get(key)` answers the value, or None when it is not held or has expired.
- `put(key, value, positive=..., client_id=...)` keeps it for `ttl` seconds if `positive`
  (an allowed answer), for `negative_ttl` seconds otherwise (None: until cleared; 0: not
  kept). With `client_id` the entry is also indexed by that client, so
  `forget_client(client_id)` drops every answer about it (a client kicked by an operator).
- At most `max_entries` are held: beyond it the oldest entry goes (insertion order).
- `clear()` forgets everything (plugins reloaded).
- With `figures`, every `get` counts a hit or a miss there (`/metrics`).

Pure: the clock is injected (time.monotonic by default) and nothing is locked; each worker's
event loop owns its caches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from core.backend_figures import BackendFigures

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_FOREVER = float("inf")


class DecisionCache(Generic[K, V]):
    __slots__ = (
        "_by_client",
        "_clock",
        "_entries",
        "_figures",
        "_max_entries",
        "_negative_ttl",
        "_ttl",
    )

    def __init__(
        self,
        *,
        max_entries: int,
        ttl: float | None = None,
        negative_ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        figures: BackendFigures | None = None,
    ) -> None:
        self._max_entries = max_entries
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._clock = clock
        self._figures = figures
        # key -> (value, expires at (monotonic seconds), client id or None)
        self._entries: dict[K, tuple[V, float, str | None]] = {}
        self._by_client: dict[str, set[K]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value kept for `key`, or None (not held, or expired: then dropped)."""
        entry = self._entries.get(key)
        if entry is not None and entry[1] != _FOREVER and entry[1] <= self._clock():
            self._drop(key, entry[2])
            entry = None
        figures = self._figures
        if figures is not None:
            if entry is None:
                figures.cache_misses += 1
            else:
                figures.cache_hits += 1
        return None if entry is None else entry[0]

    def put(self, key: K, value: V, *, positive: bool = True, client_id: str | None = None) -> None:
        """Keep `value` for `key` for the TTL its kind has (see the module docstring)."""
        ttl = self._ttl if positive else self._negative_ttl
        if ttl is not None and ttl <= 0:
            return
        if key not in self._entries and len(self._entries) >= self._max_entries:
            oldest = next(iter(self._entries))
            self._drop(oldest, self._entries[oldest][2])
        expires = _FOREVER if ttl is None else self._clock() + ttl
        previous = self._entries.get(key)
        if previous is not None and previous[2] != client_id:
            self._unindex(key, previous[2])
        self._entries[key] = (value, expires, client_id)
        if client_id is not None:
            self._by_client.setdefault(client_id, set()).add(key)

    def forget_client(self, client_id: str) -> int:
        """Drop every answer put with `client_id`; how many there were."""
        keys = self._by_client.pop(client_id, ())
        for key in keys:
            self._entries.pop(key, None)
        return len(keys)

    def clear(self) -> None:
        self._entries.clear()
        self._by_client.clear()

    def _drop(self, key: K, client_id: str | None) -> None:
        del self._entries[key]
        self._unindex(key, client_id)

    def _unindex(self, key: K, client_id: str | None) -> None:
        if client_id is None:
            return
        keys = self._by_client.get(client_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_client[client_id]
