"""The cluster part of `/api/v1/stats` (docs/cluster.md "Operations"): this node's figures
and every other node's, added up, and the other nodes' top topics.

`read_cluster_figures` asks every worker of every other node for its figures (`cluster.ops`,
the `figures` operation: `figures_to_wire` rows) at the same time as it reads this node's
pool figures (the shared reading, `admin.figures_cache`), so the answer waits one gathering
timeout at most. `add_up_nodes` (pure) adds each node's workers up with the pool's own adder
(`actors.figures.pool_figures`), then this node and the others with it again: counters and
gauges are added up, and what every worker of every node holds the same of (the retained
messages, replicated to every node; the bans) and the uptime are taken once, the largest, as
in a pool. One field differs from a pool: each node has a store of its own, so `store_bytes`
is added up over the nodes. A node whose answer is not whole (a worker left out, or figures
that do not parse) is left out wholly, so the figures are those of the nodes listed.
The other nodes' workers' top topics (the `top_topics` operation) are asked at the same
time, for the API to rank with this node's.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

import gevent

from actors.cluster_part import ClusterPart
from actors.figures import Figures, figures_from_wire, pool_figures
from admin.figures_cache import FiguresCache, Reading
from admin.tables import Rows
from pool.ops import GATHER_TIMEOUT

logger = logging.getLogger(__name__)

# Not answered: latency histograms (per worker, `/metrics` has them); in the cluster part
# also the fields that name one process of this node.
HIDDEN = ("store_commits", "hook_latency", "backend_latency")
PER_PROCESS = ("worker", "usage")


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    """The figures of the nodes that answered whole (this one first), added up."""

    figures: Figures
    nodes: list[str]
    missing_nodes: list[str]
    # The top topics of the other nodes' workers (of the nodes listed), one part each.
    top_topic_parts: tuple[Rows, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The `cluster` part of `/api/v1/stats`."""
        fields = stats_fields(self.figures)
        for name in PER_PROCESS:
            fields.pop(name)
        return {"nodes": self.nodes, "missing_nodes": self.missing_nodes, **fields}


def stats_fields(figures: Figures) -> dict[str, Any]:
    """`figures` as `/api/v1/stats` answers them (no latency histograms)."""
    fields = asdict(figures)
    for name in HIDDEN:
        fields.pop(name)
    return fields


def add_up_nodes(
    node: str, own: Figures, others: dict[str, list[Rows]], missing: list[str]
) -> ClusterFigures:
    """This node's (`node`) pool figures `own` and the other nodes' workers' (their wire
    rows, by node; `missing`: the nodes the gathering left out), added up (pure but for a
    warning per answer that does not parse)."""
    left_out = set(missing)
    by_node: dict[str, Figures] = {node: own}
    for other in sorted(set(others) - left_out):
        try:
            workers = [figures_from_wire(part[0]) for part in others[other]]
        except (IndexError, KeyError, TypeError, ValueError) as error:
            logger.warning(
                "cluster: node %s sent figures that do not parse (%r); the cluster's figures "
                "leave it out (do all nodes run the same broker version?)",
                other,
                error,
            )
            left_out.add(other)
            continue
        by_node[other] = pool_figures(workers)
    added = pool_figures(list(by_node.values()))
    stores = sum(figures.store_bytes for figures in by_node.values())
    return ClusterFigures(replace(added, store_bytes=stores), sorted(by_node), sorted(left_out))


def read_cluster_figures(
    cluster: ClusterPart, node: str, pool: FiguresCache, top_topics: int
) -> tuple[Reading, ClusterFigures]:
    """This node's pool reading and the cluster's figures, which include it, with the other
    nodes' `top_topics` top topics. Blocks the calling greenlet while the nodes and the pool
    are asked (one timeout in all)."""
    asking = gevent.spawn(cluster.gather, "figures", {}, GATHER_TIMEOUT)
    topics = gevent.spawn(cluster.gather, "top_topics", {"limit": str(top_topics)}, GATHER_TIMEOUT)
    reading = pool.read()
    others, missing = asking.get()
    whole = add_up_nodes(node, reading[0], others, missing)
    ranked, _missing = topics.get()
    parts = tuple(part for other in whole.nodes for part in ranked.get(other, ()))
    return reading, replace(whole, top_topic_parts=parts)
