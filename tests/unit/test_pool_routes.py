"""Routes across the pool in-process (pool/routes.py): two or three `PoolRoutes` joined by a
loopback that carries every frame through the real codec, in order per link, with the loop
callbacks run by hand (one `turn()` is the end of a loop turn)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.frames.routes import RoutesChanged, RoutesSnapshot, RoutesSync, SharesChanged
from pool.frames.store import DurableRoutes
from pool.routes import PoolRoutes


class Loopback:
    """Workers 0..n-1, each a `PoolRoutes`; links up between `linked` pairs only."""

    def __init__(self, workers: int) -> None:
        self.callbacks: list[Callable[[], None]] = []
        self.links: dict[tuple[int, int], deque[bytes]] = {}
        self.linked: set[int] = set(range(workers))
        self.sent: list[tuple[int, int, Frame]] = []  # (from, to, frame), every frame
        self.routes = [self._node(worker) for worker in range(workers)]

    def _node(self, worker: int) -> PoolRoutes:
        def send(to: int, frame: Frame) -> bool:
            if to not in self.linked or worker not in self.linked:
                return False
            self.sent.append((worker, to, frame))
            self.links.setdefault((worker, to), deque()).append(encode_frame(frame))
            return True

        def broadcast(frame: Frame) -> None:
            for to in self._peers(worker):
                send(to, frame)

        return PoolRoutes(send, broadcast, lambda: self._peers(worker), self.callbacks.append)

    def _peers(self, worker: int) -> set[int]:
        return self.linked - {worker} if worker in self.linked else set()

    def turn(self) -> None:
        """Run the loop callbacks due, then deliver every frame in flight, until quiet."""
        while self.callbacks or any(self.links.values()):
            callbacks = list(self.callbacks)
            self.callbacks.clear()  # the same list: each PoolRoutes holds its `append`
            for callback in callbacks:
                callback()
            for (sender, to), queue in list(self.links.items()):
                while queue:
                    (frame,) = FrameDecoder().feed(queue.popleft())
                    self.routes[to].frame_received(sender, frame)

    def frames_from(self, worker: int) -> list[Frame]:
        return [frame for sender, _to, frame in self.sent if sender == worker]


def test_one_loop_turn_s_changes_leave_in_one_flush_durable_routes_first() -> None:
    pool = Loopback(2)
    a = pool.routes[0]
    a.route_changed("x/+", True)
    a.route_changed("x/+", True)  # a second subscriber: no new transition
    a.route_changed("$share/g/y", True)
    a.durable_route_changed("x/+", True)
    pool.turn()
    assert pool.frames_from(0) == [
        DurableRoutes(("x/+",), ()),
        RoutesChanged(("x/+",), ()),
        SharesChanged(("$share/g/y",), (1,)),
    ]
    b = pool.routes[1]
    assert b.remote.workers_for("x/1") == {0}
    assert b.durable.workers_for("x/1") == {0}
    assert b.needs_store("x/1")
    assert not b.needs_store("z")
    assert len(b.shares) == 1


def test_the_last_subscriber_gone_is_announced_and_the_replica_forgets_the_filter() -> None:
    pool = Loopback(2)
    a, b = pool.routes
    a.route_changed("x", True)
    pool.turn()
    a.route_changed("x", False)
    pool.turn()
    assert pool.frames_from(0)[-1] == RoutesChanged((), ("x",))
    assert b.remote.workers_for("x") == set()


def test_routes_are_known_after_every_linked_worker_answers_one_round_per_turn() -> None:
    pool = Loopback(3)
    a = pool.routes[0]
    known: list[str] = []
    a.route_changed("x", True)
    a.when_routes_known(lambda: known.append("first"))
    a.when_routes_known(lambda: known.append("second"))
    assert known == []
    pool.callbacks.pop()()  # the flush: the change, then one RoutesSync to each peer
    assert [f for f in pool.frames_from(0) if isinstance(f, RoutesSync)] == [RoutesSync(1)] * 2
    assert known == []
    pool.turn()
    assert known == ["first", "second"]
    for worker in (1, 2):  # the round came after the change on each link: it is applied
        assert pool.routes[worker].remote.workers_for("x") == {0}


def test_a_worker_that_goes_down_no_longer_holds_a_round_up() -> None:
    pool = Loopback(3)
    a = pool.routes[0]
    known: list[bool] = []
    a.when_routes_known(lambda: known.append(True))
    pool.callbacks.pop()()
    pool.links[(0, 2)].clear()  # worker 2 dies before it reads the RoutesSync
    pool.linked.discard(2)
    pool.turn()
    assert known == []  # worker 1 answered; 2 has not
    a.peer_down(2)
    assert known == [True]


def test_without_a_linked_worker_routes_are_known_at_once() -> None:
    pool = Loopback(2)
    pool.linked = {0}
    known: list[bool] = []
    pool.routes[0].when_routes_known(lambda: known.append(True))
    assert known == [True]
    assert pool.callbacks == []


def test_a_worker_that_links_gets_the_snapshots_and_one_that_goes_loses_its_routes() -> None:
    pool = Loopback(2)
    pool.linked = {0}
    a, b = pool.routes
    a.route_changed("x", True)
    a.route_changed("y", True)
    pool.turn()  # nobody to tell
    a.route_changed("y", False)  # a change not flushed yet when the peer links
    pool.linked = {0, 1}
    a.peer_up(1)
    pool.turn()
    first_frames = pool.frames_from(0)[:2]  # what 1 had not heard, then everything
    assert first_frames == [RoutesChanged((), ("y",)), RoutesSnapshot(("x",))]
    assert b.remote.workers_for("x") == {0}
    assert b.remote.workers_for("y") == set()
    b.peer_down(0)
    assert b.remote.workers_for("x") == set()
