"""The admin listener under abuse, over real sockets: held and half-sent connections
(slowloris) do not starve health, ready and /metrics, slow requests are closed, and the
dashboard's retained page polled back to back over 100k retained messages does not delay
MQTT on the worker that serves it (docs/security.md, "The admin listener").
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqtt import encode
from mqtt.packets import Publish
from tests.support.admin import Admin, http_config
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.clients import connect_raw, unique
from tests.support.ports import free_port
from tests.support.raw_client import RawClient
from tests.support.workers import connect_on_worker

CAP = 32
HEADER_TIMEOUT = 1.5
IDLE_TIMEOUT = 3.0
HELD = 100  # connections an attacker holds: three times the cap


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[Admin]:
    port = free_port()
    limits = (
        f"max_connections = {CAP}\nheader_timeout = {HEADER_TIMEOUT}\nidle_timeout = {IDLE_TIMEOUT}"
    )
    with running_broker(tmp_path_factory.mktemp("hardening"), http_config(port, limits)) as broker:
        yield Admin(broker, port)


def timed(admin: Admin, path: str) -> float:
    """Seconds until `GET path` (no credentials) is answered 200 on a new connection."""
    started = time.monotonic()
    answer = admin.request("GET", path, key=None)
    assert answer.status == 200, (path, answer.status)
    return time.monotonic() - started


def closed_by_peer(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_held_and_half_sent_connections_do_not_starve_health(admin: Admin) -> None:
    """Three times the cap: idle ones, then ones whose headers never end. Health, ready
    and /metrics are still answered at once, and the timeouts then close them all."""
    held: list[socket.socket] = []
    try:
        for n in range(HELD):
            sock = socket.create_connection(("127.0.0.1", admin.port), timeout=5)
            if n >= HELD // 2:
                sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            held.append(sock)
        started = time.monotonic()
        took = [timed(admin, path) for path in ("/api/v1/health", "/api/v1/ready", "/metrics")]
        took += [timed(admin, "/api/v1/health") for _ in range(5)]
        assert time.monotonic() - started < HEADER_TIMEOUT, "measured after the timeouts"
        assert max(took) < 0.5, took
        # The newest half-sent ones outlived the cap's closing: their header timeout ends them.
        assert closed_by_peer(held[-1], HEADER_TIMEOUT + 2)
        wait_for_log(admin.broker, "did not arrive within 1.5 s ([http] header_timeout)")
        assert all(closed_by_peer(sock, IDLE_TIMEOUT + 2) for sock in held)
    finally:
        for sock in held:
            sock.close()
    wait_for_log(admin.broker, "connections open, the cap ([http] max_connections)")
    assert "Traceback" not in admin.broker.log()


def test_a_body_that_does_not_arrive_gets_408_and_the_connection_closed(admin: Admin) -> None:
    with socket.create_connection(("127.0.0.1", admin.port), timeout=5) as sock:
        sock.sendall(
            b"POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nX-API-Key: test-key-0123456789\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"topic"'
        )
        started = time.monotonic()
        sock.settimeout(HEADER_TIMEOUT + 3)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:60]
    assert HEADER_TIMEOUT - 0.2 < time.monotonic() - started < HEADER_TIMEOUT + 2
    wait_for_log(admin.broker, "its body did not arrive within 1.5 s")


def test_a_keep_alive_connection_is_served_then_closed_when_idle(admin: Admin) -> None:
    """Answers leave without Nagle's delay: 10 requests on one connection took 0.44 s
    (the client's delayed ACK of each answer's head, 40 ms, before its body)."""
    connection = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=5)
    started = time.monotonic()
    for _ in range(10):  # one connection, several requests
        connection.request("GET", "/api/v1/health")
        assert connection.getresponse().read() == b'{"status":"ok"}'
    assert time.monotonic() - started < 0.3
    assert connection.sock is not None
    assert closed_by_peer(connection.sock, IDLE_TIMEOUT + 2)
    connection.close()


# ----- the dashboard's polling and MQTT latency ----------------------------------------------

RETAINED = 100_000
BATCH = 2_000  # PUBLISH packets per write


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[Admin]:
    port = free_port()
    config = http_config(port) + '[store]\nkind = "memory"\n'
    with running_broker(tmp_path, config) as broker:
        yield Admin(broker, port)


def store_retained(admin: Admin, count: int) -> None:
    """`count` retained QoS 0 messages, many per write, then wait until worker 0 holds them."""
    publisher = connect_raw(admin.broker, unique("loader"))
    for first in range(0, count, BATCH):
        publisher.send_bytes(
            b"".join(
                encode(Publish(topic=f"load/{n // 1000}/{n % 1000}", payload=b"v", retain=True), 4)
                for n in range(first, min(first + BATCH, count))
            )
        )
    deadline = time.monotonic() + 40
    while admin.get("/api/v1/retained?limit=1")["meta"]["count"] < count:
        assert time.monotonic() < deadline, "the retained messages were not all stored"
        time.sleep(0.2)
    publisher.close()


def ping_round_trips(client: RawClient, count: int) -> list[float]:
    """Milliseconds from PINGREQ to PINGRESP, `count` times, 10 ms apart."""
    client.sock.settimeout(5)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.send_bytes(b"\xc0\x00")
        assert client.sock.recv(2) == b"\xd0\x00"
        times.append((time.perf_counter() - started) * 1000)
        time.sleep(0.01)
    return times


def test_polling_the_retained_page_does_not_delay_mqtt_on_its_worker(
    loaded: Admin, workers: int
) -> None:
    """Each page of 100k retained messages sorted them all once (240 ms in the loop); now
    the index keeps them sorted, and new names keep arriving while it is polled."""
    started = time.monotonic()
    store_retained(loaded, RETAINED)
    stored_in = time.monotonic() - started
    pinger, _ = connect_on_worker(loaded.broker, unique("pinger"), 0, workers)
    churner = connect_raw(loaded.broker, unique("churn"))
    stop = threading.Event()
    polls = [0]

    def poll() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", loaded.port, timeout=10)
        headers = {"Authorization": "Bearer test-key-0123456789"}
        n = 0
        while not stop.is_set():
            connection.request("GET", "/api/v1/retained?limit=50&topic=%23", headers=headers)
            response = connection.getresponse()
            assert response.status == 200
            response.read()
            polls[0] += 1
            # New names arrive between polls: each poll merges some into the order.
            churner.send(Publish(topic=f"load/new/{n}", payload=b"v", retain=True))
            n += 1
        connection.close()

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        time.sleep(0.5)
        times = sorted(ping_round_trips(pinger, 300))
    finally:
        stop.set()
        poller.join(timeout=10)
    p99 = times[int(len(times) * 0.99) - 1]
    print(
        f"stored {RETAINED} in {stored_in:.1f} s; {polls[0]} polls; ping p50 "
        f"{times[len(times) // 2]:.2f} ms p99 {p99:.2f} ms max {times[-1]:.2f} ms"
    )
    assert polls[0] > 50
    assert p99 < 20, times[-10:]
    page = loaded.get("/api/v1/retained?limit=50&topic=%23")
    assert page["meta"]["count"] >= RETAINED
    assert [m["topic"] for m in page["data"]][:2] == ["load/0/0", "load/0/1"]
    pinger.close()
    churner.close()
