"""20,000 MQTT connections to one broker (docs/overload.md has the kernel settings for 100k).

Every connection gets its CONNACK; with all of them open, a new client can still connect and
exchange messages and a sample of the connections answers PINGREQ; when they all close, the
broker counts none left. The broker and the test each need `CONNECTIONS` + 200 descriptors:
where the hard RLIMIT_NOFILE is lower and cannot be raised (no CAP_SYS_RESOURCE), the test is
skipped, saying so. `MANY_CONNECTIONS` sets another count (20,000 by default).
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import time

import pytest

from mqtt import PacketDecoder, encode
from mqtt.packets import ConnAck, Connect, PingReq, PingResp, PubAck, Publish
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import start_broker
from tests.support.clients import connect_raw, subscribe_raw, unique

logger = logging.getLogger(__name__)

CONNECTIONS = int(os.environ.get("MANY_CONNECTIONS", "20000"))
DESCRIPTORS = CONNECTIONS + 200
CHUNK = 500  # connections opened before their CONNACKs are read


def _raise_descriptor_limit() -> None:
    """In the broker's child before exec: one system call."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


@pytest.fixture
def enough_descriptors() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, max(hard, DESCRIPTORS)))
    except (ValueError, OSError) as error:
        pytest.skip(
            f"{CONNECTIONS} connections need {DESCRIPTORS} descriptors and RLIMIT_NOFILE's hard "
            f"limit is {hard} here, which this process may not raise ({error}); raise it "
            "(ulimit -Hn, or LimitNOFILE=) or set MANY_CONNECTIONS lower"
        )
    with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as ports:
        low, high = (int(n) for n in ports.read().split())
    if high - low < CONNECTIONS:
        pytest.skip(f"the local port range {low}-{high} holds fewer than {CONNECTIONS} ports")


def _read_connack(sock: socket.socket) -> None:
    decoder = PacketDecoder(max_packet_size=1024, protocol_version=4)
    sock.settimeout(30)
    while True:
        data = sock.recv(64)
        assert data, "closed before CONNACK"
        packets = decoder.feed(data)
        if packets:
            assert packets[0] == ConnAck(False, 0), packets
            return


@pytest.mark.timeout(600)
def test_twenty_thousand_connections(
    tmp_path_factory: pytest.TempPathFactory, enough_descriptors: None
) -> None:
    broker = start_broker(
        tmp_path_factory.mktemp("many"),
        "[[listeners]]\nport = 0\n",
        preexec_fn=_raise_descriptor_limit
        if resource.getrlimit(resource.RLIMIT_NOFILE)[1] > 20_000
        else None,
    )
    sockets: list[socket.socket] = []
    try:
        started = time.monotonic()
        prefix = unique("many")
        while len(sockets) < CONNECTIONS:
            chunk = []
            for _ in range(min(CHUNK, CONNECTIONS - len(sockets))):
                sock = socket.create_connection((broker.host, broker.port), timeout=30)
                number = len(sockets) + len(chunk)
                sock.sendall(encode(Connect(f"{prefix}-{number}", keepalive=600), 4))
                chunk.append(sock)
            for sock in chunk:
                _read_connack(sock)
            sockets.extend(chunk)
        connect_seconds = time.monotonic() - started
        # All open: the broker still serves a newcomer and the old ones.
        # (raw clients: paho's select() cannot watch descriptor numbers above 1024)
        probe = connect_raw(broker, unique("probe"))
        topic = unique("many-topic")
        subscribe_raw(probe, 1, (topic, 1))
        probe.send(Publish(topic, b"still here", qos=1, packet_id=2))
        answers = [probe.expect(timeout=10), probe.expect(timeout=10)]
        assert PubAck(2) in answers, answers
        delivered = next(a for a in answers if isinstance(a, Publish))
        assert delivered.payload == b"still here"
        probe.close()
        for sock in sockets[:: CONNECTIONS // 100]:
            sock.sendall(encode(PingReq(), 4))
            decoder = PacketDecoder(max_packet_size=64, protocol_version=4)
            packets: list[object] = []
            while not packets:
                packets = list(decoder.feed(sock.recv(64)))
            assert packets == [PingResp()]
        rss_kib = _rss_kib(broker.process.pid)
    finally:
        for sock in sockets:
            sock.close()
    deadline = time.monotonic() + 60
    while _open_sockets(broker.process.pid) > 10 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert broker.stop(timeout=30) == 0
    line = wait_for_log(broker, "shutting down:")
    assert "closing 0 connections (0 counted as connected)" in line, line
    assert "Traceback" not in broker.log()
    # The figures, in the log of the test run (-o log_cli=true): per-connection memory.
    logger.info(
        "%d connections in %.1f s (%.0f/s); broker RSS %d MiB (%.1f KiB per connection)",
        CONNECTIONS,
        connect_seconds,
        CONNECTIONS / connect_seconds,
        rss_kib // 1024,
        rss_kib / CONNECTIONS,
    )


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _open_sockets(pid: int) -> int:
    count = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count

