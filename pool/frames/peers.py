"""A link's own frames: the `Hello` that opens it and the `Leaving` that says its close is
expected (kinds 1 and 17, pool.frames.codec)."""

from __future__ import annotations

from dataclasses import dataclass

# The version of the frames this code speaks: raise it whenever a frame's layout or meaning
# changes. A peer whose `Hello` names another is not linked (pool.link, cluster.fabric): its
# frames would not parse here, or would mean something else.
FRAMES_VERSION = 1


@dataclass(frozen=True, slots=True)
class Hello:
    """The first frame on a link: who is talking, and which life of that worker it is. A
    cluster node's workers also say, in every heartbeat, the bridges their node has
    configured (`bridge.placement`: only those nodes run them); a pool's links send none.
    `frames`: the sender's `FRAMES_VERSION`."""

    worker: int
    epoch: int
    bridges: tuple[str, ...] = ()
    frames: int = FRAMES_VERSION


@dataclass(frozen=True, slots=True)
class Leaving:
    """The sender is shutting down: its link closing next is expected, not a failure."""

    worker: int
