"""What a worker keeps, in memory, for the persistent sessions of another node's worker
while that worker is down (docs/cluster.md "A node that is down"); pure.

When a peer is taken for gone (silence, a clean stop, a restart), its routes are dropped, so
nothing published meanwhile is forwarded to it. Its persistent sessions, which its store
keeps, would miss all of it: on one broker an offline session queues what it subscribed
to, and in a pool the other workers keep it for a dead worker (`pool.orphans`). So the
filters of the peer's persistent sessions (the `durable` replica) are kept here when it
goes, and every QoS 1/2 message published on this worker that one of them matches is kept
too, up to `bound` per peer, the oldest dropped past it. When the peer comes back, in a new
life or the same one, it is given them, in order (`cluster.numbered_forwarding`).
"""

from __future__ import annotations

from collections import deque

from core.message import Message
from router.route_replica import RemoteRoutes


class KeptForDown:
    """Per peer that is down: its persistent sessions' filters and what they matched."""

    __slots__ = ("_bound", "_dropped", "_kept", "_routes")

    def __init__(self, bound: int) -> None:
        """`bound`: messages kept per peer at most (0: none kept)."""
        self._bound = bound
        self._routes = RemoteRoutes()  # the peers' filters: which of them a topic matches
        self._kept: dict[int, deque[Message]] = {}
        self._dropped: dict[int, int] = {}

    def __bool__(self) -> bool:
        """Whether a peer is down whose persistent sessions want messages kept."""
        return bool(self._kept)

    def down(self, peer: int, filters: frozenset[str]) -> None:
        """`peer` is down; `filters`: those its persistent sessions subscribe to."""
        if self._bound and filters and peer not in self._kept:
            self._routes.replace(peer, tuple(filters))
            self._kept[peer] = deque()
            self._dropped[peer] = 0

    def offer(self, message: Message) -> list[int] | None:
        """Keep `message` (QoS 1/2) for each peer down whose filters match it. Returns the
        peers whose keep it made reach the bound for the first time (the caller says so),
        if any."""
        filled = None
        bound = self._bound
        for peer in self._routes.workers_cached(message.topic):
            kept = self._kept[peer]
            if len(kept) == bound:
                kept.popleft()
                self._dropped[peer] += 1
                if self._dropped[peer] == 1:
                    filled = [*(filled or ()), peer]
            kept.append(message)
        return filled

    def up(self, peer: int) -> tuple[tuple[Message, ...], int]:
        """`peer` is back: what was kept for it, oldest first, and how many older ones were
        dropped past the bound; it is forgotten here."""
        kept = self._kept.pop(peer, None)
        if kept is None:
            return (), 0
        self._routes.drop_worker(peer)
        return tuple(kept), self._dropped.pop(peer)
