"""A pool worker's side of pool-wide `max_connections`: report this worker's counts, take in
the others' (`pool.connection_counts` holds the rules, docs/pool.md).

Each listener's `Endpoint` calls `changed` when a connection opens or closes here. A change
goes to the other workers in a `ListenerCounts` frame at the end of the loop turn while the
listener is at least half full pool-wide, else with the next report, at most
`REPORT_INTERVAL` later; either way one frame carries every listener's count. The others'
frames set each endpoint's `elsewhere`, which `Endpoint.full` adds to its own count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from net.endpoint import Endpoint
from pool.connection_counts import REPORT_INTERVAL, PeerCounts, urgent
from pool.frames.admission import ListenerCounts
from pool.frames.codec import Frame

if TYPE_CHECKING:  # gevent's loop and watcher types exist in its stubs only
    from gevent._types import _Loop, _TimerWatcher


class PoolConnectionCounts:
    """This worker's listener counts going out, the other workers' coming in."""

    def __init__(
        self, loop: _Loop, broadcast: Callable[[Frame], None], send: Callable[[int, Frame], object]
    ) -> None:
        self._loop = loop
        self._broadcast = broadcast
        self._send = send
        self._endpoints: tuple[Endpoint, ...] = ()
        self._peers = PeerCounts(0)
        self._sent: tuple[int, ...] = ()  # as the others know it
        self._now_due = False
        self._timer: _TimerWatcher | None = None

    def watch(self, endpoints: Sequence[Endpoint]) -> None:
        """Count `endpoints` (this worker's listeners, in configuration order); before the
        first peer links."""
        self._endpoints = tuple(endpoints)
        self._peers = PeerCounts(len(self._endpoints))
        self._sent = (0,) * len(self._endpoints)
        for endpoint in self._endpoints:
            endpoint.on_count_changed = self.changed

    def changed(self, endpoint: Endpoint) -> None:
        """A connection opened or closed on `endpoint` here."""
        if self._now_due:
            return
        if urgent(endpoint.connections, endpoint.elsewhere, endpoint.config.max_connections):
            self._now_due = True
            self._loop.run_callback(self._report)
        elif self._timer is None:
            self._timer = self._loop.timer(REPORT_INTERVAL)
            self._timer.start(self._report)

    def received(self, worker: int, frame: ListenerCounts) -> None:
        self._peers.report(worker, frame.counts)
        self._apply()

    def peer_up(self, worker: int) -> None:
        self._send(worker, ListenerCounts(self._counts()))

    def peer_down(self, worker: int) -> None:
        self._peers.drop_worker(worker)
        self._apply()

    def _report(self) -> None:
        self._now_due = False
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        counts = self._counts()
        if counts != self._sent:
            self._sent = counts
            self._broadcast(ListenerCounts(counts))

    def _counts(self) -> tuple[int, ...]:
        return tuple(endpoint.connections for endpoint in self._endpoints)

    def _apply(self) -> None:
        for endpoint, elsewhere in zip(self._endpoints, self._peers.elsewhere, strict=True):
            endpoint.elsewhere = elsewhere
