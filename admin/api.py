"""`/api/v1/...`: the admin API's handlers (JSON in and out; docs/operations.md has examples).

Lists are paged (`?page=1&limit=100`, answered as `{"data": [...], "meta": {...}}`) and
filtered by query parameters. Handlers read the broker's tables in place (they run in the
event loop between two yields, like any actor) and change things only by telling actors
(a kick is a `CloseConnection` to the client actor) or through the objects that own them
(the dispatcher, which publishes and clears retained messages; the admission table).

In a pool (docs/pool.md) the clients, sessions, subscriptions, routes, figures, kicks and
reloads are pool-wide: `admin.tables` builds each worker's rows, this worker gathers the
others' over the fabric (`pool.ops`) and merges them before paging; an answer that
leaves a silent worker out says so in `missing_workers`. In a cluster (docs/cluster.md) the
clients, sessions, subscriptions, routes and a client's detail or kick are cluster-wide:
every worker of every other node is asked too (`cluster.ops`), each row carries its `node`,
and an answer that leaves a node out says so in `missing_nodes`; the stats add a `cluster`
part, the figures of every node added up (`admin.cluster_figures`). Bans are replicated by
the admission table itself; retained messages are in every worker's replica.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, NamedTuple

import gevent
import orjson

from admin.cluster_figures import ClusterFigures, read_cluster_figures, stats_fields
from admin.figures_cache import FiguresCache, Reading, SharedReading
from admin.routing import ApiError, Request, Response, Router
from admin.tables import Rows, local_rows, merge_counted, merge_route_counts, merge_top_topics
from core.bans import BanError, BanKind, ban_from_dict
from core.message import Message
from mqtt.topics import TopicError, validate_topic_filter, validate_topic_name
from pool.ops import GATHER_TIMEOUT

if TYPE_CHECKING:
    from actors.view import BrokerView

DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
TOP_TOPICS = 10
RELOAD_TIMEOUT = 15.0  # seconds a reload through the API waits for the other workers'


def page_bounds(request: Request) -> tuple[int, int]:
    """The request's `page` and `limit` (ApiError 400 if they are not valid)."""
    try:
        page = int(request.query.get("page", "1"))
        limit = int(request.query.get("limit", str(DEFAULT_LIMIT)))
    except ValueError as error:
        raise ApiError(400, "page and limit must be integers") from error
    if page < 1 or not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, f"page must be at least 1 and limit 1..{MAX_LIMIT}")
    return page, limit


def page_of(page: int, limit: int, items: list[Any], count: int) -> dict[str, Any]:
    """`{"data": items, "meta": {page, limit, count, hasnext}}`; `items` is that page of a
    list of `count` items."""
    return {
        "data": items,
        "meta": {"page": page, "limit": limit, "count": count, "hasnext": page * limit < count},
    }


def paged(request: Request, items: list[Any]) -> dict[str, Any]:
    """One page of `items` as `{"data": [...], "meta": {page, limit, count, hasnext}}`."""
    page, limit = page_bounds(request)
    start = (page - 1) * limit
    return page_of(page, limit, items[start : start + limit], len(items))


def with_missing(answer: dict[str, Any], missing: list[int]) -> dict[str, Any]:
    """`answer`, saying which workers of a pool it leaves out (they did not answer)."""
    if missing:
        answer["missing_workers"] = missing
    return answer


class GatheredParts(NamedTuple):
    """An operation's parts from every worker (of every node, in a cluster) that answered,
    and who did not: this node's workers, the other nodes."""

    parts: list[Rows]
    missing: list[int]
    missing_nodes: list[str]

    def said(self, answer: dict[str, Any]) -> dict[str, Any]:
        """`answer`, saying which workers of this node (`missing_workers`) and which other
        nodes (`missing_nodes`) it leaves out."""
        with_missing(answer, self.missing)
        if self.missing_nodes:
            answer["missing_nodes"] = self.missing_nodes
        return answer

    def not_found(self, client_id: str) -> ApiError:
        """404 if no worker has the client; 503 if those that did not answer might (a kick
        reaches such a worker anyway if it is linked, and is done there when it reads it)."""
        if self.missing or self.missing_nodes:
            left_out = [f"workers {self.missing}"] if self.missing else []
            left_out += [f"nodes {self.missing_nodes}"] if self.missing_nodes else []
            return ApiError(
                503,
                f"client {client_id!r} is not connected to the workers that answered; "
                f"{' and '.join(left_out)} did not answer in time",
            )
        return ApiError(404, f"client {client_id!r} is not connected")


