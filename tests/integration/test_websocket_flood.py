"""A WebSocket client that sends pings as fast as it can and reads none of the pongs.

Every byte a client makes the broker send counts against its `max_write_buffer`, pongs too:
once more than that waits for the flooder, the broker stops reading it (TCP then slows it
down) and logs the throttle line, so the memory of the worker serving it stays bounded
(unbounded, it grew by about 8 MB/s) and another client's round trips are unaffected.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import psutil

from mqtt import encode
from mqtt.packets import Connect, Publish
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, connect_raw, unique
from tests.support.listeners import listener_port
from tests.support.workers import serving_pids
from tests.support.ws_frames import BINARY, PING, client_frame

WRITE_BUFFER = 65536
CONFIG = f"""\
[limits]
max_write_buffer = {WRITE_BUFFER}
[store]
kind = "memory"
[[listeners]]
type = "tcp"
port = 0
[[listeners]]
type = "ws"
port = 0
"""
FLOOD_SECONDS = 6.0
PINGS = client_frame(PING, b"p" * 125) * 256  # 33 KiB of pings per write
RSS_GROWTH_LIMIT = 16 * 1024 * 1024  # it grew by 100 MB in these 6 s when pongs did not count
UPGRADE = (
    b"GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Protocol: mqtt\r\n\r\n"
)


def websocket_mqtt_client(port: int) -> socket.socket:
    """A socket upgraded to WebSocket whose MQTT CONNECT was accepted."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(UPGRADE)
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101 "), answer
    sock.sendall(client_frame(BINARY, encode(Connect(client_id=unique("pinger")), 4)))
    frames = answer.split(b"\r\n\r\n", 1)[1]
    while len(frames) < 6:
        frames += sock.recv(4096)
    assert frames[:6] == b"\x82\x04\x20\x02\x00\x00", frames  # CONNACK, accepted
    return sock


def flood(sock: socket.socket, seconds: float, sent: list[int]) -> None:
    """Write pings for `seconds`, reading nothing; `sent[0]` counts the bytes written."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            sock.sendall(PINGS)
        except TimeoutError:
            continue  # pushed back: the broker stopped reading
        sent[0] += len(PINGS)


def round_trips(broker: BrokerProcess, until: Callable[[], bool]) -> list[float]:
    """A QoS 1 message to a subscriber every 0.1 s while `until()` is false; the latencies."""
    subscriber = PahoCollector(broker, unique("bystander"))
    publisher = connect_raw(broker, unique("bystander-pub"))
    latencies = []
    try:
        subscriber.subscribe("bystander/topic", 1)
        packet_id = 0
        while not until():
            packet_id += 1
            started = time.monotonic()
            publisher.send(Publish("bystander/topic", b"hi", qos=1, packet_id=packet_id))
            publisher.expect()  # PUBACK
            subscriber.next_message(timeout=5)
            latencies.append(time.monotonic() - started)
            time.sleep(0.1)
    finally:
        subscriber.close()
        publisher.close()
    return latencies


def test_a_websocket_ping_flood_is_paused_and_memory_stays_bounded(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(CONFIG)
    processes = [psutil.Process(pid) for pid in serving_pids(broker)]

    def rss() -> int:
        return sum(process.memory_info().rss for process in processes)

    pinger = websocket_mqtt_client(listener_port(broker, "ws"))
    rss_before = rss()
    peak = [rss_before]
    sent = [0]
    flooder = threading.Thread(target=flood, args=(pinger, FLOOD_SECONDS, sent), daemon=True)
    flooder.start()
    try:
        latencies = round_trips(broker, lambda: not flooder.is_alive())
        while flooder.is_alive():
            peak[0] = max(peak[0], rss())
            time.sleep(0.1)
        peak[0] = max(peak[0], rss())
    finally:
        flooder.join(FLOOD_SECONDS + 5)
    port = pinger.getsockname()[1]
    line = wait_for_log(broker, f"pausing reads from 127.0.0.1:{port}: ")
    assert f"(limits.max_write_buffer = {WRITE_BUFFER})" in line, line
    assert sent[0] > 1_000_000, f"the flood wrote only {sent[0]} bytes"
    growth = peak[0] - rss_before
    assert growth < RSS_GROWTH_LIMIT, f"worker RSS grew by {growth / 1e6:.0f} MB"
    assert len(latencies) >= 10, latencies
    assert max(latencies) < 1.0, f"round trips slowed down: {latencies}"
    pinger.close()
