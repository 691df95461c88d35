"""`GET /metrics`: a prometheus-client collector over one `Figures` reading per second.

Nothing is counted for Prometheus on the publish path: the broker's own plain counters
(`core.stats`) are turned into metric families when a scrape comes (a custom collector, as
prometheus-client recommends for values another system keeps), from a reading shared by
the scrapes of the same second (`admin.figures_cache`). In a pool the figures are
the pool's (`actors.figures.read_pool_figures`: every worker's counters and gauges added
up); only the process's CPU time and RSS stay per worker, with the `worker` label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from actors.figures import Figures
from admin.figures_cache import FiguresCache
from admin.tables import Rows
from core.latency import LatencyHistogram

PREFIX = "mqtt_broker"


class BrokerCollector(Collector):
    def __init__(self, figures: FiguresCache) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        figures, _missing = self._figures.read()  # the gathering logs who is
        return iter(metric_families(figures))


class BridgeCollector(Collector):
    """The bridges (docs/bridges.md), labelled by name, from the workers that run them."""

    def __init__(self, rows: Callable[[], tuple[Rows, list[int]]]) -> None:
        self._rows = rows

    def collect(self) -> Iterator[Metric]:
        rows, _missing = self._rows()
        labels = ["bridge"]
        connected = GaugeMetricFamily(
            f"{PREFIX}_bridge_connected",
            "1 while the bridge is connected to its remote.",
            labels=labels,
        )
        queued = GaugeMetricFamily(
            f"{PREFIX}_bridge_queued",
            "Messages waiting in the bridge's session for the remote (queued and in flight).",
            labels=labels,
        )
        sent = CounterMetricFamily(
            f"{PREFIX}_bridge_messages_sent", "Messages forwarded to the remote.", labels=labels
        )
        received = CounterMetricFamily(
            f"{PREFIX}_bridge_messages_received",
            "Messages from the remote published here.",
            labels=labels,
        )
        dropped = CounterMetricFamily(
            f"{PREFIX}_bridge_messages_dropped",
            "Messages dropped from the bridge's session (past its queue bound, or expired).",
            labels=labels,
        )
        too_large = CounterMetricFamily(
            f"{PREFIX}_bridge_messages_too_large",
            "Messages not forwarded: larger than the remote takes (max_packet_size, or its "
            "Maximum Packet Size).",
            labels=labels,
        )
        for row in rows:
            name = [row["name"]]
            connected.add_metric(name, 1 if row["connected"] else 0)
            queued.add_metric(name, row.get("queued", 0))
            sent.add_metric(name, row.get("sent", 0))
            received.add_metric(name, row.get("received", 0))
            dropped.add_metric(name, row.get("dropped", 0))
            too_large.add_metric(name, row.get("too_large", 0))
        return iter([connected, queued, sent, received, dropped, too_large])


class NodeLabelled(Collector):
    """Another collector's families, every sample labelled `node` (a cluster's node, so one
    Prometheus tells the nodes apart: docs/cluster.md)."""

    def __init__(self, collector: Collector, node: str) -> None:
        self._collector = collector
        self._node = node

    def collect(self) -> Iterator[Metric]:
        for metric in self._collector.collect():
            metric.samples = [
                sample._replace(labels={**sample.labels, "node": self._node})
                for sample in metric.samples
            ]
            yield metric


def new_registry(
    figures: FiguresCache,
    bridge_rows: Callable[[], tuple[Rows, list[int]]] | None = None,
    node: str | None = None,
) -> CollectorRegistry:
    """The registry `/metrics` renders; `node`: label every sample with it (a cluster)."""
    collectors: list[Collector] = [BrokerCollector(figures)]
    if bridge_rows is not None:
        collectors.append(BridgeCollector(bridge_rows))
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector if node is None else NodeLabelled(collector, node))
    return registry


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)


def _histogram(
    family: HistogramMetricFamily, labels: list[str], histogram: LatencyHistogram
) -> None:
    family.add_metric(labels, histogram.cumulative(), sum_value=histogram.total)


def metric_families(figures: Figures) -> list[Metric]:
    families: list[Metric] = [
        _gauge("uptime_seconds", "Seconds since the worker started.", figures.uptime),
        _gauge("connections", "Clients connected now.", figures.connections),
        _gauge("connections_max", "Most clients connected at once.", figures.connections_max),
        _counter(
            "connections_accepted",
            "CONNECTs accepted (session attached).",
            figures.connections_total,
        ),
        _counter(
            "connections_banned",
            "CONNECTs refused by a ban (CONNACK 0x8A).",
            figures.connects_banned,
        ),
        _gauge("sessions", "Sessions, connected and kept offline.", figures.sessions),
        _gauge("subscriptions", "Subscriptions (route table entries).", figures.subscriptions),
        _gauge("topic_filters", "Distinct subscribed topic filters.", figures.topic_filters),
        _gauge("retained_messages", "Retained messages held.", figures.retained),
        _gauge("queued_messages", "Messages in the sessions' queues.", figures.queued),
        _gauge(
            "inflight_messages",
            "QoS 1/2 messages awaiting acknowledgement.",
            figures.inflight,
        ),
        _gauge("bans", "Bans in force.", figures.banned),
        _counter(
            "messages_sent",
            "PUBLISH packets written to subscribers.",
            figures.messages_sent,
        ),
        _counter("bytes_received", "MQTT bytes read.", figures.bytes_received),
        _counter("bytes_sent", "MQTT bytes written.", figures.bytes_sent),
        _gauge("store_bytes", "Size of the store's files.", figures.store_bytes),
    ]
    cpu = CounterMetricFamily(
        f"{PREFIX}_process_cpu_seconds", "CPU time of the worker process.", labels=["worker"]
    )
    rss = GaugeMetricFamily(
        f"{PREFIX}_process_resident_memory_bytes",
        "RSS of the worker process.",
        labels=["worker"],
    )
    for usage in figures.usage:
        cpu.add_metric([str(usage.worker)], usage.cpu_seconds)
        rss.add_metric([str(usage.worker)], usage.rss_bytes)
    by_listener = GaugeMetricFamily(
        f"{PREFIX}_listener_connections", "Open connections per listener.", labels=["listener"]
    )
    for listener, count in figures.connections_by_listener.items():
        by_listener.add_metric([listener], count)
    by_version = GaugeMetricFamily(
        f"{PREFIX}_connections_by_protocol",
        "Clients connected per MQTT protocol level.",
        labels=["protocol_version"],
    )
    for version, count in sorted(figures.connected_by_version.items()):
        by_version.add_metric([str(version)], count)
    received = CounterMetricFamily(
        f"{PREFIX}_messages_received",
        "Application messages accepted from publishers.",
        labels=["qos"],
    )
    for qos, count in enumerate(figures.received_by_qos):
        received.add_metric([str(qos)], count)
    dropped = CounterMetricFamily(
        f"{PREFIX}_messages_dropped",
        "Messages or deliveries dropped, by reason.",
        labels=["reason"],
    )
    for reason, count in sorted(figures.dropped_by_reason.items()):
        dropped.add_metric([reason], count)
    families += [cpu, rss, by_listener, by_version, received, dropped]
    if figures.store_commits is not None:
        commits = HistogramMetricFamily(
            f"{PREFIX}_store_commit_seconds", "Store commit latency.", labels=[]
        )
        _histogram(commits, [], figures.store_commits)
        families.append(commits)
    hooks = HistogramMetricFamily(
        f"{PREFIX}_hook_seconds", "Time to run a hook point's chain of callbacks.", labels=["hook"]
    )
    for point, histogram in sorted(figures.hook_latency.items()):
        _histogram(hooks, [point], histogram)
    families.append(hooks)
    families += _backend_families(figures)
    return families


_BACKEND_COUNTERS = {
    "calls": "Blocking calls a plugin made to its backend (plugins.offload).",
    "busy": "Backend calls refused at once: max_waiting calls already waiting or running.",
    "timeouts": "Backend calls that did not answer within the plugin's timeout.",
    "errors": "Backend calls that failed (connection refused, bad answer, ...).",
    "cache_hits": "Decisions a backend plugin answered from its decision cache.",
    "cache_misses": "Decisions a backend plugin's cache did not hold (its backend was asked).",
}


def _backend_families(figures: Figures) -> list[Metric]:
    """Per plugin backend (label `plugin`): its counters and the latency of its calls."""
    families: list[Metric] = []
    for counter, doc in _BACKEND_COUNTERS.items():
        family = CounterMetricFamily(f"{PREFIX}_backend_{counter}", doc, labels=["plugin"])
        for plugin, counters in sorted(figures.backend_counters.items()):
            family.add_metric([plugin], counters.get(counter, 0))
        families.append(family)
    latency = HistogramMetricFamily(
        f"{PREFIX}_backend_call_seconds",
        "Time a plugin's backend took to answer a call (answered calls).",
        labels=["plugin"],
    )
    for plugin, histogram in sorted(figures.backend_latency.items()):
        _histogram(latency, [plugin], histogram)
    families.append(latency)
    return families
