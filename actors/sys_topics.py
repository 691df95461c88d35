"""`$SYS`: Mosquitto's `$SYS/broker/...` tree, retained, every `[sys] interval` seconds, and
EMQX's presence events `$SYS/brokers/<node>/clients/<client id>/connected|disconnected`.

`sys_values` turns one `Figures` read (and the load averages) into (topic, text) pairs: pure,
so the tree is tested without a broker. `SysPublisher` is the greenlet that publishes them:
each message goes to the retainer (not to the store: these values are stale after a restart
anyway, and Mosquitto does not persist them either) and to the current subscribers through
`Dispatcher.publish_internal` (QoS 0, not counted as client traffic). Who may read `$SYS`
is the ACL's business (docs/security.md); the broker alone writes there [MQTT-4.7.2-1].

In a pool, worker 0 alone publishes the `$SYS/broker/...` tree, with the pool's figures
(`read_pool_figures`); like presence events, which each worker publishes for its own
clients, they are forwarded to the subscribers and retained-message replicas of every worker.

In a cluster (docs/cluster.md) `$SYS` stays on its node (nodes do not forward `$SYS`
topics to each other): each node's worker 0 publishes its own `$SYS/broker/...` tree and,
with it, `$SYS/cluster/...`: its figures added to the counts every worker of the other
nodes answers (`cluster_values`); a node that does not answer in time is counted out.
"""

from __future__ import annotations

import logging
import math
import time
from importlib import metadata
from typing import TYPE_CHECKING, Any

import gevent
import orjson

from actors.figures import Figures, read_pool_figures
from core.message import Message
from hooks.events import ClientConnected, ClientDisconnected
from hooks.hookpoints import HookPoint

if TYPE_CHECKING:
    from actors.view import BrokerView

logger = logging.getLogger(__name__)

LOAD_PERIODS = (("1min", 60.0), ("5min", 300.0), ("15min", 900.0))
SYS_OWNER = "$sys"  # the owner of the presence hooks on the hook bus
CLUSTER_TIMEOUT = 2.0  # seconds an update waits for the other nodes' counts


def broker_version() -> str:
    try:
        return f"actor-mqtt-broker {metadata.version('actor-mqtt-broker')}"
    except metadata.PackageNotFoundError:
        return "actor-mqtt-broker (not installed)"


