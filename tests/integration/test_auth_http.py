"""plugins.auth_http against a real HTTP service started by the test (stdlib `http.server` in
threads, HTTP/1.1 keep-alive, and HTTPS with a trustme CA), clients over real sockets.

The service decides by user name and topic: allow, deny, ignore, 500, an answer after 2 s,
a superuser. CONNACK codes: 3.1.1 section 3.2.2.3, 5.0 section 3.2.2.2; a backend that could
not answer is 0x88 Server unavailable (3.1.1: 3). The "no stall" test measures the latency
of a publisher/subscriber pair on the same worker while another client's CONNECT waits 2 s
for the service.
"""

from __future__ import annotations

import signal
import ssl
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme

from mqtt.packets import ConnAck, Publish
from mqtt.reason_codes import ConnackReturnCode, ReasonCode
from tests.support.admin import Admin, http_config
from tests.support.broker_config import running_broker, wait_for_log_lines
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import PahoCollector, connect_raw, expect_publish, subscribe_raw, unique
from tests.support.ports import free_port
from tests.support.raw_client import RawClient

SLOW = 2.0  # seconds the service takes for user "slow"
SERVER_UNAVAILABLE = {4: ConnackReturnCode.SERVER_UNAVAILABLE, 5: ReasonCode.SERVER_UNAVAILABLE}
BAD_CREDENTIALS = {
    4: ConnackReturnCode.BAD_USER_NAME_OR_PASSWORD,
    5: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
}


