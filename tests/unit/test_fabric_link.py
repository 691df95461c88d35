"""The embedded fabric (pool/link.py): real Unix sockets between UnixFabric objects.

Several workers' fabrics run in this one process on the same gevent hub, each with its own
socket in a temporary run directory, as the pool's workers do in their own processes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import gevent
import gevent.socket
import pytest

from core.message import stored_message
from pool.frames.codec import Frame, encode_frame
from pool.frames.forwarding import Forward
from pool.frames.ownership import Claim
from pool.frames.peers import FRAMES_VERSION, Hello
from pool.frames.routes import RoutesChanged
from pool.link import UnixFabric, socket_path


class Recorder:
    """A FabricHandler that records what it hears."""

    def __init__(self) -> None:
        self.up: list[tuple[int, int]] = []
        self.down: list[int] = []
        self.frames: list[tuple[int, Frame]] = []

    def peer_up(self, worker: int, epoch: int) -> None:
        self.up.append((worker, epoch))

    def peer_down(self, worker: int) -> None:
        self.down.append(worker)

    def frames_received(self, worker: int, frames: list[Frame]) -> None:
        self.frames.extend((worker, frame) for frame in frames)


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    with gevent.Timeout(timeout, AssertionError("condition not reached in time")):
        while not condition():
            gevent.sleep(0.005)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Callable[[int, int, int], tuple[UnixFabric, Recorder]]]:
    started: list[UnixFabric] = []

    def start(worker: int, workers: int, epoch: int = 1) -> tuple[UnixFabric, Recorder]:
        recorder = Recorder()
        fabric = UnixFabric(worker, workers, tmp_path, epoch, recorder)
        fabric.start()
        started.append(fabric)
        return fabric, recorder

    yield start
    for fabric in started:
        fabric.stop()


def test_three_workers_link_pairwise_once(
    pool: Callable[..., tuple[UnixFabric, Recorder]],
) -> None:
    fabrics = [pool(worker, 3) for worker in (2, 0, 1)]  # any start order
    wait_for(lambda: all(len(fabric.peers) == 2 for fabric, _ in fabrics))
    for fabric, recorder in fabrics:
        assert sorted(worker for worker, _epoch in recorder.up) == sorted(
            {0, 1, 2} - {fabric.worker}
        )


def test_frames_arrive_in_order_and_batched_sends_all_arrive(
    pool: Callable[..., tuple[UnixFabric, Recorder]],
) -> None:
    zero, _ = pool(0, 2)
    one, heard = pool(1, 2)
    wait_for(lambda: zero.peers == {1} and one.peers == {0})
    payload = b"x" * 300_000  # larger than one read
    sent: list[Frame] = [RoutesChanged(("a/+",), ())]
    sent += [
        Forward((stored_message("a/b", payload, 1, False, "p", None, 1.0, {}, n),))
        for n in range(1, 4)
    ]
    sent.append(Claim("c", 0))
    for frame in sent:
        assert zero.send(1, frame)
    wait_for(lambda: len(heard.frames) == len(sent))
    assert heard.frames == [(0, frame) for frame in sent]


def test_broadcast_reaches_every_linked_worker(
    pool: Callable[..., tuple[UnixFabric, Recorder]],
) -> None:
    zero, _ = pool(0, 3)
    _one, heard_one = pool(1, 3)
    _two, heard_two = pool(2, 3)
    wait_for(lambda: zero.peers == {1, 2})
    zero.broadcast(RoutesChanged(("t",), ()))
    wait_for(lambda: bool(heard_one.frames and heard_two.frames))
    assert heard_one.frames == heard_two.frames == [(0, RoutesChanged(("t",), ()))]


def test_a_worker_that_dies_is_reported_down_and_linked_again_when_back(
    pool: Callable[..., tuple[UnixFabric, Recorder]],
) -> None:
    zero, heard_zero = pool(0, 2)
    one, heard_one = pool(1, 2)
    wait_for(lambda: zero.peers == {1})
    zero.stop()  # worker 0 dies (its socket file goes with it)
    wait_for(lambda: heard_one.down == [0])
    assert not one.send(0, Claim("c", 1))
    again, _ = pool(0, 2, epoch=2)  # restarted: the higher worker dials it again
    wait_for(lambda: one.peers == {0} and again.peers == {1})
    assert heard_one.up[-1] == (0, 2)
    assert heard_zero.down == []  # stopped on purpose: its own handler hears nothing


def test_a_peer_that_does_not_speak_the_fabric_is_closed_and_logged(
    pool: Callable[..., tuple[UnixFabric, Recorder]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    zero, heard = pool(0, 2)
    stranger = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stranger.connect(str(socket_path(tmp_path, 0)))
    stranger.sendall(b"GET / HTTP/1.1\r\n\r\n")
    stranger.settimeout(5)
    # The fabric's Hello, then end of stream: the link was closed.
    received = b""
    while chunk := stranger.recv(4096):
        received += chunk
    assert received  # its Hello
    assert zero.peers == set() and heard.up == []
    assert "does not parse" in caplog.text or "instead of a Hello" in caplog.text
    stranger.close()


def test_a_worker_of_another_frames_version_is_closed_and_logged_once(
    pool: Callable[..., tuple[UnixFabric, Recorder]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    zero, heard = pool(0, 2)
    for _attempt in range(2):  # as worker 1, restarted on other code, dials again
        other = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        other.connect(str(socket_path(tmp_path, 0)))
        other.sendall(encode_frame(Hello(1, 5, (), FRAMES_VERSION + 1)))
        other.settimeout(5)
        while other.recv(4096):  # this worker's Hello, then end of stream: closed
            pass
        other.close()
    assert zero.peers == set() and heard.up == []
    lines = [r.getMessage() for r in caplog.records if "speaks frame version" in r.getMessage()]
    assert lines == [
        f"fabric: worker 1 speaks frame version {FRAMES_VERSION + 1} and this worker "
        f"{FRAMES_VERSION}: link closed; the pool's workers run different code (was the broker "
        "upgraded while it ran?): restart the whole pool"
    ]
