"""One consistent read of everything a worker counts, for `$SYS`, `/metrics` and the admin API.

`read_figures` copies the counters (`actors.stats.BrokerStats`), the listeners' open
connections, the session, subscription and retained-message tables, the sessions' queues and
in-flight windows, the store's size and commit latency, the hooks' latency and the process's
CPU time and RSS. It runs in the event loop and never yields, so what it reads is one moment
of the worker, and it asks no actor anything: the tables are read in place (as publishers
read the route table), and a session's state through `session_state` below. With a pool of
workers, the supervisor would sum the `Figures` of each, field by field.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.latency import LatencyHistogram
from core.reasons import DropReason
from core.session_state import SessionState

if TYPE_CHECKING:
    from actors.broker import Broker

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


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
    cpu_seconds: float = 0.0
    rss_bytes: int = 0


def session_state(session: Any) -> SessionState | None:
    """The state of a live session actor, read in place (None once it stopped).

    Reads pykka's weak reference from the ActorRef to its actor (pykka is pinned, and
    actors/runtime.py relies on its internals already): asking every session for a copy
    would put one message per session in the loop on every scrape.
    """
    actor = session._actor_weakref()
    return None if actor is None else actor.state


def read_figures(broker: Broker) -> Figures:
    context = broker.context
    stats = context.stats
    sessions = list(context.registry.sessions.values()) if context.registry else []
    queued = inflight = 0
    for session in sessions:
        state = session_state(session)
        if state is not None:
            inflight += len(state.inflight)
            if state.queue:
                queued += len(state.queue)
    usage = resource.getrusage(resource.RUSAGE_SELF)
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
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        rss_bytes=_rss_bytes(),
    )


def _store_bytes(broker: Broker) -> int:
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


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
