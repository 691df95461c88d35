"""Routes across the pool: what this worker tells the others of its routes, and its replicas
of theirs (docs/pool.md "Routes are replicated", "Share groups span the workers").

Three kinds of filter are replicated the same way: the filters of local subscribers
(`RoutesChanged`/`RoutesSnapshot`, the `remote` replica), the member counts of share groups
(`SharesChanged`/`SharesSnapshot`, `shares`) and the filters of persistent sessions'
subscriptions, which say where a publish needs the store (`DurableRoutes`/`DurableSnapshot`,
`durable`). The changes of one loop turn leave in one flush, durable ones first: a new
persistent route is known as one before as a route, so a publisher's worker never forwards
to it without waiting for its commit. A `RoutesSync` round after that flush tells the
callers of `when_routes_known` that every linked worker has applied it (links are FIFO). A
peer that comes up gets the snapshots; one that goes down loses its routes at once and
answers every round.

Pure: the node gives it the fabric's `send`, `broadcast` and `peers` and its loop's
`run_callback`.
"""

from __future__ import annotations

from collections.abc import Callable

from pool.frames.codec import Frame
from pool.frames.routes import (
    RoutesChanged,
    RoutesSnapshot,
    RoutesSync,
    RoutesSynced,
    SharesChanged,
    SharesSnapshot,
)
from pool.frames.store import DurableRoutes, DurableSnapshot
from router.route_replica import FilterChanges, RemoteRoutes, RouteAnnouncer
from router.share_replica import GroupCounts, RemoteShares, ShareAnnouncer
from router.shared import is_shared

# What the routes and share groups are made of: applied in order with the `RoutesSync`s.
RouteFrame = (
    RoutesChanged
    | RoutesSnapshot
    | RoutesSync
    | RoutesSynced
    | SharesChanged
    | SharesSnapshot
    | DurableRoutes
    | DurableSnapshot
)
ROUTE_FRAMES = (
    RoutesChanged,
    RoutesSnapshot,
    RoutesSync,
    RoutesSynced,
    SharesChanged,
    SharesSnapshot,
    DurableRoutes,
    DurableSnapshot,
)


class PoolRoutes:
    """This worker's routes announced, the others' replicated; see the module docstring."""

    def __init__(
        self,
        send: Callable[[int, Frame], bool],
        broadcast: Callable[[Frame], None],
        peers: Callable[[], set[int]],
        run_callback: Callable[[Callable[[], None]], object],
    ) -> None:
        self._send = send
        self._broadcast = broadcast
        self._peers = peers
        self._run_callback = run_callback
        self.announcer = RouteAnnouncer()
        self.remote = RemoteRoutes()
        self.share_announcer = ShareAnnouncer()
        self.shares = RemoteShares()
        # The filters of persistent sessions' subscriptions, here and on the others: a
        # publish matching one needs the store (refused while it fails, docs/overload.md).
        self.durable_announcer = RouteAnnouncer()
        self.durable = RemoteRoutes()
        self._flush_due = False
        self._waiting_for_sync: list[Callable[[], object]] = []
        self._sync_token = 0
        self._syncs: dict[int, tuple[set[int], list[Callable[[], object]]]] = {}

    def route_changed(self, topic_filter: str, added: bool) -> None:
        """The route writer added the first route of a subscriber to `topic_filter` (a
        member to the share group of a `$share/...` one), or removed one (called from the
        actor that changed it, on the loop)."""
        if is_shared(topic_filter):
            if added:
                self.share_announcer.joined(topic_filter)
            else:
                self.share_announcer.left(topic_filter)
        elif added:
            self.announcer.subscribed(topic_filter)
        else:
            self.announcer.unsubscribed(topic_filter)
        self._flush_soon()

    def durable_route_changed(self, topic_filter: str, added: bool) -> None:
        """A persistent session's route to `topic_filter` appeared / went (the router)."""
        if added:
            self.durable_announcer.subscribed(topic_filter)
        else:
            self.durable_announcer.unsubscribed(topic_filter)
        self._flush_soon()

    def needs_store(self, topic: str) -> bool:
        """Whether another worker has a persistent session subscribed to `topic` (asked only
        while the store fails)."""
        return bool(self.durable.workers_cached(topic))

    def when_routes_known(self, then: Callable[[], object]) -> None:
        """Call `then` once every linked worker has applied the route changes made so far
        (one `RoutesSync` round per loop turn, however many subscriptions wait on it)."""
        if not self._peers():
            then()
            return
        self._waiting_for_sync.append(then)
        self._flush_soon()

    def peer_up(self, worker: int) -> None:
        """`worker` is linked: it hears the changes the others have not heard yet, then
        everything this worker has."""
        self._flush()
        self._send(worker, RoutesSnapshot(self.announcer.snapshot()))
        shares = self.share_announcer.snapshot()
        self._send(worker, SharesSnapshot(shares.filters, shares.counts))
        self._send(worker, DurableSnapshot(self.durable_announcer.snapshot()))

    def peer_down(self, worker: int) -> None:
        """`worker` is gone: its routes with it, and no round waits for it any more."""
        self.remote.drop_worker(worker)
        self.shares.drop_worker(worker)
        self.durable.drop_worker(worker)
        for token in list(self._syncs):
            self._synced(worker, token)

    def frame_received(self, worker: int, frame: RouteFrame) -> None:
        if isinstance(frame, RoutesChanged):
            self.remote.changed(worker, FilterChanges(frame.added, frame.removed))
        elif isinstance(frame, RoutesSnapshot):
            self.remote.replace(worker, frame.filters)
        elif isinstance(frame, SharesChanged):
            self.shares.changed(worker, GroupCounts(frame.filters, frame.counts))
        elif isinstance(frame, SharesSnapshot):
            self.shares.replace(worker, GroupCounts(frame.filters, frame.counts))
        elif isinstance(frame, DurableRoutes):
            self.durable.changed(worker, FilterChanges(frame.added, frame.removed))
        elif isinstance(frame, DurableSnapshot):
            self.durable.replace(worker, frame.filters)
        elif isinstance(frame, RoutesSync):
            self._send(worker, RoutesSynced(frame.token))
        else:
            self._synced(worker, frame.token)

    def _flush_soon(self) -> None:
        """Announce the route changes of this loop turn at its end, in one flush."""
        if not self._flush_due:
            self._flush_due = True
            self._run_callback(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        durable = self.durable_announcer.changes()
        change = self.announcer.changes()
        shares = self.share_announcer.changes()
        if durable is not None:
            self._broadcast(DurableRoutes(durable.added, durable.removed))
        if change is not None:
            self._broadcast(RoutesChanged(change.added, change.removed))
        if shares is not None:
            self._broadcast(SharesChanged(shares.filters, shares.counts))
        if self._waiting_for_sync:
            self._sync_token += 1
            waiting, self._waiting_for_sync = self._waiting_for_sync, []
            peers = self._peers()
            if not peers:
                for then in waiting:
                    then()
                return
            self._syncs[self._sync_token] = (set(peers), waiting)
            self._broadcast(RoutesSync(self._sync_token))

    def _synced(self, worker: int, token: int) -> None:
        sync = self._syncs.get(token)
        if sync is None:
            return
        sync[0].discard(worker)
        if not sync[0]:
            del self._syncs[token]
            for then in sync[1]:
                then()
