"""One consistent read of everything a worker counts, for `$SYS`, `/metrics` and the admin API.

`read_figures` copies the counters (`core.stats.BrokerStats`), the listeners' open
connections, the session, subscription and retained-message tables, the sessions' queues and
in-flight windows, the store's size and commit latency, the hooks' latency, the plugins'
backends' counters and latency (`core.backend_figures`) and the process's CPU time and RSS.
It runs in the event loop and never yields, so what it reads is one moment of the worker,
and it asks no actor anything: the tables are read in place (as publishers read the route
table), and a session's state through `session_state` below.

In a pool (docs/pool.md) the worker that serves `/metrics`, the API and `$SYS` gathers the
other workers' `Figures` over the fabric (`figures_to_wire` / `figures_from_wire`: plain
JSON) and adds them up with `pool_figures`: pure, tested in-process.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.session_peek import session_state
from core.backend_figures import all_backends
from core.latency import LatencyHistogram
from core.reasons import DropReason

if TYPE_CHECKING:
    from actors.view import BrokerView

logger = logging.getLogger(__name__)

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# Figures every worker holds the same of (replicated, or one store for the pool): a pool's
# value is the largest one seen, not the sum. Every other number is added up.
_SAME_IN_EVERY_WORKER = frozenset({"worker", "uptime", "retained", "banned", "store_bytes"})
# Histograms by name (hook point, backend): merged per name across a pool's workers.
_HISTOGRAMS_BY_NAME = frozenset({"hook_latency", "backend_latency"})


@dataclass(slots=True)
class WorkerUsage:
    """What stays per worker process in a pool's figures (`/metrics` labels it)."""

    worker: int
    cpu_seconds: float
    rss_bytes: int
    heap_bytes: int


@dataclass(slots=True)
class Figures:
    worker: int
    uptime: float  # seconds
    connections: int
    connections_total: int
    connections_max: int
    connected_by_version: dict[int, int]
    connections_by_listener: dict[str, int]  # open sockets (connected or not yet)
    sessions: int  # connected and kept offline
    messages_received: int
    received_by_qos: list[int]
    messages_sent: int
    messages_dropped: int  # publishes routed nowhere (no subscriber, denied, plugin)
    deliveries_dropped: int  # deliveries lost (queue full, slow, offline QoS 0)
    dropped_by_reason: dict[str, int]
    bytes_received: int
    bytes_sent: int
    subscriptions: int
    topic_filters: int
    retained: int
    queued: int  # messages in the sessions' queues
    inflight: int  # QoS 1/2 messages awaiting acknowledgement
    banned: int
    connects_banned: int
    store_bytes: int
    store_commits: LatencyHistogram | None
    hook_latency: dict[str, LatencyHistogram] = field(default_factory=dict)
    # per plugin backend: its counters (core.backend_figures.COUNTER_NAMES) and call latency
    backend_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    backend_latency: dict[str, LatencyHistogram] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # in a pool: the sum over the workers, as rss_bytes
    rss_bytes: int = 0
    usage: list[WorkerUsage] = field(default_factory=list)  # per worker process


def read_figures(broker: BrokerView) -> Figures:
    context = broker.context
    stats = context.stats
    sessions = list(context.registry.sessions.values())
    queued = inflight = 0
    for session in sessions:
        state = session_state(session)
        if state is not None:
            inflight += len(state.inflight)
            if state.queue:
                queued += len(state.queue)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss = _rss_bytes()
    retained = broker.retained_index
    admission = context.admission
    return Figures(
        worker=broker.worker_id,
        uptime=time.time() - stats.started_at,
        connections=stats.connections,
        connections_total=stats.connections_total,
        connections_max=stats.connections_max,
        connected_by_version=dict(stats.connected_by_version),
        connections_by_listener={e.name: e.connections for e in broker.endpoints},
        sessions=len(sessions),
        messages_received=stats.messages_received,
        received_by_qos=list(stats.received_by_qos),
        messages_sent=stats.messages_sent,
        messages_dropped=stats.messages_dropped,
        deliveries_dropped=stats.deliveries_dropped,
        dropped_by_reason={
            **stats.dropped_by_reason,
            DropReason.NO_SUBSCRIBERS.value: stats.dropped_no_subscribers,
        },
        bytes_received=stats.bytes_received,
        bytes_sent=stats.bytes_sent,
        subscriptions=len(context.route_table),
        topic_filters=context.route_table.filter_count,
        retained=len(retained) if retained is not None else 0,
        queued=queued,
        inflight=inflight,
        banned=len(admission.table) if admission is not None else 0,
        connects_banned=admission.refused if admission is not None else 0,
        store_bytes=_store_bytes(broker),
        store_commits=broker.store_writer.commit_latency if broker.store_writer else None,
        hook_latency=dict(context.hooks.latency),
        backend_counters={name: b.counters() for name, b in all_backends().items()},
        backend_latency={name: b.latency for name, b in all_backends().items()},
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        rss_bytes=rss,
        usage=[
            WorkerUsage(
                broker.worker_id, usage.ru_utime + usage.ru_stime, rss, anonymous_heap_bytes()
            )
        ],
    )


