"""The frames of the store's state across the pool: whose commits fail, and the filters of
each worker's persistent sessions, replicated like routes, so a publish that needs the store
is refused while any worker's commits fail (docs/pool.md "Store faults across the pool")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoreFailing:
    """The sender's store writer's commits fail (1) / succeed again (0); to every worker,
    and to a worker whose link comes up while they fail. While any worker's fail, every
    worker refuses durable publishes (docs/overload.md, "Store faults")."""

    failing: int


@dataclass(frozen=True, slots=True)
class DurableRoutes:
    """Filters the sender now has persistent sessions' subscriptions to, and filters it no
    longer has: a publish they match needs the store (refused while it fails)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DurableSnapshot:
    """After `Hello`, beside `RoutesSnapshot`: every filter the sender has persistent
    sessions' subscriptions to, replacing what the peer knew."""

    filters: tuple[str, ...]
