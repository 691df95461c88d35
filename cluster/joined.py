"""The pool's forwarder and route replication joined with the cluster's, so the dispatcher and
the router each keep talking to one object (docs/cluster.md "Inside a node").

A publish goes to this node's other workers through the pool (`PoolNode`, absent with one
worker) and to the other nodes' workers through the cluster (`ClusterMember`): each wanting
it gets it once. A share group's stand-in picked goes to the side its share id names (other
nodes' workers from `PEER_SHARE_IDS` on, cluster.shares). A route change is told to both; a
SUBACK waits for both rounds. A QoS 1/2 acknowledgement waits for the commits of the
persistent sessions' workers on this node (the pool's round) and on the others (the
cluster's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from actors.dispatch import RemoteForwarder
from actors.router_actor import RouteReplication
from core.flow import Gate
from core.message import Message
from core.share_origin import ShareOrigin
from router.share_replica import PEER_SHARE_IDS, RemoteShares


class Member(Protocol):
    """What the joined objects ask of the cluster (cluster.member.ClusterMember)."""

    def add(self, message: Message) -> bool: ...

    def add_share(self, peer: int, message: Message, share: ShareOrigin) -> None: ...

    def flush(
        self,
        retained: list[Message],
        on_durable: Callable[[], object] | None,
        publisher: Gate | None = None,
    ) -> Callable[[], None] | None: ...

    def route_changed(self, topic_filter: str, added: bool) -> None: ...

    def durable_route_changed(self, topic_filter: str, added: bool) -> None: ...

    def when_routes_known(self, then: Callable[[], object]) -> None: ...


class JoinedForwarder:
    """The dispatcher's `RemoteForwarder`: the pool's (if any), then the cluster's."""

    __slots__ = ("_member", "_pool", "add", "shares", "worker")

    def __init__(self, pool: RemoteForwarder | None, member: Member) -> None:
        self._pool = pool
        self._member = member
        self.worker = 0 if pool is None else pool.worker
        self.shares = RemoteShares() if pool is None else pool.shares
        # Whether another worker or node wants a message (it is then sent at `flush`). The
        # dispatcher asks once per message published: with no pool that is the member's own
        # `add`, not a call through this object.
        self.add: Callable[[Message], bool] = member.add if pool is None else self._add_both

    def _add_both(self, message: Message) -> bool:
        assert self._pool is not None
        wanted = self._pool.add(message)
        return self._member.add(message) or wanted

    def needs_store(self, topic: str) -> bool:
        return self._pool is not None and self._pool.needs_store(topic)

    def add_share(self, worker: int, message: Message, share: ShareOrigin) -> None:
        if worker >= PEER_SHARE_IDS:
            self._member.add_share(worker - PEER_SHARE_IDS, message, share)
            return
        assert self._pool is not None  # a stand-in for this node's workers: a pool's
        self._pool.add_share(worker, message, share)

    def flush(
        self,
        retained: list[Message],
        on_durable: Callable[[], object] | None,
        publisher: Gate | None = None,
    ) -> Callable[[], object] | None:
        """The acks wait for the other nodes' commits (the member's part), which wait for the
        pool's workers' (the pool's part), which wait for this worker's own commit."""
        member_part = self._member.flush(retained, on_durable, publisher)
        if self._pool is None:
            return member_part
        pool_part = self._pool.flush(
            retained, on_durable if member_part is None else member_part, publisher
        )
        return member_part if pool_part is None else pool_part


class JoinedReplication:
    """The router's `RouteReplication`: route changes to the pool (if any) and the cluster."""

    __slots__ = ("_member", "_pool")

    def __init__(self, pool: RouteReplication | None, member: Member) -> None:
        self._pool = pool
        self._member = member

    def route_changed(self, topic_filter: str, added: bool) -> None:
        if self._pool is not None:
            self._pool.route_changed(topic_filter, added)
        self._member.route_changed(topic_filter, added)

    def durable_route_changed(self, topic_filter: str, added: bool) -> None:
        if self._pool is not None:
            self._pool.durable_route_changed(topic_filter, added)
        self._member.durable_route_changed(topic_filter, added)

    def when_routes_known(self, then: Callable[[], object]) -> None:
        """`then` once the pool's workers and the other nodes' have applied the changes."""
        pool = self._pool
        if pool is None:
            self._member.when_routes_known(then)
            return
        left = [2]

        def one_known() -> None:
            left[0] -= 1
            if not left[0]:
                then()

        pool.when_routes_known(one_known)
        self._member.when_routes_known(one_known)