def payload_fields(payload: bytes) -> dict[str, Any]:
    """A payload as text when it is UTF-8, else base64 (`payload_encoding` says which)."""
    try:
        return {"payload": payload.decode("utf-8"), "payload_encoding": "plain"}
    except UnicodeDecodeError:
        return {"payload": base64.b64encode(payload).decode(), "payload_encoding": "base64"}


class Api:
    def __init__(self, broker: BrokerView, figures: FiguresCache) -> None:
        self._broker = broker
        self._context = broker.context
        self._figures = figures
        # With the other nodes' figures, shared as the pool's are (in a cluster only).
        self._cluster_figures = SharedReading(self._read_cluster_figures)

    # ----- health -------------------------------------------------------------------------

    def health(self, _request: Request) -> Any:
        return {"status": "ok"}

    def ready(self, _request: Request) -> Any:
        if self._broker.ready:
            return {"ready": True}
        return Response(503, b'{"ready":false}')

    def stats(self, _request: Request) -> Any:
        """This node's pool-wide figures and, in a cluster, a `cluster` part: every node's
        figures added up, the nodes they are of and the nodes left out."""
        whole: ClusterFigures | None = None
        if self._broker.cluster is None:
            reading = self._figures.read()  # shared with /metrics, once a second
        else:
            reading, whole = self._cluster_figures.read()  # this node's reading inside
        pool_figures, missing = reading
        figures = with_missing(stats_fields(pool_figures), missing)
        figures["time"] = time.time()
        figures["node"] = self._broker.config.node_name
        # Sampled (one batch in TOPIC_SAMPLE), per worker, then added up.
        parts, _missing = self._gather("top_topics", {"limit": str(TOP_TOPICS)})
        figures["top_topics"] = merge_top_topics(parts, TOP_TOPICS)
        if whole is not None:
            figures["cluster"] = whole.as_json()
            figures["cluster"]["top_topics"] = merge_top_topics(
                parts + list(whole.top_topic_parts), TOP_TOPICS
            )
        return figures

    def _read_cluster_figures(self) -> tuple[Reading, ClusterFigures]:
        cluster, config = self._broker.cluster, self._broker.config.cluster
        assert cluster is not None and config is not None  # asked in a cluster only
        return read_cluster_figures(cluster, config.node, self._figures, TOP_TOPICS)

    def config(self, _request: Request) -> Any:
        config = self._broker.config
        return {
            "node_name": config.node_name,
            "listeners": [endpoint.name for endpoint in self._broker.endpoints],
            "limits": asdict(config.limits),
            "auth": asdict(config.auth),
            "store": {"kind": config.store.kind, "data_dir": config.store.data_dir},
            "http": {"host": config.http.host, "port": config.http.port},
            "sys": asdict(config.sys),
            "flapping": asdict(config.flapping),
            "plugins": [loaded.name for loaded in self._broker.plugins],
        }

    # ----- clients, sessions and subscriptions: pool-wide ---------------------------------

    def _gather(
        self, op: str, query: dict[str, str], timeout: float = GATHER_TIMEOUT
    ) -> tuple[list[Rows], list[int]]:
        """This worker's rows for `op` and, in a pool, every other worker's, and the
        workers left out (they did not answer within `timeout` seconds)."""
        parts = [local_rows(self._broker, op, query)]
        ops = self._broker.ops
        if ops is None:
            return parts, []
        answers, missing = ops.gather(op, query, timeout)
        return parts + [answers[worker] for worker in sorted(answers)], missing

    def _gather_nodes(self, op: str, query: dict[str, str]) -> GatheredParts:
        """`_gather`'s parts and, in a cluster, every other node's, asked at the same time
        (one timeout in all); the workers of this node and the other nodes left out."""
        cluster = self._broker.cluster
        asking = (
            None if cluster is None else gevent.spawn(cluster.gather, op, query, GATHER_TIMEOUT)
        )
        parts, missing = self._gather(op, query)
        if asking is None:
            return GatheredParts(parts, missing, [])
        others, missing_nodes = asking.get()
        parts += [part for node in sorted(others) for part in others[node]]
        return GatheredParts(parts, missing, missing_nodes)

    def _table(self, request: Request, op: str, filters: tuple[str, ...], *keys: str) -> Any:
        """One page of a cluster-wide table: each worker of each node sends its count and
        its first rows up to the page's end (no more), merged in `keys` order, then the page
        is cut."""
        page, limit = page_bounds(request)
        query = {name: request.query[name] for name in filters if name in request.query}
        query["upto"] = str(page * limit)
        gathered = self._gather_nodes(op, query)
        count, rows = merge_counted(gathered.parts, *keys)
        start = (page - 1) * limit
        return gathered.said(page_of(page, limit, rows[start : start + limit], count))

    def clients(self, request: Request) -> Any:
        filters = ("clientid", "username", "listener", "proto_ver")
        return self._table(request, "clients", filters, "clientid", "node")

    def client(self, request: Request) -> Any:
        client_id = request.params["clientid"]
        gathered = self._gather_nodes("client", {"clientid": client_id})
        found = [row for part in gathered.parts for row in part]
        if not found:
            raise gathered.not_found(client_id)
        return found[0]

    def kick(self, request: Request) -> Any:
        """Close the client's connection on whichever worker of whichever node has it:
        DISCONNECT 0x98 to a 5.0 client, its will fires."""
        client_id = request.params["clientid"]
        gathered = self._gather_nodes("kick", {"clientid": client_id})
        if not any(gathered.parts):
            raise gathered.not_found(client_id)
        return None

    def sessions(self, request: Request) -> Any:
        return self._table(request, "sessions", ("clientid", "connected"), "clientid", "node")

    def subscriptions(self, request: Request) -> Any:
        return self._table(
            request, "subscriptions", ("clientid", "topic"), "clientid", "node", "topic"
        )

    def routes(self, request: Request) -> Any:
        """Topic filters, how many sessions subscribe to each and on which nodes (in a
        cluster, every node's; else this one's)."""
        gathered = self._gather_nodes("routes", {})
        return gathered.said(paged(request, merge_route_counts(gathered.parts)))

    # ----- bridges -------------------------------------------------------------------------

    def bridge_rows(self) -> tuple[Rows, list[int]]:
        """Every configured bridge, from the worker that runs it (one that none runs now,
        its worker down or not placed yet, is listed as not connected, `worker` null)."""
        parts, missing = self._gather("bridges", {})
        rows = {row["name"]: row for part in parts for row in part}
        for bridge in self._broker.config.bridges:
            rows.setdefault(
                bridge.name,
                {"name": bridge.name, "worker": None, "connected": False, "address": ""},
            )
        return [rows[name] for name in sorted(rows)], missing

    def bridges(self, request: Request) -> Any:
        """The bridges to other brokers (docs/bridges.md)."""
        rows, missing = self.bridge_rows()
        return with_missing({"data": rows}, missing)

    # ----- the cluster ---------------------------------------------------------------------

    def cluster(self, request: Request) -> Any:
        """The nodes of the cluster as the admin's worker sees them (docs/cluster.md);
        without `[cluster]`, this node alone."""
        member = self._broker.cluster
        if member is None:
            return {"data": [{"node": self._broker.config.node_name, "state": "this node"}]}
        return member.describe()

    # ----- retained messages --------------------------------------------------------------

    def _retained_view(self, message: Message) -> dict[str, Any]:
        return {
            "topic": message.topic,
            "qos": message.qos,
            "size": len(message.payload),
            "publisher": message.publisher,
            "timestamp": message.timestamp,
            **payload_fields(message.payload),
        }

    def retained_list(self, request: Request) -> Any:
        index = self._broker.retained_index
        assert index is not None
        topic_filter = request.query.get("topic")
        if topic_filter is not None:
            try:
                validate_topic_filter(topic_filter)
            except TopicError as error:
                raise ApiError(400, str(error)) from error
        # The index keeps its names sorted: a page costs its rows, not a sort of them all.
        page, limit = page_bounds(request)
        start = (page - 1) * limit
        count, items = index.page(topic_filter, start, start + limit)
        return page_of(page, limit, [self._retained_view(m) for _topic, m in items], count)

    def retained_get(self, request: Request) -> Any:
        index = self._broker.retained_index
        assert index is not None
        message = index.get(request.params["topic"])
        if message is None:
            raise ApiError(404, f"no retained message on {request.params['topic']!r}")
        return self._retained_view(message)

    def retained_delete(self, request: Request) -> Any:
        topic = request.params["topic"]
        index = self._broker.retained_index
        assert index is not None
        if index.get(topic) is None:
            raise ApiError(404, f"no retained message on {topic!r}")
        # An empty retained message clears the topic [MQTT-3.3.1-10]: told to the retainer,
        # and deleted from the store. Subscribers get nothing: nothing was published.
        self._context.dispatcher.clear_retained(topic)
        return None

    # ----- publish ------------------------------------------------------------------------

    def publish(self, request: Request) -> Any:
        body = request.json()
        topic = body.get("topic")
        if not isinstance(topic, str):
            raise ApiError(400, "topic must be a string")
        try:
            validate_topic_name(topic)
        except TopicError as error:
            raise ApiError(400, str(error)) from error
        if topic.startswith("$"):
            raise ApiError(400, "topics starting with '$' are the broker's [MQTT-4.7.2-1]")
        config = self._broker.config
        levels = config.limits.max_topic_levels
        if topic.count("/") >= levels:
            raise ApiError(
                400, f"the topic has more than [limits] max_topic_levels ({levels}) levels"
            )
        qos, retain = body.get("qos", 0), body.get("retain", False)
        if qos not in (0, 1, 2) or not isinstance(retain, bool):
            raise ApiError(400, "qos must be 0, 1 or 2 and retain true or false")
        if qos > config.mqtt.maximum_qos:
            raise ApiError(
                400, f"qos {qos} is above [mqtt] maximum_qos ({config.mqtt.maximum_qos})"
            )
        if retain and not config.mqtt.retain_available:
            raise ApiError(400, "retained messages are off ([mqtt] retain_available = false)")
        payload = body.get("payload", "")
        if not isinstance(payload, str):
            raise ApiError(400, "payload must be a string")
        if body.get("encoding", "plain") == "base64":
            try:
                data = base64.b64decode(payload, validate=True)
            except binascii.Error as error:
                raise ApiError(400, f"payload is not base64: {error}") from error
        else:
            data = payload.encode()
        # What an MQTT client could not send in one packet: its topic and payload, at least.
        if len(data) + len(topic.encode()) > config.limits.max_packet_size:
            raise ApiError(
                400,
                f"topic and payload are over [limits] max_packet_size "
                f"({config.limits.max_packet_size} bytes)",
            )
        message = Message(topic=topic, payload=data, qos=qos, retain=retain)
        self._context.dispatcher.publish([message])
        return {"id": message.message_id}

    # ----- plugins ------------------------------------------------------------------------

    def plugins(self, _request: Request) -> Any:
        return [
            {"name": loaded.name, "reloadable": hasattr(loaded.plugin, "reload")}
            for loaded in self._broker.plugins
        ]

    def plugins_reload(self, _request: Request) -> Any:
        """SIGHUP's reload: plugin files, TLS certificates, sessions re-authorised; in a
        pool on every worker (answered once all have, or were left out)."""
        _parts, missing = self._gather("reload", {}, RELOAD_TIMEOUT)
        if missing:
            raise ApiError(
                503, f"reloaded, but not on workers {missing}: they did not answer in time"
            )
        return self.plugins(_request)

    # ----- bans ---------------------------------------------------------------------------

    def bans(self, request: Request) -> Any:
        admission = self._context.admission
        assert admission is not None
        return paged(request, [ban.as_dict() for ban in admission.table.bans(time.time())])

    def ban_add(self, request: Request) -> Any:
        """Body: {"kind": "clientid"|"username"|"peerhost", "value": ..., "duration": seconds
        (or "until": epoch seconds; neither: until lifted), "reason": ...}."""
        body = request.json()
        now = time.time()
        duration = body.pop("duration", None)
        if duration is not None:
            if not isinstance(duration, int | float) or duration <= 0:
                raise ApiError(400, "duration must be a number of seconds above 0")
            body["until"] = now + duration
        body["created_at"] = now
        try:
            ban = ban_from_dict(body)
        except BanError as error:
            raise ApiError(400, str(error)) from error
        admission = self._context.admission
        assert admission is not None
        admission.add(ban)
        admission.settle()  # in a cluster: in its bucket, or [cluster] claim_timeout passed
        _parts, missing = self._gather("sync", {})  # in force on every worker when answered
        return Response(201, orjson.dumps(with_missing(ban.as_dict(), missing)))

    def ban_remove(self, request: Request) -> Any:
        admission = self._context.admission
        assert admission is not None
        try:
            kind = BanKind(request.params["kind"])
            removed = admission.remove(kind, request.params["value"])
        except (ValueError, BanError) as error:
            raise ApiError(400, str(error)) from error
        admission.settle()  # lifted in a cluster's bucket too, even if not held here
        if not removed:
            raise ApiError(404, f"no ban of {request.params['kind']} {request.params['value']!r}")
        self._gather("sync", {})  # lifted on every worker when answered
        return None


