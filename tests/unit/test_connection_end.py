"""net.connection and net.transport in-process: the socket side reports every loss.

A connection on the accepted end of a loopback TCP connection, its owner a recorder.
Whatever notices that the peer is gone (a read, or a write while reads are paused because
the peer reads nothing) tells the owner once, with the reason, so the channel can end the
connection (will, hook, counters); a loss nobody hears of leaves a client connected to
nothing.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable, Iterator

import gevent
import pytest

from channel.intake import Intake
from core.reasons import DisconnectReason
from mqtt import encode
from mqtt.errors import MqttError
from mqtt.packets import Connect, Packet
from net.connection import Connection
from net.rate_limited_log import RateLimitedLog

WRITE_LIMIT = 1024
CONNECT = encode(Connect(client_id="c", protocol_version=4), 4)


class Owner:
    """Records what the connection reports."""

    def __init__(self) -> None:
        self.packets: list[Packet] = []
        self.lost: list[tuple[DisconnectReason, str]] = []

    def packets_received(self, packets: list[Packet], size: int) -> None:
        self.packets.extend(packets)

    def peer_identified(self, identity: str) -> None:
        raise AssertionError("a plain socket has no identity")

    def connection_lost(
        self, reason: DisconnectReason, error: MqttError | None, detail: str
    ) -> None:
        self.lost.append((reason, detail))


@pytest.fixture
def pair() -> Iterator[tuple[Connection, Owner, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        theirs = socket.create_connection(listener.getsockname())
        ours, _address = listener.accept()
    ours.setblocking(False)
    connection = Connection(
        ours,
        "test-peer",
        max_packet_size=1 << 20,
        intake=Intake(1000, 1 << 20),
        write_limit=WRITE_LIMIT,
        throttle_log=RateLimitedLog(logging.getLogger("test.throttle")),
    )
    owner = Owner()
    connection.open(owner, connect_timeout=10.0)
    yield connection, owner, theirs
    connection.close()
    theirs.close()  # a no-op after a test's own close


def wait_for(condition: Callable[[], object], seconds: float = 2.0) -> None:
    with gevent.Timeout(seconds):
        while not condition():
            gevent.sleep(0.01)


def test_a_failed_write_while_reads_are_paused_reports_the_loss(
    pair: tuple[Connection, Owner, socket.socket],
) -> None:
    connection, owner, theirs = pair
    connection.transport.write(b"x" * 8_000_000)  # more than the socket buffers hold
    assert connection.transport.backlog_bytes > WRITE_LIMIT
    theirs.sendall(CONNECT)  # a read, after which reads pause: the peer reads nothing
    wait_for(lambda: len(owner.packets) == 1)
    # A reset, as from a client that crashed: only the write side can notice now.
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    theirs.close()
    wait_for(lambda: owner.lost)
    [(reason, detail)] = owner.lost
    assert reason is DisconnectReason.SOCKET_CLOSED
    assert detail.startswith("write failed: "), detail
    assert connection.transport.closed
    gevent.sleep(0.05)
    assert len(owner.lost) == 1


def test_a_read_without_a_packet_pauses_on_the_write_bound(
    pair: tuple[Connection, Owner, socket.socket],
) -> None:
    """A read with no whole MQTT packet in it (as a read of WebSocket pings) still pauses
    on the write bound."""
    connection, owner, theirs = pair
    connection.transport.write(b"x" * 8_000_000)
    theirs.sendall(CONNECT[:3])
    wait_for(lambda: connection.transport.on_flushed is not None)  # paused until it drains
    theirs.sendall(CONNECT[3:])
    gevent.sleep(0.1)
    assert owner.packets == []  # not read while paused
