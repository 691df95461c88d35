"""Which pool worker runs a bridge (pure).

Each bridge runs in exactly one worker: the first live one counting up from the home of its
session's client id (`pool.ownership.home_of("$bridge/<name>")`), wrapping around. While
the home is up it runs the bridge; when it dies the next live worker takes the bridge over
(its session, with the queue, moves there as any session does: docs/pool.md), and gives it
back when the home is linked again. A cluster can give each bridge one owner cluster-wide
the same way, over the list of live nodes.
"""

from __future__ import annotations

from collections.abc import Collection

from core.client import BRIDGE_CLIENT_PREFIX
from pool.ownership import home_of


def runner_of(name: str, workers: int, live: Collection[int]) -> int | None:
    """The worker of `workers` that runs bridge `name` while `live` are up (None: none)."""
    home = home_of(BRIDGE_CLIENT_PREFIX + name, workers)
    for step in range(workers):
        candidate = (home + step) % workers
        if candidate in live:
            return candidate
    return None
