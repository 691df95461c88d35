"""The operations surface across the cluster's nodes: what the admin API and `$SYS` of one
node ask every worker of the other nodes (docs/cluster.md "Operations").

- `gather(op, args)`: an `OpsRequest` to every linked worker of every other node (over the
  NATS fabric, one request per worker, as the pool asks its own workers), whose `OpsReply`
  carries that worker's rows (`admin.tables`). Every worker answers for itself, so a node's
  answer needs no second round inside it and does not rest on one of its workers. The rows
  come back by node, and the nodes left out are named: a node any of whose workers is not
  linked now (a node heard of since this worker started: stopped, killed or cut off) or
  did not answer within the timeout. An answer never hangs on a dead node.
- answering: an `OpsRequest` from another node runs `answer(op, args)` (set by the
  composition root: `admin.tables.local_rows`) in a greenlet of its own, for the operations
  in `CLUSTER_OPS` only (`pool.ops.answer_request`, as a worker answers its pool);
  another is answered with no rows and a warning (a reload or a ban stays with the node it
  is made on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import gevent

from actors.cluster_part import NodesGathered
from pool.frames.codec import Frame
from pool.frames.operations import OpsReply, OpsRequest
from pool.ops import GATHER_TIMEOUT, Answer, Gathering, answer_request

logger = logging.getLogger(__name__)

# What another node may ask: its tables and routes, a kick, its figures and top topics (the
# cluster part of `/api/v1/stats`), the counts `$SYS/cluster/...` adds up.
CLUSTER_OPS = frozenset(
    {
        "clients",
        "client",
        "kick",
        "sessions",
        "subscriptions",
        "routes",
        "figures",
        "top_topics",
        "counts",
    }
)
REFUSAL = (
    "which another node may not ask; answered with nothing (do all nodes run the same "
    "broker version?)"
)

Rows = list[dict[str, Any]]


def node_of(name: str) -> str:
    """The node of a peer named `<node>.<worker>`."""
    return name.rpartition(".")[0]


def by_node(
    rows: dict[int, Rows], known: dict[int, str], linked: set[int], answered_in_time: set[int]
) -> NodesGathered:
    """The workers' rows (by peer number) as parts by node, and the nodes left out: a node
    is left out if any worker of it heard of (`known`, number -> name) is not `linked` or
    did not answer (pure)."""
    parts: dict[str, list[Rows]] = {}
    for worker in sorted(rows):
        parts.setdefault(node_of(known[worker]), []).append(rows[worker])
    missing = {
        node_of(name)
        for worker, name in known.items()
        if worker not in linked or worker not in answered_in_time
    }
    return parts, sorted(missing)


class ClusterOps:
    """This worker's side of the operations surface across nodes; see the module docstring."""

    def __init__(
        self,
        send: Callable[[int, Frame], bool],
        peers: Callable[[], set[int]],
        known: Callable[[], dict[int, str]],
    ) -> None:
        self._send = send
        self._peers = peers  # the other nodes' workers linked now
        self._known = known  # every peer heard of, number -> `<node>.<worker>`
        self._token = 0
        self._gatherings: dict[int, Gathering] = {}
        self.answer: Answer | None = None  # set by the composition root

    def gather(
        self, op: str, args: dict[str, Any], timeout: float = GATHER_TIMEOUT
    ) -> NodesGathered:
        """Every other node's rows for `op` (one part per worker that answered), and the
        nodes left out. Blocks the calling greenlet only, `timeout` seconds at most."""
        self._token += 1
        token = self._token
        linked = self._peers()
        asked = {w for w in linked if self._send(w, OpsRequest(token, op, args))}
        gathering = Gathering(set(asked))  # it takes the answered out of its set
        self._gatherings[token] = gathering
        try:
            gathering.done.wait(timeout)
        finally:
            del self._gatherings[token]
        parts, missing = by_node(gathering.rows, self._known(), asked, set(gathering.rows))
        if missing:
            logger.warning(
                "cluster: nodes %s gave no full answer to %r within %.0f s (down, or not "
                "linked); the answer leaves them out",
                missing,
                op,
                timeout,
            )
        return parts, missing

    def peer_down(self, worker: int) -> None:
        for gathering in self._gatherings.values():
            gathering.answered(worker, None)

    def frame_received(self, worker: int, frame: OpsRequest | OpsReply) -> None:
        if isinstance(frame, OpsRequest):
            refusal = None if frame.op in CLUSTER_OPS else REFUSAL
            reply = partial(self._send, worker)
            asker = f"peer {worker}"
            gevent.spawn(
                answer_request,
                self.answer,
                frame,
                reply,
                scope="cluster",
                asker=asker,
                refusal=refusal,
            )
        else:
            gathering = self._gatherings.get(frame.token)
            if gathering is not None:
                gathering.answered(worker, list(frame.rows))
