"""Flow control across the workers of a pool, pure: who holds which publisher, over the fabric.

In one worker a session over its high-water mark holds the publishing connections that feed
it (`core.flow`). In a pool the session may live on another worker than its publisher, so
the hold travels (docs/overload.md, "Flow control across workers"):

- The publisher's worker gives each publishing connection it forwards from a small id
  (`Publishers.id_of`) and puts it in the `Forward` frame.
- The receiving worker hands its sessions a `RemoteGate` for that (worker, id) in place of
  the connection's intake. The session holds and releases it as any publisher; the gate
  turns each hold and release into a `FlowHold`/`FlowRelease` frame back to the publisher's
  worker, which holds or releases the connection's intake (`Publishers.hold`/`release`).
- A link that goes down releases what the peer held (`Publishers.peer_down`), and the
  receiver forgets the peer's gates (`RemoteGates.peer_down`): a dead worker never leaves a
  publisher paused.

Holds are counted, never collapsed: each `FlowHold` is undone by one `FlowRelease` of the
same id and reason, as `Gate.hold` is by `Gate.release`. Links are FIFO, so a publisher's
holds and releases arrive in the order the receiver made them.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable

from core.flow import FlowState, Gate
from pool.frames.codec import Frame
from pool.frames.flow import FlowHold, FlowRelease


class Publishers:
    """The publishing side: ids for this worker's publishing connections, and the holds
    other workers placed on them."""

    __slots__ = ("_gates", "_holds", "_ids", "_next")

    def __init__(self) -> None:
        self._ids: weakref.WeakKeyDictionary[Gate, int] = weakref.WeakKeyDictionary()
        self._gates: weakref.WeakValueDictionary[int, Gate] = weakref.WeakValueDictionary()
        self._next = 0
        # Per peer: (publisher id, reason) -> holds it placed and has not released.
        self._holds: dict[int, Counter[tuple[int, FlowState]]] = {}

    def id_of(self, gate: Gate) -> int:
        """The id of `gate` (an intake) in `Forward` frames; ids start at 1 (0 is none)."""
        publisher = self._ids.get(gate)
        if publisher is None:
            self._next += 1
            publisher = self._ids[gate] = self._next
            self._gates[publisher] = gate
        return publisher

    def hold(self, worker: int, frame: FlowHold) -> None:
        """`worker` holds the publisher `frame` names (if it is still connected)."""
        why = FlowState(frame.why)
        self._holds.setdefault(worker, Counter())[frame.publisher, why] += 1
        gate = self._gates.get(frame.publisher)
        if gate is not None:
            gate.hold(why)

    def release(self, worker: int, frame: FlowRelease) -> None:
        """`worker` undoes one of its holds; a release without a hold is ignored."""
        why = FlowState(frame.why)
        holds = self._holds.get(worker)
        key = (frame.publisher, why)
        if holds is None or not holds[key]:
            return
        holds[key] -= 1
        if not holds[key]:
            del holds[key]
        gate = self._gates.get(frame.publisher)
        if gate is not None:
            gate.release(why)

    def held_by(self, worker: int) -> int:
        """How many holds `worker` has on this worker's publishers now."""
        return sum(self._holds.get(worker, Counter()).values())

    def peer_down(self, worker: int) -> None:
        """`worker` is gone: release every hold it had placed."""
        for (publisher, why), count in self._holds.pop(worker, Counter()).items():
            gate = self._gates.get(publisher)
            if gate is None:
                continue
            for _ in range(count):
                gate.release(why)


class RemoteGate:
    """Another worker's publisher, as the sessions here hold it: each hold and release
    is a frame to that worker, until the link to it goes down (`live` False: that worker
    released everything, and a restarted one reuses the ids for other publishers)."""

    __slots__ = ("_gates", "held", "live", "publisher", "worker")

    def __init__(self, gates: RemoteGates, worker: int, publisher: int) -> None:
        self._gates = gates
        self.worker = worker
        self.publisher = publisher
        self.held = 0
        self.live = True

    def hold(self, why: FlowState) -> None:
        if not self.live:
            return
        if not self.held:
            self._gates.remember(self)
        self.held += 1
        self._gates.send(self.worker, FlowHold(self.publisher, why.value))

    def release(self, why: FlowState) -> None:
        if not self.live:
            return
        self.held -= 1
        self._gates.send(self.worker, FlowRelease(self.publisher, why.value))
        if not self.held:
            self._gates.forget(self)


class RemoteGates:
    """The receiving side: one `RemoteGate` per (worker, publisher id) while it is held
    (a gate never held is not kept).

    `send(worker, frame)` sends a frame to a worker (False if it is not linked: the frame is
    then moot, as that worker has released everything this one held)."""

    __slots__ = ("_gates", "send")

    def __init__(self, send: Callable[[int, Frame], bool]) -> None:
        self.send = send
        self._gates: dict[tuple[int, int], RemoteGate] = {}

    def __len__(self) -> int:
        return len(self._gates)

    def gate(self, worker: int, publisher: int) -> RemoteGate:
        """The gate of `worker`'s publisher `publisher` (the same one while it is held, so a
        session over its mark holds it once, however many batches it sends)."""
        gate = self._gates.get((worker, publisher))
        return RemoteGate(self, worker, publisher) if gate is None else gate

    def remember(self, gate: RemoteGate) -> None:
        """`gate` is held now."""
        self._gates[gate.worker, gate.publisher] = gate

    def forget(self, gate: RemoteGate) -> None:
        """`gate` holds nothing any more."""
        if self._gates.get((gate.worker, gate.publisher)) is gate:
            del self._gates[gate.worker, gate.publisher]

    def peer_down(self, worker: int) -> None:
        """`worker` is gone, and with it every hold on its publishers."""
        for key in [key for key in self._gates if key[0] == worker]:
            self._gates.pop(key).live = False
