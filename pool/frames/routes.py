"""The frames that replicate routes: the filters each worker has local subscribers for, its
share groups' member counts, and the `RoutesSync` round that says a peer applied them
(docs/pool.md "Routes are replicated", "Share groups span the workers")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RoutesChanged:
    """Filters the sender now has local subscribers for, and filters it no longer has."""

    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RoutesSnapshot:
    """Every filter the sender has local subscribers for; replaces what the peer knew."""

    filters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RoutesSync:
    """Answer `RoutesSynced(token)` once everything sent before on this link is applied: a
    worker learns that its new routes are known before it sends SUBACK."""

    token: int


@dataclass(frozen=True, slots=True)
class RoutesSynced:
    """The answer to `RoutesSync(token)`."""

    token: int


@dataclass(frozen=True, slots=True)
class SharesChanged:
    """The sender's number of local members of each share group (`$share/{group}/{filter}`)
    whose number changed; 0: it has none left."""

    filters: tuple[str, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_counts(self.filters, self.counts)


@dataclass(frozen=True, slots=True)
class SharesSnapshot:
    """Every share group the sender has local members of, with their number; replaces what
    the peer knew of the sender's groups."""

    filters: tuple[str, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_counts(self.filters, self.counts)


def _check_counts(filters: tuple[str, ...], counts: tuple[int, ...]) -> None:
    if len(filters) != len(counts) or any(count < 0 for count in counts):
        raise ValueError(f"share counts {counts!r} for the groups {filters!r}")