class LoadAverages:
    """Mosquitto's `$SYS/broker/load/...`: exponentially weighted rates per minute of counters,
    over 1, 5 and 15 minutes, updated once per interval."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self.averages: dict[str, dict[str, float]] = {}

    def update(self, counters: dict[str, int], elapsed: float) -> None:
        for name, value in counters.items():
            previous = self._last.get(name)
            self._last[name] = value
            if previous is None or elapsed <= 0:
                self.averages.setdefault(name, {period: 0.0 for period, _ in LOAD_PERIODS})
                continue
            per_minute = (value - previous) * 60.0 / elapsed
            averages = self.averages[name]
            for period, seconds in LOAD_PERIODS:
                decay = math.exp(-elapsed / seconds)
                averages[period] = averages[period] * decay + per_minute * (1 - decay)


def load_counters(figures: Figures) -> dict[str, int]:
    """The counters whose load averages `$SYS` publishes, by their topic under load/."""
    return {
        "messages/received": figures.messages_received,
        "messages/sent": figures.messages_sent,
        "publish/dropped": figures.messages_dropped + figures.deliveries_dropped,
        "bytes/received": figures.bytes_received,
        "bytes/sent": figures.bytes_sent,
        "connections": figures.connections_total,
    }


def sys_values(
    figures: Figures, loads: LoadAverages, version: str, heap_bytes: int
) -> list[tuple[str, str]]:
    """The `$SYS/broker/...` topics and their payloads (Mosquitto's names where it has one)."""
    values = {
        "version": version,
        "uptime": f"{int(figures.uptime)} seconds",
        "clients/connected": figures.connections,
        "clients/disconnected": figures.sessions - figures.connections,
        "clients/total": figures.sessions,
        "clients/maximum": figures.connections_max,
        "messages/received": figures.messages_received,
        "messages/sent": figures.messages_sent,
        "publish/messages/dropped": figures.messages_dropped + figures.deliveries_dropped,
        "bytes/received": figures.bytes_received,
        "bytes/sent": figures.bytes_sent,
        "subscriptions/count": figures.subscriptions,
        "retained messages/count": figures.retained,
        "store/bytes": figures.store_bytes,
        "heap/current": heap_bytes,
        "memory/rss": figures.rss_bytes,
    }
    for name, averages in loads.averages.items():
        for period, value in averages.items():
            values[f"load/{name}/{period}"] = f"{value:.2f}"
    return [(f"$SYS/broker/{topic}", str(value)) for topic, value in values.items()]


def cluster_values(
    own: tuple[int, int], others: dict[str, list[list[dict[str, Any]]]]
) -> list[tuple[str, str]]:
    """The `$SYS/cluster/...` topics and their payloads: this node's connected clients and
    sessions (`own`) added to the `counts` rows of the other nodes that answered, and how
    many nodes that is, this one included (pure)."""
    rows = [row for parts in others.values() for part in parts for row in part]
    connected = own[0] + sum(int(row["connected"]) for row in rows)
    sessions = own[1] + sum(int(row["sessions"]) for row in rows)
    values = {
        "nodes": 1 + len(others),
        "clients/connected": connected,
        "clients/disconnected": sessions - connected,
        "clients/total": sessions,
    }
    return [(f"$SYS/cluster/{topic}", str(value)) for topic, value in values.items()]


class SysPublisher:
    """Publishes the `$SYS` tree every `interval` seconds and, if asked, presence events."""

    def __init__(self, broker: BrokerView, interval: float, presence_events: bool) -> None:
        self._broker = broker
        self._interval = interval
        self._loads = LoadAverages()
        self._version = broker_version()
        self._greenlet: gevent.Greenlet[..., Any] | None = None
        self._node = broker.config.node_name
        if presence_events:
            hooks = broker.context.hooks
            hooks.register(HookPoint.CLIENT_CONNECTED, self._connected, owner=SYS_OWNER)
            hooks.register(HookPoint.CLIENT_DISCONNECTED, self._disconnected, owner=SYS_OWNER)

    def start(self) -> None:
        if self._interval > 0 and self._broker.worker_id != 0:
            logger.info("$SYS: worker 0 publishes $SYS/broker/... for the pool")
        elif self._interval > 0:
            self._greenlet = gevent.spawn(self._run)
            logger.info("$SYS: publishing $SYS/broker/... every %g s", self._interval)

    def stop(self) -> None:
        self._broker.context.hooks.unregister(SYS_OWNER)
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def publish_now(self, elapsed: float) -> None:
        figures, _missing = read_pool_figures(self._broker)  # the gathering logs who is
        self._loads.update(load_counters(figures), elapsed)
        heap_bytes = sum(usage.heap_bytes for usage in figures.usage)
        values = sys_values(figures, self._loads, self._version, heap_bytes)
        cluster = self._broker.cluster
        if cluster is not None:  # the nodes that answered; the gathering logs the others
            others, _missing_nodes = cluster.gather("counts", {}, CLUSTER_TIMEOUT)
            values += cluster_values((figures.connections, figures.sessions), others)
        self._publish([(topic, payload.encode()) for topic, payload in values])

    def _run(self) -> None:
        last = time.monotonic()
        self.publish_now(0.0)
        while True:
            gevent.sleep(self._interval)
            now = time.monotonic()
            try:
                self.publish_now(now - last)
            except Exception:
                logger.exception("$SYS: an update failed (a broker bug); the next one follows")
            last = now

    def _publish(self, items: list[tuple[str, bytes]]) -> None:
        self._broker.context.dispatcher.publish_internal(
            [Message(topic=topic, payload=payload) for topic, payload in items],
            retained=[
                Message(topic=topic, payload=payload, retain=True) for topic, payload in items
            ],
        )

    def _presence(self, client_id: str, event: str, details: dict[str, object]) -> None:
        topic = f"$SYS/brokers/{self._node}/clients/{client_id}/{event}"
        payload = orjson.dumps({"clientid": client_id, "ts": int(time.time() * 1000), **details})
        self._broker.context.dispatcher.publish_internal([Message(topic=topic, payload=payload)])

    def _connected(self, event: ClientConnected) -> None:
        client = event.client
        self._presence(
            client.client_id,
            "connected",
            {
                "username": client.username,
                "ipaddress": client.peer,
                "proto_ver": client.protocol_version,
                "keepalive": client.keepalive,
                "clean_start": client.clean_start,
            },
        )

    def _disconnected(self, event: ClientDisconnected) -> None:
        client = event.client
        self._presence(
            client.client_id,
            "disconnected",
            {"username": client.username, "reason": event.reason.value},
        )
