"""Which pool worker runs a bridge (pure).

Each bridge runs in exactly one worker: the first live one counting up from the home of its
session's client id (`pool.ownership.home_of("$bridge/<name>")`), wrapping around. While
the home is up it runs the bridge; when it dies the next live worker takes the bridge over
(its session, with the queue, moves there as any session does: docs/pool.md), and gives it
back when the home is linked again.

In a cluster each bridge runs on one node: of the live nodes that have it configured
(`bridge_nodes`: each node says which in its heartbeats), the one that ranks first for it
(`runner_node`, rendezvous hashing: each node's rank is a hash of the bridge's name and the
node's), and there in the worker `runner_of` picks. Nodes need no list of the cluster's
members for that: a node that comes back takes back the bridges it ranks first for, and the
others keep theirs.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Mapping

from core.client import BRIDGE_CLIENT_PREFIX
from pool.ownership import home_of


def runner_of(name: str, workers: int, live: Collection[int]) -> int | None:
    """The worker of `workers` that runs bridge `name` while `live` are up (None: none)."""
    home = home_of(BRIDGE_CLIENT_PREFIX + name, workers)
    for step in range(workers):
        candidate = (home + step) % workers
        if candidate in live:
            return candidate
    return None


def bridge_nodes(name: str, nodes: Mapping[str, Collection[str]]) -> list[str]:
    """The nodes of `nodes` (node -> the bridges it has configured) that have `name`."""
    return [node for node, bridges in nodes.items() if name in bridges]


def runner_node(name: str, nodes: Collection[str]) -> str | None:
    """The node of `nodes` (the live ones) that runs bridge `name` (None: no node)."""
    return max(nodes, key=lambda node: (zlib.crc32(f"{name}\0{node}".encode()), node), default=None)
