"""Bans across a cluster of brokers (three, or two where a third adds nothing) over a real
NATS server (docs/cluster.md "Bans"): a ban made through one node's admin API, or by
flapping detection on one node, refuses the CONNECTs of every node, is listed by every node
and lifted through any; a node that was down meanwhile starts with the cluster's bans; a
node's `bans.json` is imported into the cluster's bucket once; a ban that NATS cannot take
holds on its node, with a warning, and on every node once NATS is back, unless the cluster
changed it meanwhile.

Each test runs with one process per node and with a pool of two workers per node (the
integration suite's two modes): every worker of every node watches the bucket, so a ban is
checked over several CONNECTs, which the pool spreads over its workers."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats import connect as nats_connect
from nats.js.errors import KeyDeletedError, KeyNotFoundError

from cluster.bans import ban_key
from core.bans import BanKind
from mqtt.packets import ConnAck
from mqtt.reason_codes import ReasonCode
from tests.support.admin import Admin, http_config
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess, pool_mode, start_broker
from tests.support.clients import unique
from tests.support.cluster import linked, needs_nats_server, node_config, nodes_of, restart_node
from tests.support.nats_server import NatsServer
from tests.support.ports import free_port
from tests.support.raw_client import RawClient
from tests.support.tcp_proxy import TcpProxy
from tests.support.workers import connections_of, refusals_of

pytestmark = needs_nats_server

NODES = ("a", "b", "c")
NOT_AUTHORISED = 5  # 3.1.1's CONNACK return code for a banned client
FLAPPING = "[flapping]\nmax_connects = 3\nwindow = 10\nban_time = 60\n"
# Refused CONNECTs are answered at once (no [overload] auth_failure_delay): `answers` tries
# until every worker of a pool has answered, which the kernel picks per connection, and a
# delay doubling per refusal from one address let a few tries outlast a brief ban.
PROMPT_REFUSALS = "[overload]\nauth_failure_delay = 0.0\n"


class Cluster:
    """Nodes (a, b and c, or a and b), each with its admin API."""

    def __init__(self, nodes: dict[str, BrokerProcess], ports: dict[str, int]) -> None:
        self.nodes = nodes
        self.admin = {node: Admin(nodes[node], port) for node, port in ports.items()}


def cluster_of(tmp_path: Path, nats: NatsServer, extra: dict[str, str]) -> Iterator[Cluster]:
    """Nodes named by `extra`'s keys, each with the admin API and that configuration."""
    ports = {node: free_port() for node in extra}
    texts = {
        node: http_config(ports[node]) + PROMPT_REFUSALS + text for node, text in extra.items()
    }
    with nodes_of(tmp_path, nats, texts) as nodes:
        yield Cluster(nodes, ports)


@pytest.fixture
def cluster(tmp_path: Path, nats: NatsServer) -> Iterator[Cluster]:
    yield from cluster_of(tmp_path, nats, dict.fromkeys(NODES, ""))


@pytest.fixture
def pair(tmp_path: Path, nats: NatsServer) -> Iterator[Cluster]:
    yield from cluster_of(tmp_path, nats, {"a": "", "b": ""})


@pytest.fixture
def flapping_on_a(tmp_path: Path, nats: NatsServer) -> Iterator[Cluster]:
    """Flapping detection on node a only: node b counts nothing, so a ban it applies is a's."""
    yield from cluster_of(tmp_path, nats, {"a": FLAPPING, "b": ""})


def connack_code(broker: BrokerProcess, client_id: str, version: int = 5, **kwargs: Any) -> int:
    """The CONNACK's reason code (3.1.1: return code) for a CONNECT of `client_id`."""
    client = RawClient(broker.host, broker.port, version=version)
    try:
        connack = client.connect(client_id, **kwargs)
        assert isinstance(connack, ConnAck), connack
        return int(connack.reason_code)
    finally:
        client.close()


