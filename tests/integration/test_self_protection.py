"""How the broker protects itself from one client, against live brokers over real sockets.

- A client that writes PUBLISHes as fast as its socket takes them (QoS 0 with no subscriber,
  or QoS 1 without ever reading its PUBACKs) is pushed back by TCP: the broker's memory stays
  bounded, and another client's messages keep flowing meanwhile.
- The CONNECT timeout runs from accept, however the CONNECT's bytes dribble in.
- A reconnect storm over few client ids (takeovers of clean and persistent sessions) logs no
  traceback, and connects balance disconnects, in the hook events and the live counter.
- A message lost to a full queue is logged, one line per second per reason, with counts.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil

from mqtt import encode
from mqtt.packets import (
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    Publish,
    Subscribe,
    Subscription,
)
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, connect_raw, subscribe_raw, unique
from tests.support.raw_client import RawClient
from tests.support.workers import serving_pids

FLOOD_SECONDS = 4.0
# Before intake was bounded, RSS grew by 0.7 GB in the first 2 s of a QoS 0 flood.
RSS_GROWTH_LIMIT = 150 * 1024 * 1024


class Flooder(threading.Thread):
    """Writes `packet` back to back on a connected socket for `seconds`, reading nothing."""

    def __init__(
        self,
        broker: BrokerProcess,
        packets: Callable[[int], bytes],
        seconds: float,
        subscribe_to: str | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection((broker.host, broker.port), timeout=5)
        self.sock.sendall(encode(Connect(client_id=unique("flood"), keepalive=0), 4))
        if subscribe_to is not None:
            self.sock.sendall(encode(Subscribe(1, [Subscription(subscribe_to, 0)]), 4))
        self._packets = packets
        self._seconds = seconds
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + self._seconds
        round_number = 0
        self.sock.settimeout(0.5)
        try:
            while time.monotonic() < deadline:
                data = self._packets(round_number)
                round_number += 1
                try:
                    self.sock.sendall(data)
                except TimeoutError:
                    continue  # pushed back: the broker is not reading as fast as we write
                self.sent += len(data)
        except OSError as error:
            self.error = error

    def close(self) -> None:
        self.sock.close()


def side_traffic_flows(broker: BrokerProcess, seconds: float) -> list[float]:
    """Publish on a side topic every 0.1 s for `seconds`; each message's delivery latency."""
    subscriber = PahoCollector(broker, unique("side-sub"))
    publisher = connect_raw(broker, unique("side-pub"))
    latencies = []
    try:
        subscriber.subscribe("side/topic", 0)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sent_at = time.monotonic()
            publisher.send(Publish("side/topic", b"%f" % sent_at, qos=0))
            message = subscriber.next_message(timeout=5)
            latencies.append(time.monotonic() - float(message.payload))
            time.sleep(0.1)
    finally:
        subscriber.close()
        publisher.close()
    return latencies


