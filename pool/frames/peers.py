"""A link's own frames: the `Hello` that opens it and the `Leaving` that says its close is
expected (kinds 1 and 17, pool.frames.codec)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Hello:
    """The first frame on a link: who is talking, and which life of that worker it is. A
    cluster node's workers also say, in every heartbeat, the bridges their node has
    configured (`bridge.placement`: only those nodes run them); a pool's links send none."""

    worker: int
    epoch: int
    bridges: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Leaving:
    """The sender is shutting down: its link closing next is expected, not a failure."""

    worker: int