class Service:
    """What the HTTP service was asked, and the connections it was asked on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.peers: set[int] = set()

    def record(self, path: str, body: dict[str, Any], port: int) -> None:
        with self.lock:
            self.bodies.append((path, body))
            self.peers.add(port)

    def asked(self, path: str, **fields: Any) -> int:
        with self.lock:
            return sum(
                1
                for p, body in self.bodies
                if p == path and all(body.get(k) == v for k, v in fields.items())
            )


def auth_answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    username = body.get("username") or ""
    if username == "slow":
        time.sleep(SLOW)
    if username == "error":
        return 500, {"error": "database down"}
    if username == "super":
        return 200, {"result": "allow", "is_superuser": True}
    if username == "ignore":
        return 200, {"result": "ignore"}
    allowed = body.get("password") == f"pw-{username}"
    return 200, {"result": "allow" if allowed else "deny"}


def acl_answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    topic = body["topic"]
    if topic.startswith("error/"):
        return 500, {}
    if topic.startswith("ignore/"):
        return 200, {"result": "ignore"}
    return 200, {"result": "allow" if topic.startswith(("open/", "slowpath/")) else "deny"}


def handler_for(service: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def do_POST(self) -> None:
            body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
            service.record(self.path, body, self.client_address[1])
            answer = auth_answer if self.path == "/auth" else acl_answer
            status, reply = answer(body)
            data = orjson.dumps(reply)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            """Quiet: the test asserts on `service` instead."""

    return Handler


class RunningService:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.service = Service()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(self.service))
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def http_service() -> Iterator[RunningService]:
    running = RunningService()
    yield running
    running.stop()


def plugin_config(url: str, *, acl: bool = True, extra: str = "") -> str:
    acl_line = f'acl_url = "{url}/acl"\n' if acl else ""
    # Refused CONNECTs are answered at once (no [overload] auth_failure_delay): the test
    # times the plugin's refusals, and makes many from one address.
    return (
        '[store]\nkind = "memory"\n[overload]\nauth_failure_delay = 0.0\n'
        "[auth]\nallow_anonymous = false\n"
        f'[[plugins]]\nmodule = "plugins.auth_http"\nauth_url = "{url}/auth"\n{acl_line}{extra}'
    )


@pytest.fixture(scope="module")
def http_broker(
    http_service: RunningService, tmp_path_factory: pytest.TempPathFactory, workers: int
) -> Iterator[tuple[BrokerProcess, Admin]]:
    port = free_port()
    config = plugin_config(http_service.url) + http_config(port)
    with running_broker(tmp_path_factory.mktemp("auth-http"), config) as broker:
        yield broker, Admin(broker, port)


def connack(broker: BrokerProcess, version: int, username: str, password: str | None) -> int:
    client = RawClient(broker.host, broker.port, version=version, timeout=10)
    try:
        answer = client.connect(
            unique("http"),
            username=username,
            password=password.encode() if password is not None else None,
        )
        assert isinstance(answer, ConnAck), answer
        return int(answer.reason_code)
    finally:
        client.close()


def login(broker: BrokerProcess, user: str, client_id: str | None = None) -> RawClient:
    return connect_raw(
        broker, client_id or unique(user), username=user, password=f"pw-{user}".encode()
    )


@pytest.mark.parametrize("version", [4, 5])
def test_the_service_allows_denies_ignores_or_fails(
    http_broker: tuple[BrokerProcess, Admin], version: int
) -> None:
    broker, _admin = http_broker
    assert connack(broker, version, "alice", "pw-alice") == 0
    assert connack(broker, version, "alice", "wrong") == BAD_CREDENTIALS[version]
    # ignore: nobody else decides and [auth] allow_anonymous is false.
    assert connack(broker, version, "ignore", "x") == BAD_CREDENTIALS[version]
    assert connack(broker, version, "error", "x") == SERVER_UNAVAILABLE[version]
    assert "backend of plugin plugins.auth_http failed" in broker.log()
    assert "HTTP 500, expected 200" in broker.log()


def test_the_body_is_emqx_shaped(
    http_broker: tuple[BrokerProcess, Admin], http_service: RunningService
) -> None:
    broker, _admin = http_broker
    client_id = unique("shape")
    client = login(broker, "carol", client_id)
    client.send(Publish(f"open/{client_id}", b"x", qos=0))
    subscribe_raw(client, 1, (f"closed/{client_id}", 0))
    client.close()
    service = http_service.service
    deadline = time.monotonic() + 5
    while service.asked("/acl", clientid=client_id) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    with service.lock:
        bodies = {
            (path, b.get("action")): b for path, b in service.bodies if b["clientid"] == client_id
        }
    common = {"clientid": client_id, "username": "carol", "peerhost": "127.0.0.1", "proto_ver": 4}
    assert bodies["/auth", None] == {**common, "password": "pw-carol"}
    assert bodies["/acl", "publish"] == {
        **common,
        "action": "publish",
        "topic": f"open/{client_id}",
    }
    assert bodies["/acl", "subscribe"] == {
        **common,
        "action": "subscribe",
        "topic": f"closed/{client_id}",
    }


def test_acl_answers_decide_publish_and_subscribe_and_are_cached(
    http_broker: tuple[BrokerProcess, Admin], http_service: RunningService, workers: int
) -> None:
    broker, _admin = http_broker
    client_id = unique("acl")
    client = login(broker, "dave", client_id)
    suback = subscribe_raw(client, 1, ("open/#", 0), ("closed/#", 0), ("error/#", 0))
    assert list(suback.reason_codes) == [0, 0x80, 0x80]
    for number in range(5):
        client.send(Publish("open/a", f"m{number}".encode(), qos=0))
        client.send(Publish("closed/a", b"never", qos=0))
    assert [expect_publish(client).payload for _ in range(5)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    client.expect_nothing(within=0.3)
    client.close()
    service = http_service.service
    # Five publishes on each topic, one question each (this client is on one worker).
    assert service.asked("/acl", clientid=client_id, action="publish", topic="open/a") == 1
    assert service.asked("/acl", clientid=client_id, action="publish", topic="closed/a") == 1


def test_a_superuser_is_allowed_everything_without_asking(
    http_broker: tuple[BrokerProcess, Admin], http_service: RunningService
) -> None:
    broker, _admin = http_broker
    client_id = unique("super")
    client = connect_raw(broker, client_id, username="super", password=b"any")
    assert list(subscribe_raw(client, 1, ("closed/#", 0)).reason_codes) == [0]
    client.send(Publish("closed/x", b"mine", qos=0))
    assert expect_publish(client).payload == b"mine"
    client.close()
    assert http_service.service.asked("/acl", clientid=client_id) == 0


def test_credentials_are_cached_until_a_kick_or_sighup(
    http_broker: tuple[BrokerProcess, Admin], http_service: RunningService, workers: int
) -> None:
    broker, admin = http_broker
    service = http_service.service
    client_id = unique("cached")
    for _ in range(4):
        login(broker, "erin", client_id).close()
    # Each worker asks once at most: the others are answered from its cache.
    assert 1 <= service.asked("/auth", clientid=client_id) <= workers
    before = service.asked("/auth", clientid=client_id)
    client = login(broker, "erin", client_id)
    assert admin.request("DELETE", f"/api/v1/clients/{client_id}").status == 204
    assert client.is_closed_by_broker()
    # The kicked client's answers are forgotten on its worker; a pool's other worker may
    # still hold them, so the reconnects ask once more at least and one per worker at most.
    for _ in range(workers * 3):
        login(broker, "erin", client_id).close()
    assert before + 1 <= service.asked("/auth", clientid=client_id) <= before + workers
    before = service.asked("/auth", clientid=client_id)
    broker.process.send_signal(signal.SIGHUP)
    wait_for_log_lines(broker, "plugin plugins.auth_http reloaded", workers)
    for _ in range(workers * 3):
        login(broker, "erin", client_id).close()
    assert before + 1 <= service.asked("/auth", clientid=client_id) <= before + workers
    # Keep-alive: all these requests came over a few connections, not one each.
    assert len(service.peers) <= 2 * 4 * workers  # (auth + acl) x pool_size per worker


def test_metrics_count_calls_errors_and_cache_hits(
    http_broker: tuple[BrokerProcess, Admin],
) -> None:
    broker, admin = http_broker
    client_id = unique("metrics")
    for _ in range(3):
        login(broker, "frank", client_id).close()
    connack(broker, 4, "error", "x")
    text = admin.request("GET", "/metrics").body.decode()
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("mqtt_broker_backend_")
        and 'plugin="plugins.auth_http"' in line
        and "_bucket" not in line
    }
    assert values["mqtt_broker_backend_calls_total"] >= 2
    assert values["mqtt_broker_backend_errors_total"] >= 1
    assert values["mqtt_broker_backend_cache_hits_total"] >= 1
    assert values["mqtt_broker_backend_cache_misses_total"] >= 2
    assert values["mqtt_broker_backend_call_seconds_count"] >= 2


def test_a_slow_service_times_out_and_a_full_backend_refuses_at_once(
    http_service: RunningService, tmp_path: Path, workers: int
) -> None:
    if workers != 1:
        pytest.skip("the bound is per worker: one worker makes the second CONNECT meet it")
    extra = "timeout = 1.0\npool_size = 1\nmax_waiting = 1\n"
    config = plugin_config(http_service.url, acl=False, extra=extra)
    with running_broker(tmp_path, config) as broker:
        slow = RawClient(broker.host, broker.port, timeout=10)
        started = time.monotonic()
        slow_answer: list[Any] = []
        waiter = threading.Thread(
            target=lambda: slow_answer.append(
                slow.connect(unique("slow"), username="slow", password=b"x")
            )
        )
        waiter.start()
        time.sleep(0.3)  # its CONNECT now waits for the service
        fast_started = time.monotonic()
        assert connack(broker, 5, "alice", "pw-alice") == ReasonCode.SERVER_UNAVAILABLE
        assert time.monotonic() - fast_started < 0.5  # busy: refused at once
        waiter.join(10)
        assert slow_answer[0].reason_code == ConnackReturnCode.SERVER_UNAVAILABLE
        assert 0.9 < time.monotonic() - started < 1.9  # the 1 s timeout, not the 2 s answer
        slow.close()
        log = broker.log()
        assert "is busy: 1 calls already waiting" in log and "did not answer within 1.0 s" in log


def test_on_failure_ignore_lets_allow_anonymous_decide(
    http_service: RunningService, tmp_path: Path
) -> None:
    config = plugin_config(http_service.url, extra='on_failure = "ignore"\n').replace(
        "allow_anonymous = false", "allow_anonymous = true"
    )
    with running_broker(tmp_path, config) as broker:
        assert connack(broker, 4, "error", "x") == 0
        assert connack(broker, 4, "alice", "wrong") == BAD_CREDENTIALS[4]
        client = login(broker, "alice")
        # An ACL backend failure is IGNORE too, and nothing else grants: denied.
        assert list(subscribe_raw(client, 1, ("error/x", 0)).reason_codes) == [0x80]
        client.close()


def test_https_with_a_ca_file(tmp_path: Path) -> None:
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate.configure_cert(tls)
    authority.cert_pem.write_to_path(tmp_path / "ca.pem")
    running = RunningService(tls)
    try:
        config = plugin_config(running.url, acl=False, extra='ca_file = "ca.pem"\n')
        with running_broker(tmp_path, config) as broker:
            assert connack(broker, 4, "alice", "pw-alice") == 0
            assert connack(broker, 4, "alice", "wrong") == BAD_CREDENTIALS[4]
        # Without the CA the service's certificate is not trusted: a backend failure.
        with running_broker(tmp_path, plugin_config(running.url, acl=False)) as broker:
            assert connack(broker, 4, "alice", "pw-alice") == ConnackReturnCode.SERVER_UNAVAILABLE
            assert "CERTIFICATE_VERIFY_FAILED" in broker.log()
    finally:
        running.stop()


def test_no_stall_while_the_service_answers_one_connect_after_2_s(
    http_service: RunningService, tmp_path: Path, workers: int
) -> None:
    """A pair on the same worker (one worker: every client is) keeps its latency low while
    another client's CONNECT waits 2 s for the service."""
    if workers != 1:
        pytest.skip("needs every client on one worker: runs in the 1-worker mode")
    config = plugin_config(http_service.url, acl=False)
    broker = start_broker(tmp_path, config, ("--workers", "1"))
    try:
        topic = unique("nostall")
        setup = lambda client: client.username_pw_set("alice", "pw-alice")  # noqa: E731
        subscriber = PahoCollector(broker, unique("sub"), setup=setup)
        publisher = PahoCollector(broker, unique("pub"), setup=setup)
        subscriber.subscribe(topic, 0)
        slow = RawClient(broker.host, broker.port, timeout=10)
        slow_answer: list[Any] = []
        waiter = threading.Thread(
            target=lambda: slow_answer.append(
                slow.connect(unique("slow"), username="slow", password=b"pw-slow")
            )
        )
        waiter.start()
        time.sleep(0.1)
        latencies = []
        started = time.monotonic()
        while time.monotonic() - started < SLOW - 0.3:  # all while the CONNECT waits
            sent = time.perf_counter()
            publisher.client.publish(topic, b"ping", 0)
            subscriber.next_message(timeout=5)
            latencies.append(time.perf_counter() - sent)
            time.sleep(0.01)
        waiter.join(10)
        assert slow_answer and slow_answer[0].reason_code == 0
        assert time.monotonic() - started >= SLOW - 0.5  # the service did take its time
        assert len(latencies) >= 50
        p99 = statistics.quantiles(latencies, n=100)[98]
        assert p99 < 0.05, f"p99 {p99 * 1000:.1f} ms while a CONNECT waited for the service"
        slow.close()
        subscriber.close()
        publisher.close()
        counts = Counter(path for path, _body in http_service.service.bodies)
        assert counts["/auth"] >= 3
    finally:
        assert broker.stop() == 0, broker.log()
