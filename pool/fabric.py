"""The fabric's interface: what a worker needs from its links to the other workers
(`Fabric`), and what those links tell it (`FabricHandler`).

The pool worker starts and stops a `Fabric`; its `PoolNode` sends through it and is its
handler. `pool.link.UnixFabric` is the fabric of one machine's pool (a Unix socket per pair
of workers); another link (a cluster's, joining brokers on several machines) plugs in by
providing the same methods with the same guarantees:
- frames to one peer arrive in the order they were sent (the `RoutesSync` and `CommitSync`
  rounds rest on it), each exactly once while the link to that peer is up;
- `peer_up` comes before that peer's first frame, and `peer_down` once when its link is lost;
  a peer that comes back (a new `epoch`: its next life) is `peer_up` again;
- nothing blocks: `send` and `broadcast` queue, and the handler is called from the
  worker's event loop.
"""

from __future__ import annotations

from typing import Protocol

from pool.frames.codec import Frame


class FabricHandler(Protocol):
    """Who hears the fabric: called from the event loop, so none of these may block."""

    def peer_up(self, worker: int, epoch: int) -> None: ...

    def peer_down(self, worker: int) -> None: ...

    def frames_received(self, worker: int, frames: list[Frame]) -> None: ...


class Fabric(Protocol):
    """This worker's links to the others: send to one, broadcast to all."""

    @property
    def peers(self) -> set[int]:
        """The workers linked now."""
        ...

    def start(self) -> None:
        """Link to the other workers, now and whenever a link is lost; the handler hears
        each one that comes up."""

    def stop(self) -> None:
        """Close every link (the worker is shutting down); the handler hears no more."""

    def send(self, worker: int, frame: Frame) -> bool:
        """Queue `frame` for `worker`; False if it is not linked now (down or not yet up)."""
        ...

    def broadcast(self, frame: Frame) -> None:
        """Queue `frame` for every linked worker."""
