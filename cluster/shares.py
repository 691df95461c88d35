"""Share groups across the cluster's nodes: the other nodes' workers' members of each group,
kept in the dispatcher's `RemoteShares` beside the pool's (docs/cluster.md "Share groups").

Every worker of every node announces its own member counts to the other nodes' workers as it
does to its pool (`PoolRoutes`' `SharesChanged`/`SharesSnapshot` over the `NatsFabric`);
`ClusterShares` writes what they announce into the one `RemoteShares` the dispatcher merges
its groups with, so a group's stand-ins are the pool's workers and the other nodes' workers
alike, and a strategy picks one member cluster-wide. A peer numbered `n` by the fabric has
the share id `PEER_SHARE_IDS + n` there, above every pool worker's id; a dead or leaving
peer's members go with it.

Stand-in ids are local numbers, so the `tried` set of a `ShareOrigin` that crosses to another
node names stand-ins globally: `outgoing` turns `stand_in(id)` into `"\\0<node>.<worker>"`,
`incoming` turns that back into this worker's id for the same peer (its own node's workers
into their pool ids). Real members' client ids are the same cluster-wide (one session per
client id).

`order` sorts a group's stand-ins and real members by (node, worker) on every worker of
every node, so the hashes pick the same member whichever node publishes.
"""

from __future__ import annotations

from typing import Protocol

from core.share_origin import ShareMark, ShareOrigin
from pool.frames.routes import SharesChanged, SharesSnapshot
from router.share_replica import PEER_SHARE_IDS, GroupCounts, RemoteShares

_STAND_IN = "\0"  # how every stand-in id begins (router.share_replica.stand_in)


class Peers(Protocol):
    """What the shares need of the fabric (cluster.fabric.NatsFabric)."""

    def name_of(self, worker: int) -> str: ...

    def workers_of(self, node: str) -> list[int]: ...


class ClusterShares:
    """The other nodes' members of each share group, in the dispatcher's `RemoteShares`."""

    __slots__ = ("_node", "_peers", "shares")

    def __init__(self, node: str, peers: Peers) -> None:
        self._node = node
        self._peers = peers
        self.shares = RemoteShares()  # replaced by the dispatcher's (`use`) before linking

    def use(self, shares: RemoteShares) -> None:
        """Keep the other nodes' members in `shares` (the pool's, or one worker's own)."""
        shares.order = self.order
        self.shares = shares

    def frame_received(self, peer: int, frame: SharesChanged | SharesSnapshot) -> None:
        counts = GroupCounts(frame.filters, frame.counts)
        if isinstance(frame, SharesSnapshot):
            self.shares.replace(PEER_SHARE_IDS + peer, counts)
        else:
            self.shares.changed(PEER_SHARE_IDS + peer, counts)

    def peer_down(self, peer: int) -> None:
        """`peer` is gone: none of its members can be picked any more."""
        self.shares.drop_worker(PEER_SHARE_IDS + peer)

    def order(self, share_id: int) -> tuple[str, int]:
        """(node, worker) of a share id: the same place in a group on every node."""
        if share_id < PEER_SHARE_IDS:
            return self._node, share_id
        node, _, worker = self._peers.name_of(share_id - PEER_SHARE_IDS).rpartition(".")
        return node, int(worker)

    def outgoing(self, share: ShareOrigin) -> ShareOrigin:
        """`share` as another node reads it: its stand-ins by global name."""
        if not any(tried.startswith(_STAND_IN) for tried in share.tried):
            return share
        return share._replace(tried=frozenset(self._global(tried) for tried in share.tried))

    def incoming(self, marks: tuple[ShareMark, ...]) -> tuple[ShareMark, ...]:
        """Marks from another node with their stand-ins by this worker's ids."""
        return tuple(
            mark._replace(shares=tuple(self.local(share) for share in mark.shares))
            for mark in marks
        )

    def local(self, share: ShareOrigin) -> ShareOrigin:
        """`share` as another node wrote it (`outgoing`), with this worker's ids."""
        if not any(tried.startswith(_STAND_IN) for tried in share.tried):
            return share
        return share._replace(tried=frozenset(self._local(tried) for tried in share.tried))

    def _global(self, tried: str) -> str:
        if not tried.startswith(_STAND_IN) or "." in tried:  # a client id, or global already
            return tried
        node, worker = self.order(int(tried[1:]))
        return f"{_STAND_IN}{node}.{worker}"

    def _local(self, tried: str) -> str:
        """A global stand-in name as this worker's id; as it is if that peer is not linked
        (no stand-in of it can be picked then anyway)."""
        if not tried.startswith(_STAND_IN):
            return tried
        name = tried[1:]
        node, _, worker = name.rpartition(".")
        if node == self._node:
            return f"{_STAND_IN}{worker}"
        for peer in self._peers.workers_of(node):
            if self._peers.name_of(peer) == name:
                return f"{_STAND_IN}{PEER_SHARE_IDS + peer}"
        return tried