def answers(broker: BrokerProcess, client_id: str, code: int, **kwargs: Any) -> None:
    """Within 5 s, every worker of the node answers a CONNECT of `client_id` with `code`, and
    the three CONNECTs after that get it too. Each worker of a pool watches the bans on its
    own, so one may hear a change a moment after another: which worker answered each
    CONNECT is read from its log line."""
    workers = pool_mode.workers
    deadline = time.monotonic() + 5
    agreeing: set[int] = set()
    while len(agreeing) < workers:
        seen = len(connections_of(broker, client_id)), len(refusals_of(broker, client_id))
        got = connack_code(broker, client_id, **kwargs)
        worker = 0 if workers == 1 else _answering_worker(broker, client_id, seen)
        if got == code:
            agreeing.add(worker)
        else:
            agreeing.discard(worker)
            assert time.monotonic() < deadline, f"worker {worker} still answered {got}"
            time.sleep(0.05)
    for _ in range(3):
        assert connack_code(broker, client_id, **kwargs) == code


def _answering_worker(broker: BrokerProcess, client_id: str, seen: tuple[int, int]) -> int:
    """The worker whose log line tells the CONNECT of `client_id` made after `seen` (the
    counts of its connections and refusals logged before it)."""
    deadline = time.monotonic() + 2
    while True:
        accepted, refused = connections_of(broker, client_id), refusals_of(broker, client_id)
        if len(accepted) > seen[0]:
            return accepted[-1]
        if len(refused) > seen[1]:
            return refused[-1]
        assert time.monotonic() < deadline, f"no worker logged the CONNECT of {client_id!r}"
        time.sleep(0.01)


def listed(admin: Admin) -> list[tuple[str, str]]:
    return [(ban["kind"], ban["value"]) for ban in admin.get("/api/v1/banned")["data"]]


@pytest.mark.parametrize("kind", ["clientid", "peerhost"])
def test_a_ban_made_through_one_node_holds_on_every_node_until_lifted_through_another(
    cluster: Cluster, kind: str
) -> None:
    client_id = unique("banned")
    value = client_id if kind == "clientid" else "127.0.0.1"
    body = {"kind": kind, "value": value, "reason": "test"}
    assert cluster.admin["a"].request("POST", "/api/v1/banned", body).status == 201
    answers(cluster.nodes["b"], client_id, ReasonCode.BANNED)
    assert connack_code(cluster.nodes["b"], client_id, version=4) == NOT_AUTHORISED
    assert listed(cluster.admin["c"]) == [(kind, value if kind == "clientid" else "127.0.0.1/32")]
    assert cluster.admin["c"].request("DELETE", f"/api/v1/banned/{kind}/{value}").status == 204
    for node in ("a", "b"):
        answers(cluster.nodes[node], client_id, ReasonCode.SUCCESS)
    assert listed(cluster.admin["a"]) == []


def test_a_node_that_was_down_starts_with_the_bans_made_and_lifted_meanwhile(
    pair: Cluster, tmp_path: Path
) -> None:
    cluster = pair
    kept, lifted = unique("kept"), unique("lifted")
    admin = cluster.admin["a"]
    admin.request("POST", "/api/v1/banned", {"kind": "clientid", "value": lifted})
    answers(cluster.nodes["b"], lifted, ReasonCode.BANNED)
    assert cluster.nodes["b"].stop() == 0
    assert (
        admin.request("POST", "/api/v1/banned", {"kind": "clientid", "value": kept}).status == 201
    )
    assert admin.request("DELETE", f"/api/v1/banned/clientid/{lifted}").status == 204
    b = cluster.nodes["b"] = restart_node(tmp_path, "b")
    # Its listeners opened with the cluster's bans: the first CONNECTs are answered so.
    for _ in range(3):
        assert connack_code(b, kept) == ReasonCode.BANNED
        assert connack_code(b, lifted) == ReasonCode.SUCCESS
    assert listed(cluster.admin["b"]) == [("clientid", kept)]