def check_flood_is_contained(broker: BrokerProcess, flooder: Flooder, min_sent: int) -> None:
    """Run `flooder` while side traffic flows: it must have written `min_sent` bytes or
    more, the broker's RSS must stay bounded and the side messages arrive promptly."""
    processes = [psutil.Process(pid) for pid in serving_pids(broker)]

    def rss() -> int:
        return sum(process.memory_info().rss for process in processes)

    rss_before = rss()
    peak = [rss_before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peak[0] = max(peak[0], rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    flooder.start()
    try:
        latencies = side_traffic_flows(broker, FLOOD_SECONDS - 0.5)
    finally:
        flooder.join(FLOOD_SECONDS + 5)
        stop.set()
        sampler.join()
        flooder.close()
    assert flooder.error is None, flooder.error
    assert flooder.sent > min_sent, f"the flood wrote only {flooder.sent} bytes"
    growth = peak[0] - rss_before
    assert growth < RSS_GROWTH_LIMIT, f"RSS grew by {growth / 1e6:.0f} MB during the flood"
    assert len(latencies) >= 10
    assert max(latencies) < 1.0, f"side traffic starved: latencies {latencies}"


def test_a_qos0_flood_with_no_subscriber_is_pushed_back(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(None, "--store", "none")
    batch = encode(Publish("flood/nobody", b"x" * 64, qos=0), 4) * 1000
    flooder = Flooder(broker, lambda _n: batch, FLOOD_SECONDS)
    check_flood_is_contained(broker, flooder, min_sent=20_000_000)


def test_a_flood_from_a_client_that_never_reads_is_pushed_back(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """QoS 1 PUBLISHes to a topic the flooder itself subscribes to: PUBACKs and its own
    messages pile up for a client that reads nothing, so the broker stops reading it."""
    broker = broker_factory("[limits]\nmax_write_buffer = 65536\n", "--store", "none")

    def batch(round_number: int) -> bytes:
        first = round_number * 100 % 65000
        return b"".join(
            encode(Publish("flood/echo", b"x" * 2000, qos=1, packet_id=first + i + 1), 4)
            for i in range(100)
        )

    flooder = Flooder(broker, batch, FLOOD_SECONDS, subscribe_to="flood/echo")
    # It gets no further than the socket buffers and the broker's bounded backlog.
    check_flood_is_contained(broker, flooder, min_sent=1_000_000)
    wait_for_log(broker, "to read them (limits.max_write_buffer = 65536)")


def test_connect_timeout_runs_from_accept_whatever_dribbles_in(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[limits]\nconnect_timeout = 1.5\n", "--store", "none")
    connect = encode(Connect(client_id="dribbler", keepalive=60), 4)
    sockets = [socket.create_connection((broker.host, broker.port), timeout=5) for _ in range(20)]
    accepted_at = time.monotonic()
    closed_at: dict[int, float] = {}
    try:
        for position in range(len(connect) - 1):  # never the last byte
            for index, sock in enumerate(sockets):
                if index in closed_at:
                    continue
                try:
                    sock.sendall(connect[position : position + 1])
                except OSError:
                    closed_at[index] = time.monotonic()
            for index, sock in enumerate(sockets):
                if index not in closed_at and _closed_by_peer(sock):
                    closed_at[index] = time.monotonic()
            if len(closed_at) == len(sockets) or time.monotonic() - accepted_at > 6:
                break
            time.sleep(0.3)
        assert len(closed_at) == len(sockets), f"{len(sockets) - len(closed_at)} still open"
        assert max(closed_at.values()) - accepted_at < 3.0
    finally:
        for sock in sockets:
            sock.close()
    wait_for_log(broker, "connect_timeout (no CONNECT in time)")


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def test_a_reconnect_storm_balances_connects_and_disconnects(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    events_path = tmp_path / "events.jsonl"
    broker = broker_factory(
        f"""\
[store]
kind = "memory"
[[plugins]]
module = "tests.support.test_plugins.recorder"
path = "{events_path}"
""",
    )
    ids = [unique(f"storm{n}") for n in range(20)]

    def storm(worker: int) -> None:
        for attempt in range(20):
            number = worker * 20 + attempt
            client = RawClient(broker.host, broker.port)
            try:
                client.send(
                    Connect(client_id=ids[number % 20], clean_start=number % 3 != 0, keepalive=30)
                )
                if number % 5:  # most wait for their CONNACK; a takeover may close them first
                    with contextlib.suppress(ConnectionError, TimeoutError):
                        client.expect(timeout=2)
                if number % 2:
                    client.send(Disconnect())
            except OSError:
                pass  # taken over and closed by the broker while sending
            finally:
                client.close()

    workers = [threading.Thread(target=storm, args=(w,)) for w in range(10)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    probe = connect_raw(broker, unique("probe"))  # the broker still serves
    probe.send(PingReq())
    assert isinstance(probe.expect(), PingResp)
    probe.send(Disconnect())
    probe.close()
    deadline = time.monotonic() + 5
    while True:
        events = [json.loads(line) for line in events_path.read_text().splitlines()]
        points = Counter(event["point"] for event in events)
        if points["client.connected"] == points["client.disconnected"]:
            break
        assert time.monotonic() < deadline, points
        time.sleep(0.1)
    assert points["client.connected"] >= 20, points
    assert broker.stop() == 0
    log = broker.log()
    assert "closing 0 connections (0 counted as connected)" in log, log
    assert "Traceback" not in log, log
    assert "ActorDeadError" not in log, log
    per_client = Counter(
        (event["client_id"], event["point"])
        for event in events
        if event["point"] in ("client.connected", "client.disconnected")
    )
    for client_id in ids:
        connects = per_client[client_id, "client.connected"]
        assert connects == per_client[client_id, "client.disconnected"], client_id


def test_messages_lost_to_a_full_queue_are_logged_with_counts(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[limits]\nmax_queued_messages = 5\n", "--store", "memory")
    subscriber_id = unique("offline")
    subscriber = connect_raw(broker, subscriber_id, clean=False)
    subscribe_raw(subscriber, 1, ("loss/topic", 1))
    subscriber.close()
    publisher = connect_raw(broker, unique("pub"))
    try:
        for burst in range(2):  # the second burst falls in the first line's second
            for number in range(burst * 25, burst * 25 + 25):
                publisher.send(Publish("loss/topic", b"%d" % number, qos=1, packet_id=number + 1))
            for _ in range(25):
                publisher.expect()
    finally:
        publisher.close()
    first = wait_for_log(broker, f"for client {subscriber_id!r}: the session queue is full")
    summary = wait_for_log(broker, "dropped messages (queue_full): ", timeout=3)
    dropped_first = int(first.split("dropped ")[1].split(" message")[0])
    dropped_later = int(summary.split("(queue_full): ")[1].split(" more")[0])
    assert dropped_first + dropped_later == 45  # 50 queued for an offline session of 5


def test_intake_accounting_balances_so_a_bound_of_one_packet_still_serves(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """With room for one unhandled packet, every packet the reader counts must be reported
    handled (the CONNECT's batch too), or the reader would pause for good."""
    broker = broker_factory("[limits]\nmax_unprocessed_packets = 1\n", "--store", "none")
    client = connect_raw(broker, unique("one-at-a-time"))
    try:
        for packet_id in range(1, 21):
            client.send(Publish("intake/one", b"x", qos=1, packet_id=packet_id))
            assert client.expect(timeout=2).packet_id == packet_id
        client.send(PingReq())
        assert isinstance(client.expect(timeout=2), PingResp)
    finally:
        client.close()
