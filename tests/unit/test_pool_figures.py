"""Pool-wide figures and tables in-process: `pool_figures` adds the workers' `Figures` up,
`figures_to_wire`/`figures_from_wire` carry them over the fabric as JSON, and
`admin.tables` merges the workers' rows."""

from __future__ import annotations

import orjson

from actors.figures import (
    Figures,
    WorkerUsage,
    figures_from_wire,
    figures_to_wire,
    pool_figures,
)
from admin.tables import counted, merge_counted, merge_route_counts, merge_rows, merge_top_topics
from core.latency import LatencyHistogram


def histogram(*seconds: float) -> LatencyHistogram:
    result = LatencyHistogram()
    for value in seconds:
        result.observe(value)
    return result


def worker_figures(worker: int, scale: int) -> Figures:
    return Figures(
        worker=worker,
        uptime=10.0 + worker,
        connections=3 * scale,
        connections_total=9 * scale,
        connections_max=5 * scale,
        connected_by_version={3: 0, 4: 2 * scale, 5: scale},
        connections_by_listener={"tcp 127.0.0.1:1883": 4 * scale},
        sessions=7 * scale,
        messages_received=100 * scale,
        received_by_qos=[60 * scale, 40 * scale, 0],
        messages_sent=250 * scale,
        messages_dropped=4 * scale,
        deliveries_dropped=6 * scale,
        dropped_by_reason={"no_subscribers": scale, **({"queue_full": 2} if worker else {})},
        bytes_received=1000 * scale,
        bytes_sent=2000 * scale,
        subscriptions=11 * scale,
        topic_filters=8 * scale,
        retained=2 + worker,  # a replica a moment behind the other
        queued=scale,
        inflight=2 * scale,
        banned=1,
        connects_banned=scale,
        store_bytes=4096,
        store_commits=histogram(0.001 * scale),
        hook_latency={"client.authenticate": histogram(0.0002)} if worker else {},
        backend_counters={
            "plugins.auth_http": {"calls": 10 * scale, "cache_hits": 90 * scale},
            **({"plugins.auth_jwt": {"errors": 1}} if worker else {}),
        },
        backend_latency={"plugins.auth_http": histogram(0.02 * scale)},
        cpu_seconds=1.5 * scale,
        rss_bytes=50_000_000 * scale,
        usage=[WorkerUsage(worker, 1.5 * scale, 50_000_000 * scale, 30_000_000)],
    )


def test_counters_and_gauges_add_up_and_replicated_figures_count_once() -> None:
    pool = pool_figures([worker_figures(0, 1), worker_figures(1, 2)])
    assert pool.worker == 0  # the serving worker's
    assert (pool.connections, pool.connections_total, pool.sessions) == (9, 27, 21)
    assert pool.connected_by_version == {3: 0, 4: 6, 5: 3}
    assert pool.connections_by_listener == {"tcp 127.0.0.1:1883": 12}
    assert pool.received_by_qos == [180, 120, 0]
    assert pool.dropped_by_reason == {"no_subscribers": 3, "queue_full": 2}
    assert (pool.messages_received, pool.messages_sent, pool.subscriptions) == (300, 750, 33)
    assert (pool.queued, pool.inflight, pool.connects_banned) == (3, 6, 3)
    # Every worker holds the retained messages, the bans and the store: not added up.
    assert (pool.retained, pool.banned, pool.store_bytes, pool.uptime) == (3, 1, 4096, 11.0)
    assert pool.store_commits is not None and sum(pool.store_commits.counts) == 2
    assert sum(pool.hook_latency["client.authenticate"].counts) == 1
    assert pool.backend_counters == {
        "plugins.auth_http": {"calls": 30, "cache_hits": 270},
        "plugins.auth_jwt": {"errors": 1},
    }
    assert sum(pool.backend_latency["plugins.auth_http"].counts) == 2
    assert pool.cpu_seconds == 4.5 and pool.rss_bytes == 150_000_000
    assert [(u.worker, u.cpu_seconds) for u in pool.usage] == [(0, 1.5), (1, 3.0)]


def test_one_workers_figures_are_themselves() -> None:
    one = worker_figures(0, 1)
    assert pool_figures([one]) == one


def test_figures_travel_as_json_and_come_back_equal() -> None:
    figures = worker_figures(1, 3)
    wire = orjson.loads(orjson.dumps(figures_to_wire(figures)))  # as a frame carries it
    assert figures_from_wire(wire) == figures
    no_store = worker_figures(0, 1)
    no_store.store_commits = None
    assert figures_from_wire(orjson.loads(orjson.dumps(figures_to_wire(no_store)))) == no_store


def test_rows_of_several_workers_merge_in_key_order() -> None:
    worker_0 = [{"clientid": "a", "topic": "x"}, {"clientid": "c", "topic": "x"}]
    worker_1 = [{"clientid": "b", "topic": "y"}, {"clientid": "a", "topic": "w"}]
    assert [(r["clientid"], r["topic"]) for r in merge_rows([worker_0, worker_1], "clientid")] == [
        ("a", "x"),
        ("a", "w"),
        ("b", "y"),
        ("c", "x"),
    ]
    by_both = merge_rows([worker_0, worker_1], "clientid", "topic")
    assert [(r["clientid"], r["topic"]) for r in by_both][:2] == [("a", "w"), ("a", "x")]
    assert merge_rows([[], []], "clientid") == []


def test_route_counts_of_several_workers_add_up_per_filter_with_their_nodes() -> None:
    worker_0 = [
        {"topic": "a/#", "subscribers": 2, "node": "b"},
        {"topic": "b", "subscribers": 1, "node": "b"},
    ]
    worker_1 = [{"topic": "a/#", "subscribers": 3, "node": "b"}]
    other_node = [{"topic": "a/#", "subscribers": 1, "node": "a"}]
    assert merge_route_counts([worker_0, worker_1, other_node]) == [
        {"topic": "a/#", "subscribers": 6, "nodes": ["a", "b"]},
        {"topic": "b", "subscribers": 1, "nodes": ["b"]},
    ]


def test_top_topics_of_several_workers_add_up_and_keep_the_most() -> None:
    worker_0 = [{"topic": "hot", "messages": 5}, {"topic": "warm", "messages": 3}]
    worker_1 = [{"topic": "warm", "messages": 4}, {"topic": "cold", "messages": 1}]
    assert merge_top_topics([worker_0, worker_1], 2) == [
        {"topic": "warm", "messages": 7},
        {"topic": "hot", "messages": 5},
    ]


def test_a_paged_tables_parts_carry_their_count_and_no_more_than_the_page_needs() -> None:
    items = [{"clientid": f"c{n}"} for n in range(10)]
    part = counted(items, {"upto": "3"}, dict)
    assert part == [{"count": 10}, {"clientid": "c0"}, {"clientid": "c1"}, {"clientid": "c2"}]
    assert len(counted(items, {}, dict)) == 11  # no upto: every row
    other = counted([{"clientid": "b"}], {"upto": "3"}, dict)
    total, rows = merge_counted([part, other, []], "clientid")  # [] a worker whose answer failed
    assert total == 11
    assert [row["clientid"] for row in rows] == ["b", "c0", "c1", "c2"]