def add_api_routes(router: Router, broker: BrokerView, figures: FiguresCache) -> Api:
    """Route `/api/v1` to a new `Api`, which is returned (the metrics read its bridges)."""
    api = Api(broker, figures)
    routes = [
        ("GET", "/api/v1/stats", api.stats),
        ("GET", "/api/v1/config", api.config),
        ("GET", "/api/v1/clients", api.clients),
        ("GET", "/api/v1/clients/{clientid...}", api.client),
        ("DELETE", "/api/v1/clients/{clientid...}", api.kick),
        ("GET", "/api/v1/sessions", api.sessions),
        ("GET", "/api/v1/subscriptions", api.subscriptions),
        ("GET", "/api/v1/routes", api.routes),
        ("GET", "/api/v1/bridges", api.bridges),
        ("GET", "/api/v1/cluster", api.cluster),
        ("GET", "/api/v1/retained", api.retained_list),
        ("GET", "/api/v1/retained/{topic...}", api.retained_get),
        ("DELETE", "/api/v1/retained/{topic...}", api.retained_delete),
        ("POST", "/api/v1/publish", api.publish),
        ("GET", "/api/v1/plugins", api.plugins),
        ("POST", "/api/v1/plugins/reload", api.plugins_reload),
        ("GET", "/api/v1/banned", api.bans),
        ("POST", "/api/v1/banned", api.ban_add),
        ("DELETE", "/api/v1/banned/{kind}/{value...}", api.ban_remove),
    ]
    router.add("GET", "/api/v1/health", api.health, public=True)
    router.add("GET", "/api/v1/ready", api.ready, public=True)
    for method, pattern, handler in routes:
        router.add(method, pattern, handler)
    return api
