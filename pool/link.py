"""The fabric of one machine's pool (`UnixFabric`, a `pool.fabric.Fabric`): this worker's
links to the other workers, over Unix sockets.

What travels is `pool.frames` (pure); this module only moves the bytes, on gevent's loop
like a client connection (`net.connection`): a read watcher decodes whole reads into
frames, and writes go through a `Transport`, which never blocks the writer. Frames sent to
one peer within one loop turn leave in one write: a publish batch's forwards and route
changes cost one send per peer, not one per frame.

Topology: every worker listens on `fabric-<id>.sock` in the pool's run directory and
connects to every worker with a lower id, retrying until that worker listens (it may be
starting or restarting); so a pair has exactly one link, and a restarted worker is linked
again by the workers above it, which retry, and by the ones below it, which it connects to.
The first frame each way is `Hello(worker, epoch)`; a second link from the same worker
replaces the first (it restarted and its old link has not been noticed dead yet). A Hello
that names another `FRAMES_VERSION` closes the link (logged once per worker and version):
a worker restarted on newer code than the pool's others does not speak their frames.

The owner (`FabricHandler`) hears `peer_up` after the hello, the frames of that peer in
order, and `peer_down` once when the link is lost. A peer that sends a frame that does not
parse has its link closed (logged): it runs other code than this worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent

from net.transport import Transport
from pool.fabric import FabricHandler
from pool.frames.codec import Frame, FrameDecoder, encode_frame
from pool.frames.peers import FRAMES_VERSION, Hello
from pool.frames.validation import FrameError

if TYPE_CHECKING:  # gevent's loop and watcher types exist in its stubs only
    from gevent._types import _IoWatcher, _Loop

logger = logging.getLogger(__name__)

# Under glibc's mmap threshold (128 KiB): recv allocates its whole buffer before it reads,
# and a bigger one was mapped, shrunk and unmapped on every read (three system calls and
# the page faults, on every hop of a message to another worker).
READ_SIZE = 65536
RETRY_FIRST, RETRY_MAX = 0.02, 1.0  # seconds between attempts to reach a worker not listening
_READ = 1


def socket_path(run_dir: Path, worker: int) -> Path:
    return run_dir / f"fabric-{worker}.sock"


class PeerLink:
    """One stream socket to one peer: frames out, batched per loop turn; frames in."""

    __slots__ = (
        "_decoder",
        "_loop",
        "_on_frames",
        "_on_lost",
        "_out",
        "_reader",
        "_sock",
        "transport",
        "worker",
    )

    def __init__(
        self,
        sock: socket.socket,
        loop: _Loop,
        on_frames: Callable[[PeerLink, list[Frame]], None],
        on_lost: Callable[[PeerLink, str], None],
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._loop = loop
        self.worker: int | None = None  # known once its Hello arrived
        self.transport = Transport(sock, "fabric peer", loop)
        self.transport.on_error = lambda error: self._lost(f"write failed: {error}")
        self.transport.on_closing = self._stop_reading
        self._decoder = FrameDecoder()
        self._out: list[bytes] = []
        self._on_frames = on_frames
        self._on_lost: Callable[[PeerLink, str], None] | None = on_lost
        self._reader: _IoWatcher | None = loop.io(sock.fileno(), _READ)
        self._reader.start(self._on_readable)

    def send(self, frame: Frame) -> bool:
        """Queue `frame`; it leaves with the others of this loop turn. False if closed."""
        if self.transport.closed:
            return False
        if not self._out:
            self._loop.run_callback(self._flush)
        self._out.append(encode_frame(frame))
        return True

    def close(self) -> None:
        """Close after what was queued is written; the owner is not told (it asked)."""
        self._on_lost = None
        self._flush()
        self.transport.close()

    def _flush(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            self.transport.write(data)

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(READ_SIZE)
        except BlockingIOError:
            return
        except OSError as error:
            self._lost(str(error))
            return
        if not data:
            self._lost("closed by the peer")
            return
        try:
            frames = self._decoder.feed(data)
        except FrameError as error:
            self._lost(f"sent a frame that does not parse ({error})")
            return
        if frames:
            self._on_frames(self, frames)

    def _stop_reading(self) -> None:
        if self._reader is not None:
            self._reader.stop()
            self._reader = None

    def _lost(self, why: str) -> None:
        on_lost, self._on_lost = self._on_lost, None
        self._out.clear()
        self.transport.close()
        self._stop_reading()
        if on_lost is not None:
            on_lost(self, why)


class UnixFabric:
    """This worker's links to the others over Unix sockets: send to one, broadcast to all,
    hear from each."""

    def __init__(
        self, worker: int, workers: int, run_dir: Path, epoch: int, handler: FabricHandler
    ) -> None:
        self.worker = worker
        self.workers = workers
        self.epoch = epoch
        self._run_dir = run_dir
        self._handler = handler
        self._loop = gevent.get_hub().loop
        self._links: dict[int, PeerLink] = {}  # peers past their Hello
        self._pending: set[PeerLink] = set()  # accepted or connected, Hello not yet in
        self._foreign: set[tuple[int, int]] = set()  # (worker, frames version) logged
        self._listener: socket.socket | None = None
        self._acceptor: _IoWatcher | None = None
        self._dialers: list[gevent.Greenlet[..., Any]] = []
        self._stopped = False

    @property
    def peers(self) -> set[int]:
        """The workers linked now."""
        return set(self._links)

    def start(self) -> None:
        """Listen, and keep a link to every worker with a lower id."""
        path = socket_path(self._run_dir, self.worker)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by this worker's previous life
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(os.fspath(path))
        listener.listen(self.workers * 2)
        listener.setblocking(False)
        self._listener = listener
        self._acceptor = self._loop.io(listener.fileno(), _READ)
        self._acceptor.start(self._accept)
        self._dialers = [gevent.spawn(self._dial, peer) for peer in range(self.worker)]

    def stop(self) -> None:
        """Close every link and stop listening (the worker is shutting down)."""
        self._stopped = True
        gevent.killall(self._dialers)
        if self._acceptor is not None:
            self._acceptor.stop()
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(FileNotFoundError):
                socket_path(self._run_dir, self.worker).unlink()
        for link in [*self._links.values(), *self._pending]:
            link.close()
        self._links.clear()
        self._pending.clear()

    def send(self, worker: int, frame: Frame) -> bool:
        """Queue `frame` for `worker`; False if it is not linked now (down or not yet up)."""
        link = self._links.get(worker)
        return link is not None and link.send(frame)

    def broadcast(self, frame: Frame) -> None:
        """Queue `frame` for every linked worker."""
        for link in self._links.values():
            link.send(frame)

    # ----- links ------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _address = self._listener.accept()
        except BlockingIOError:
            return
        self._adopt(sock)

    def _dial(self, peer: int) -> None:
        """Connect to `peer` and, whenever that link is lost, connect again."""
        delay = RETRY_FIRST
        path = os.fspath(socket_path(self._run_dir, peer))
        while not self._stopped:
            if peer in self._links or any(link.worker == peer for link in self._pending):
                gevent.sleep(RETRY_MAX)
                continue
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
            except OSError:
                sock.close()
                gevent.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            delay = RETRY_FIRST
            link = self._adopt(sock)
            link.worker = peer  # expected; its Hello confirms it
            gevent.sleep(RETRY_FIRST)

    def _adopt(self, sock: socket.socket) -> PeerLink:
        link = PeerLink(sock, self._loop, self._frames_received, self._link_lost)
        self._pending.add(link)
        link.send(Hello(self.worker, self.epoch))
        return link

    def _frames_received(self, link: PeerLink, frames: list[Frame]) -> None:
        if link in self._pending:
            hello = frames[0]
            if not isinstance(hello, Hello) or not 0 <= hello.worker < self.workers:
                self._pending.discard(link)
                link.close()
                logger.error(
                    "a fabric peer began with %r instead of a Hello from a worker of this "
                    "pool: link closed; is another broker using run directory %s?",
                    hello,
                    self._run_dir,
                )
                return
            self._pending.discard(link)
            if hello.frames != FRAMES_VERSION:
                link.close()
                self._other_version(hello)
                return
            link.worker = hello.worker
            old = self._links.get(hello.worker)
            if old is not None:  # it restarted before its old link was noticed dead
                old.close()
                self._handler.peer_down(hello.worker)
            self._links[hello.worker] = link
            logger.info("fabric: linked to worker %d (epoch %d)", hello.worker, hello.epoch)
            self._handler.peer_up(hello.worker, hello.epoch)
            frames = frames[1:]
            if not frames:
                return
        assert link.worker is not None
        self._handler.frames_received(link.worker, frames)

    def _other_version(self, hello: Hello) -> None:
        if (hello.worker, hello.frames) in self._foreign:
            return
        self._foreign.add((hello.worker, hello.frames))
        logger.error(
            "fabric: worker %d speaks frame version %d and this worker %d: link closed; the "
            "pool's workers run different code (was the broker upgraded while it ran?): "
            "restart the whole pool",
            hello.worker,
            hello.frames,
            FRAMES_VERSION,
        )

    def _link_lost(self, link: PeerLink, why: str) -> None:
        worker = link.worker
        if link in self._pending:
            self._pending.discard(link)
            logger.warning("fabric: a link closed before its Hello: %s", why)
        elif worker is not None and self._links.get(worker) is link:
            del self._links[worker]
            # The handler's peer_down says whether that was expected (a clean stop) or not.
            logger.info("fabric: link to worker %d lost: %s", worker, why)
            self._handler.peer_down(worker)