def test_a_client_that_flaps_on_one_node_is_refused_on_the_others(flapping_on_a: Cluster) -> None:
    cluster = flapping_on_a
    client_id = unique("flappy")
    codes = [connack_code(cluster.nodes["a"], client_id) for _ in range(3)]
    assert codes == [0, 0, ReasonCode.BANNED]  # the 3rd within 10 s
    wait_for_log(cluster.nodes["a"], f"client {client_id!r} flapping: 3 CONNECTs within 10 s")
    answers(cluster.nodes["b"], client_id, ReasonCode.BANNED)
    bans = cluster.admin["b"].get("/api/v1/banned")["data"]
    assert [(ban["value"], ban["reason"]) for ban in bans] == [(client_id, "flapping")]
    assert bans[0]["until"] > time.time() + 50


def test_a_nodes_bans_file_is_imported_into_the_cluster_once(pair: Cluster, tmp_path: Path) -> None:
    """A node started in the cluster with a `bans.json` (a broker that joins one) puts its
    bans in the cluster's bucket and renames the file; not a ban the cluster lifted."""
    cluster = pair
    from_file, expired, lifted = unique("from-file"), unique("expired"), unique("lifted")
    body = {"kind": "clientid", "value": lifted}
    assert cluster.admin["a"].request("POST", "/api/v1/banned", body).status == 201
    assert cluster.admin["a"].request("DELETE", f"/api/v1/banned/clientid/{lifted}").status == 204
    assert cluster.nodes["b"].stop() == 0
    bans_file = tmp_path / "b" / "data" / "bans.json"
    now = time.time()
    bans_file.write_bytes(
        orjson.dumps(
            [
                {"kind": "clientid", "value": from_file, "until": None, "reason": "old"},
                {"kind": "clientid", "value": expired, "until": now - 1, "reason": "old"},
                {"kind": "clientid", "value": lifted, "until": None, "reason": "old"},
            ]
        )
    )
    b = cluster.nodes["b"] = restart_node(tmp_path, "b")
    line = wait_for_log(b, f"cluster: imported the bans of {bans_file} into bucket")
    assert "(1 put, 1 there or lifted already)" in line
    assert not bans_file.exists()
    assert (tmp_path / "b" / "data" / "bans.json.imported").exists()
    answers(cluster.nodes["a"], from_file, ReasonCode.BANNED)
    assert connack_code(cluster.nodes["a"], expired) == ReasonCode.SUCCESS
    assert connack_code(cluster.nodes["b"], lifted) == ReasonCode.SUCCESS
    assert listed(cluster.admin["a"]) == [("clientid", from_file)]


def bucket_holds(url: str, bucket: str, key: str) -> bool:
    """Whether `key` of the JetStream key-value `bucket` holds a value (read with nats-py)."""

    async def read() -> bool:
        client = await nats_connect(url)
        try:
            kv = await client.jetstream().key_value(bucket)
            try:
                await kv.get(key)
            except (KeyNotFoundError, KeyDeletedError):
                return False
            return True
        finally:
            await client.close()

    return asyncio.run(read())


def test_the_key_of_a_ban_is_deleted_from_the_bucket_once_the_ban_has_expired(
    pair: Cluster, nats: NatsServer, tmp_path: Path
) -> None:
    cluster = pair
    client_id = unique("brief")
    match = re.search(r'name = "([^"]+)"', node_config(tmp_path, "a"))
    assert match is not None
    bucket, key = f"mqtt-{match[1]}-bans", ban_key(BanKind.CLIENT_ID, client_id)
    body = {"kind": "clientid", "value": client_id, "duration": 4}
    posted = time.monotonic()
    assert cluster.admin["a"].request("POST", "/api/v1/banned", body).status == 201
    assert bucket_holds(nats.url, bucket, key)  # the API's answer waits for the bucket
    # Within the ban's 4 s: a pool's every worker must answer, and the refused CONNECTs
    # of a banned id are delayed.
    answers(cluster.nodes["b"], client_id, ReasonCode.BANNED)
    deadline = posted + 10  # the ban's 4 s, then the sweep's pause
    while bucket_holds(nats.url, bucket, key):
        assert time.monotonic() < deadline, "the expired ban's key is still in the bucket"
        time.sleep(0.2)
    assert connack_code(cluster.nodes["b"], client_id) == ReasonCode.SUCCESS