def read_pool_figures(broker: BrokerView) -> tuple[Figures, list[int]]:
    """The figures of the whole pool (`read_figures` with one worker), and the workers left
    out because they did not answer in time. Blocks the calling greenlet while it gathers."""
    own = read_figures(broker)
    ops = broker.ops
    if ops is None:
        return own, []
    answers, missing = ops.gather("figures", {})
    parts = [own]
    for worker, rows in sorted(answers.items()):
        try:
            parts.append(figures_from_wire(rows[0]))
        except (IndexError, KeyError, TypeError, ValueError) as error:
            logger.warning("pool: worker %d sent figures that do not parse: %r", worker, error)
            missing.append(worker)
    return pool_figures(parts), sorted(missing)


def figures_to_wire(figures: Figures) -> dict[str, Any]:
    """`figures` as JSON values (string keys, histograms as their fields) for the fabric."""
    wire: dict[str, Any] = {}
    for name in _FIELD_NAMES:
        value = getattr(figures, name)
        if isinstance(value, LatencyHistogram):
            value = _histogram_to_wire(value)
        elif name in _HISTOGRAMS_BY_NAME:
            value = {point: _histogram_to_wire(h) for point, h in value.items()}
        elif name == "usage":
            value = [[u.worker, u.cpu_seconds, u.rss_bytes, u.heap_bytes] for u in value]
        elif isinstance(value, dict):
            value = {str(key): count for key, count in value.items()}
        wire[name] = value
    return wire


def figures_from_wire(wire: dict[str, Any]) -> Figures:
    """The `Figures` `figures_to_wire` made; KeyError, TypeError or ValueError if it is not."""
    values = {name: wire[name] for name in _FIELD_NAMES}
    values["connected_by_version"] = {
        int(version): count for version, count in wire["connected_by_version"].items()
    }
    commits = wire["store_commits"]
    values["store_commits"] = None if commits is None else _histogram_from_wire(commits)
    for name in _HISTOGRAMS_BY_NAME:
        values[name] = {point: _histogram_from_wire(h) for point, h in wire[name].items()}
    values["usage"] = [WorkerUsage(*row) for row in wire["usage"]]
    return Figures(**values)


def pool_figures(parts: list[Figures]) -> Figures:
    """One pool's figures from its workers' (the serving worker's first): counters and
    gauges added up, per key and per QoS where they are split; what every worker holds the
    same of (the retained messages, the bans, the store's size) and the uptime taken once;
    the per-process usage kept per worker."""
    values: dict[str, Any] = {}
    for name in _FIELD_NAMES:
        column = [getattr(part, name) for part in parts]
        if name in _SAME_IN_EVERY_WORKER:
            values[name] = column[0] if name == "worker" else max(column)
        elif name == "usage":
            values[name] = sorted(
                (usage for part in column for usage in part), key=lambda u: u.worker
            )
        elif name == "store_commits":
            histograms = [h for h in column if h is not None]
            values[name] = _merged(histograms) if histograms else None
        elif name == "backend_counters":
            backends = sorted({backend for part in column for backend in part})
            values[name] = {
                backend: _sum_by_key([part[backend] for part in column if backend in part])
                for backend in backends
            }
        elif name in _HISTOGRAMS_BY_NAME:
            points = sorted({point for part in column for point in part})
            values[name] = {
                point: _merged([part[point] for part in column if point in part])
                for point in points
            }
        elif isinstance(column[0], dict):
            values[name] = _sum_by_key(column)
        elif isinstance(column[0], list):
            values[name] = [sum(counts) for counts in zip(*column, strict=True)]
        else:
            values[name] = sum(column)
    return Figures(**values)


def _sum_by_key(parts: list[dict[Any, int]]) -> dict[Any, int]:
    total: dict[Any, int] = {}
    for part in parts:
        for key, count in part.items():
            total[key] = total.get(key, 0) + count
    return total


def _merged(histograms: list[LatencyHistogram]) -> LatencyHistogram:
    merged = LatencyHistogram(histograms[0].bounds)
    for histogram in histograms:
        merged.counts = [a + b for a, b in zip(merged.counts, histogram.counts, strict=True)]
        merged.total += histogram.total
    return merged


def _histogram_to_wire(histogram: LatencyHistogram) -> dict[str, Any]:
    return {"bounds": histogram.bounds, "counts": histogram.counts, "total": histogram.total}


def _histogram_from_wire(wire: dict[str, Any]) -> LatencyHistogram:
    histogram = LatencyHistogram(tuple(wire["bounds"]))
    counts = list(wire["counts"])
    if len(counts) != len(histogram.counts):
        raise ValueError(f"a histogram of {len(counts)} counts for {len(histogram.bounds)} bounds")
    histogram.counts = counts
    histogram.total = wire["total"]
    return histogram


def _store_bytes(broker: BrokerView) -> int:
    """The size of the store's files (0 without a store on disk)."""
    if broker.store_writer is None:
        return 0
    try:
        return sum(
            path.stat().st_size
            for path in Path(broker.config.store.data_dir).iterdir()
            if path.is_file()
        )
    except OSError:
        return 0


def anonymous_heap_bytes() -> int:
    """Resident anonymous memory (RssAnon): malloc's and Python's heaps, no code or files."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_FIELD_NAMES = tuple(f.name for f in fields(Figures))
