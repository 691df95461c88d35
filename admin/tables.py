"""One worker's part of the admin API's tables, as JSON rows, and the pool-wide merge of them.

`local_rows(broker, op, args)` answers an operation for this worker alone: its connected
clients, its sessions, its subscriptions and routes (filtered by `args`, the request's
query), one client's detail, a kick, its figures, a reload. A row of a client, session,
subscription or route carries its `node` (`node_name`), so tables gathered from several
nodes of a cluster (`cluster.ops`) say where each row lives. The worker that serves the API
runs it for itself; in a pool every other worker runs it for an `OpsRequest`
(`pool.ops`), so the rows are built where the tables are and only they travel.

A paged table's part (`clients`, `sessions`, `subscriptions`) is counted: its first row is
`{"count": n}`, the number of rows that match, and the rows follow, the first `upto` of
them in key order (all without `upto`): a page needs no more from any worker, so a request
for one page of 100 000 clients builds and carries at most a page's end of views per
worker. `merge_counted`, `merge_rows`, `merge_route_counts` and `merge_top_topics` (pure)
make one table of the workers' parts; paging and the answer's shape are `admin.api`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from actors.context import ConnectedClient
from actors.figures import figures_to_wire, read_figures
from actors.messages import CloseConnection
from actors.runtime import tell_if_alive
from actors.session_peek import messages_waiting, session_state
from core.reasons import DisconnectReason
from mqtt.topics import matches

if TYPE_CHECKING:
    from actors.view import BrokerView

Rows = list[dict[str, Any]]
T = TypeVar("T")


def _as_it_is(row: dict[str, Any]) -> dict[str, Any]:
    return row


def counted(items: list[T], query: dict[str, Any], view: Callable[[T], dict[str, Any]]) -> Rows:
    """A paged table's part: `{"count": len(items)}`, then the views of the first `upto`
    items (the query's; all without one)."""
    upto = int(query.get("upto", len(items)))
    return [{"count": len(items)}, *(view(item) for item in items[:upto])]


def client_view(node: str, entry: ConnectedClient, detail: bool = False) -> dict[str, Any]:
    client = entry.client
    state = session_state(entry.session)
    view: dict[str, Any] = {
        "clientid": client.client_id,
        "node": node,
        "username": client.username,
        "peer": client.peer,
        "listener": entry.listener,
        "proto_ver": client.protocol_version,
        "keepalive": client.keepalive,
        "clean_start": client.clean_start,
        "connected_at": entry.connected_at,
        "inflight": len(state.inflight) if state else 0,
        "queue": len(state.queue) if state and state.queue else 0,
        "subscriptions": len(state.subscriptions) if state else 0,
    }
    if detail and state is not None:
        view["subscriptions"] = {f: o.qos for f, o in state.subscriptions.items()}
    return view


def clients(broker: BrokerView, query: dict[str, Any]) -> Rows:
    """Connected clients matching the filters: `clientid` (contains), `username`,
    `listener`, `proto_ver` (counted: see the module docstring)."""
    search = str(query.get("clientid", "")).lower()
    entries = [
        entry
        for client_id, entry in sorted(broker.context.clients.items())
        if search in client_id.lower()
        and query.get("username", entry.client.username) == entry.client.username
        and query.get("listener", entry.listener) == entry.listener
        and query.get("proto_ver", str(entry.client.protocol_version))
        == str(entry.client.protocol_version)
    ]
    node = broker.config.node_name
    return counted(entries, query, lambda entry: client_view(node, entry))


def client(broker: BrokerView, query: dict[str, Any]) -> Rows:
    """The connected client `clientid`, with its subscriptions (none: not here)."""
    entry = broker.context.clients.get(query.get("clientid", ""))
    return [] if entry is None else [client_view(broker.config.node_name, entry, detail=True)]


def kick(broker: BrokerView, query: dict[str, Any]) -> Rows:
    """Close the client's connection (DISCONNECT 0x98 to a 5.0 client; its will fires):
    one row if it was connected here, none if not."""
    entry = broker.context.clients.get(query.get("clientid", ""))
    if entry is None:
        return []
    tell_if_alive(
        entry.client_ref,
        CloseConnection(DisconnectReason.ADMINISTRATIVE_ACTION, "(kicked by an operator)"),
    )
    return [{"clientid": entry.client.client_id, "node": broker.config.node_name}]


def _sessions(broker: BrokerView) -> dict[str, Any]:
    """The worker's sessions by client id (none while it starts, before its registry)."""
    return broker.context.registry.sessions


def sessions(broker: BrokerView, query: dict[str, Any]) -> Rows:
    """Sessions, offline ones too: `clientid` (contains), `connected` ("true"/"false")
    (counted)."""
    context = broker.context
    search = str(query.get("clientid", "")).lower()
    connected = query.get("connected")
    rows = []
    for client_id, session in sorted(_sessions(broker).items()):
        state = session_state(session)
        is_connected = client_id in context.clients
        if state is None or search not in client_id.lower():
            continue
        if connected is not None and (connected == "true") != is_connected:
            continue
        rows.append(
            {
                "clientid": client_id,
                "node": context.config.node_name,
                "connected": is_connected,
                "persistent": state.persistent,
                "subscriptions": len(state.subscriptions),
                "inflight": len(state.inflight),
                "queue": len(state.queue) if state.queue else 0,
                "awaiting_rel": len(state.awaiting_rel),
            }
        )
    return counted(rows, query, _as_it_is)


def subscriptions(broker: BrokerView, query: dict[str, Any]) -> Rows:
    """Subscriptions: `clientid` (exact), `topic` (a topic name: the filters matching it)
    (counted)."""
    client_filter = query.get("clientid")
    topic = query.get("topic")
    node = broker.config.node_name
    rows = []
    for client_id, session in sorted(_sessions(broker).items()):
        if client_filter is not None and client_id != client_filter:
            continue
        state = session_state(session)
        if state is None:
            continue
        for topic_filter, options in sorted(state.subscriptions.items()):
            if topic is not None and not matches(topic_filter, topic):
                continue
            rows.append(
                {"clientid": client_id, "node": node, "topic": topic_filter, "qos": options.qos}
            )
    return counted(rows, query, _as_it_is)


def routes(broker: BrokerView, _query: dict[str, Any]) -> Rows:
    """Topic filters and how many of this worker's sessions subscribe to each, with this
    worker's `node`."""
    counts: dict[str, int] = {}
    for session in _sessions(broker).values():
        state = session_state(session)
        for topic_filter in state.subscriptions if state else ():
            counts[topic_filter] = counts.get(topic_filter, 0) + 1
    node = broker.config.node_name
    return [{"topic": t, "subscribers": n, "node": node} for t, n in sorted(counts.items())]


def figures(broker: BrokerView, _query: dict[str, Any]) -> Rows:
    return [figures_to_wire(read_figures(broker))]


def counts(broker: BrokerView, _query: dict[str, Any]) -> Rows:
    """This worker's connected clients and sessions, which `$SYS/cluster/...` adds up."""
    return [
        {
            "connected": broker.context.stats.connections,
            "sessions": len(_sessions(broker)),
        }
    ]


def top_topics(broker: BrokerView, query: dict[str, Any]) -> Rows:
    """The most published topics (sampled, `core.stats`), `limit` of them."""
    limit = int(query.get("limit", "10"))
    return [
        {"topic": topic, "messages": count}
        for topic, count in broker.context.stats.top_topics(limit)
    ]


def reload(broker: BrokerView, _query: dict[str, Any]) -> Rows:
    """SIGHUP's reload, on this worker (blocks the calling greenlet until it is done)."""
    broker.reload()
    return []


def synced(_broker: BrokerView, _query: dict[str, Any]) -> Rows:
    """Nothing: the answer itself tells the asker that this worker applied every frame it
    sent before (links are FIFO), such as a ban."""
    return []


def bridges(broker: BrokerView, _query: dict[str, Any]) -> Rows:
    """The bridges this worker runs (a pool runs each in one worker): their state, counts
    since the broker started, what waits in their `$bridge/<name>` session (queued and
    in flight) and what this worker dropped from it (docs/bridges.md)."""
    running = broker.bridges
    if running is None:
        return []
    sessions = _sessions(broker)
    dropped = broker.context.stats.dropped_by_bounded_session
    rows: Rows = []
    for name, runner in sorted(running.runners.items()):
        if not runner.running:
            continue
        session = sessions.get(runner.client_id)
        waiting = (messages_waiting(session) if session is not None else None) or 0
        status, counts = runner.status, runner.counts
        rows.append(
            {
                "name": name,
                "worker": broker.worker_id,
                "connected": status.connected,
                "address": status.address,
                "connects": status.connects,
                "last_error": status.last_error,
                "sent": counts.sent,
                "received": counts.received,
                "unmapped": counts.unmapped,
                "too_large": counts.too_large,
                "queued": waiting,
                "dropped": dropped.get(runner.client_id, 0),
            }
        )
    return rows


OPS: dict[str, Callable[[BrokerView, dict[str, Any]], Rows]] = {
    "clients": clients,
    "client": client,
    "kick": kick,
    "sessions": sessions,
    "subscriptions": subscriptions,
    "routes": routes,
    "figures": figures,
    "counts": counts,
    "top_topics": top_topics,
    "reload": reload,
    "sync": synced,
    "bridges": bridges,
}


def local_rows(broker: BrokerView, op: str, query: dict[str, Any]) -> Rows:
    """This worker's rows for `op` (ValueError: no such operation)."""
    table = OPS.get(op)
    if table is None:
        raise ValueError(f"no operation {op!r}")
    return table(broker, query)


def merge_rows(parts: list[Rows], *keys: str) -> Rows:
    """The workers' rows as one table, in the order of `keys` (stable: a worker's own
    order stays among rows with equal keys)."""
    merged = [row for part in parts for row in part]
    merged.sort(key=lambda row: tuple(row[key] for key in keys))
    return merged


def merge_counted(parts: Iterable[Rows], *keys: str) -> tuple[int, Rows]:
    """Counted parts of several workers: the total count, and their rows as one table in
    the order of `keys`."""
    parts = [part for part in parts if part]  # a worker whose answer failed sent nothing
    total = sum(part[0]["count"] for part in parts)
    return total, merge_rows([part[1:] for part in parts], *keys)


def merge_route_counts(parts: list[Rows]) -> Rows:
    """Route rows of several workers (of several nodes, in a cluster): one row per topic
    filter, subscribers added up, and the nodes that have it (sorted)."""
    counts = _add_up(parts, "topic", "subscribers")
    nodes: dict[str, set[str]] = {}
    for part in parts:
        for row in part:
            nodes.setdefault(row["topic"], set()).add(row["node"])
    return [
        {"topic": topic, "subscribers": n, "nodes": sorted(nodes[topic])}
        for topic, n in sorted(counts.items())
    ]


def merge_top_topics(parts: list[Rows], limit: int) -> Rows:
    """The workers' top topics: messages added up per topic, the `limit` most first."""
    counts = _add_up(parts, "topic", "messages")
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [{"topic": topic, "messages": n} for topic, n in ranked]


def _add_up(parts: list[Rows], key: str, count: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for part in parts:
        for row in part:
            totals[row[key]] = totals.get(row[key], 0) + row[count]
    return totals