def test_a_ban_made_while_nats_is_down_holds_on_its_node_then_on_every_node_once_it_is_back(
    tmp_path: Path,
) -> None:
    own = NatsServer()  # stopped and started by the test: not the module's server
    own.start()
    ports = {node: free_port() for node in ("a", "b")}
    texts = {
        node: f"claim_timeout = 1.0\n{http_config(port)}{PROMPT_REFUSALS}"
        for node, port in ports.items()
    }
    try:
        # A peer timeout longer than the outage: the nodes stay in the cluster through it.
        with nodes_of(tmp_path, own, texts, peer_timeout=10.0) as nodes:
            admin = {node: Admin(nodes[node], port) for node, port in ports.items()}
            own.stop()
            client_id = unique("later")
            started = time.monotonic()
            body = {"kind": "clientid", "value": client_id}
            assert admin["a"].request("POST", "/api/v1/banned", body).status == 201
            assert time.monotonic() - started < 3  # the bucket is not waited for past 1 s
            line = wait_for_log(
                nodes["a"], f"cluster: the ban of clientid {client_id!r} holds on this"
            )
            assert "written once NATS is back" in line
            answers(nodes["a"], client_id, ReasonCode.BANNED)  # checked before the claim
            own.start()
            wait_for_log(nodes["a"], "is written to bucket", timeout=15)
            answers(nodes["b"], client_id, ReasonCode.BANNED)
            assert listed(admin["b"]) == [("clientid", client_id)]
    finally:
        own.remove()


def test_a_ban_changed_through_the_cluster_while_a_node_was_cut_off_holds_over_that_nodes(
    tmp_path: Path,
) -> None:
    server = NatsServer()
    server.start()
    proxy = TcpProxy(server.port)  # between node a and NATS
    proxy.start()
    ports = {node: free_port() for node in ("a", "b")}
    try:
        text = f"claim_timeout = 1.0\n{http_config(ports['b'])}{PROMPT_REFUSALS}"
        with nodes_of(tmp_path, server, {"b": text}, peer_timeout=10.0) as nodes:
            config = node_config(tmp_path, "b", "a").replace(server.url, proxy.url)
            config = config.replace(f"port = {ports['b']}\n", f"port = {ports['a']}\n")
            (tmp_path / "a").mkdir()
            nodes["a"] = start_broker(tmp_path / "a", config)
            linked(nodes)
            admin = {node: Admin(nodes[node], port) for node, port in ports.items()}
            client_id = unique("both")
            proxy.cut()
            body = {"kind": "clientid", "value": client_id}
            assert (
                admin["a"].request("POST", "/api/v1/banned", body | {"reason": "a"}).status == 201
            )
            wait_for_log(nodes["a"], f"cluster: the ban of clientid {client_id!r} holds on this")
            assert (
                admin["b"].request("POST", "/api/v1/banned", body | {"reason": "b"}).status == 201
            )
            proxy.heal()
            line = wait_for_log(nodes["a"], "another node changed that ban meanwhile", timeout=15)
            assert f"the ban of clientid {client_id!r}" in line
            for node in ("a", "b"):
                deadline = time.monotonic() + 5
                while (
                    reasons := [ban["reason"] for ban in admin[node].get("/api/v1/banned")["data"]]
                ) != ["b"]:
                    assert time.monotonic() < deadline, (node, reasons)
                    time.sleep(0.1)
    finally:
        proxy.close()
        server.remove()
