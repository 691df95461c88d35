"""What a worker asks of its membership of a cluster of brokers (docs/cluster.md): the
protocol `cluster.member.ClusterMember` satisfies. The composition root (actors.main) gives
the broker one when the configuration has a `[cluster]` table; the actors never import the
cluster package itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from actors.admission import Admission
from actors.context import Sessions
from actors.dispatch import RemoteForwarder
from actors.router_actor import RouteReplication
from core.message import Message
from router.fan_out import Route

# The other nodes' answers to an operation: each node's parts (one per worker that answered,
# its rows), and the nodes left out (not linked, or silent past the timeout).
NodesGathered = tuple[dict[str, list[list[dict[str, Any]]]], list[str]]


class ClusterPart(Protocol):
    """This worker in the cluster: it hears the route changes, forwards publishes to the
    other nodes beside the pool's forwarding, claims each client id cluster-wide before
    the node's registry opens a session, and shares the bans."""

    def joined_replication(self, pool: RouteReplication | None) -> RouteReplication: ...

    def joined_forwarder(self, pool: RemoteForwarder | None) -> RemoteForwarder: ...

    def joined_sessions(self, inner: Sessions) -> Sessions: ...

    def restored_route(self, topic_filter: str, client_id: str, route: Route) -> None:
        """A persistent session restored from the store at start-up subscribes to
        `topic_filter` (`route`): the other nodes forward to it and wait for its commits
        (share groups stay on their node), and what they had forwarded to the node's
        previous life and never saw confirmed reaches it (`cluster.restored_sessions`)."""

    def rehosted_session(self, client_id: str, routes: Sequence[tuple[str, Route]]) -> None:
        """A pool's worker re-hosted, from the store, a session of another worker that died
        alone: it subscribes to each filter of `routes` (with its route, already routed),
        and what other nodes give the dead worker's next life reaches it too."""

    def relay_unconfirmed(self, relay: Callable[[tuple[Message, ...]], object]) -> None:
        """A pool worker's: `relay` hands the other workers of the pool what another node
        gives this node's restored sessions, as a session restored on one worker may have
        lived on another."""

    def unconfirmed_relayed(self, messages: tuple[Message, ...]) -> None:
        """Those messages, from another worker of the pool: to this worker's restored
        sessions."""

    def keep_bans(self, admission: Admission, bans_file: Path | None) -> None:
        """From `start` on, `admission`'s bans are the cluster's: made here, they go to its
        bucket too, and what the bucket holds holds here; `bans_file` (the node's, given to
        one worker) is imported into it once."""

    def start(self) -> None:
        """Link to the cluster; called once the worker's sessions are restored."""

    def stop(self) -> None: ...

    def gather(self, op: str, args: dict[str, Any], timeout: float) -> NodesGathered:
        """Every other node's rows for `op` (`admin.tables`), and the nodes left out."""
        ...

    def live_nodes(self) -> dict[str, frozenset[str]] | None:
        """The nodes this worker takes for live, its own among them, each with the bridges
        it has configured; None while it cannot tell: while its NATS connection is lost, and
        for `peer_timeout` after it is gained (at start, or back), until every live node has
        been heard."""
        ...

    def on_nodes_changed(self, call: Callable[[], None] | None) -> None:
        """Call `call` whenever `live_nodes` may have changed (None: no longer)."""

    def describe(self) -> dict[str, Any]:
        """The cluster as this worker sees it, for the admin API."""
        ...
