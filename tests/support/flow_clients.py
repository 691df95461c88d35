"""Raw clients for flow-control tests: a publisher that pipelines QoS 1 PUBLISHes as fast as
the socket takes them, and a QoS 1 subscriber whose reading can be switched off and on.

Both run a thread on a raw socket (the project's codec, no library flow control in the way),
so a test sees exactly when the broker stops reading from a publisher (its PUBACKs stop) and
what a subscriber received.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from mqtt import encode
from mqtt.packets import PubAck, Publish
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, subscribe_raw
from tests.support.raw_client import RawClient


class PipelinedPublisher:
    """Sends `count` QoS 1 PUBLISHes on `topic` without waiting; counts PUBACKs as they come.

    Payload: `tag` (bytes) + the sequence number as 4 bytes, padded to `size` bytes."""

    def __init__(
        self, broker: BrokerProcess, client_id: str, client: RawClient | None = None
    ) -> None:
        """Connects `client_id`, or takes over `client` (connected, say, on a chosen worker)."""
        self.client = connect_raw(broker, client_id) if client is None else client
        self.sock = self.client.sock
        self.acked: set[int] = set()
        self.ack_times: list[float] = []  # when each PUBACK arrived, in order
        self.last_ack_at = time.monotonic()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._sender: threading.Thread | None = None

    def publish(self, topic: str, tag: bytes, count: int, size: int = 32) -> None:
        packets = [
            encode(
                Publish(topic, (tag + n.to_bytes(4, "big")).ljust(size, b"."), qos=1, packet_id=n),
                4,
            )
            for n in range(1, count + 1)
        ]
        data = b"".join(packets)

        def send() -> None:
            self.sock.settimeout(None)
            with contextlib.suppress(OSError):
                self.sock.sendall(data)

        self._sender = threading.Thread(target=send, daemon=True)
        self._sender.start()

    def _read(self) -> None:
        decoder = self.client.decoder  # set up for a client (protocol version known)
        self.sock.settimeout(None)
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            for packet in decoder.feed(data):
                if isinstance(packet, PubAck):
                    with self._lock:
                        self.acked.add(packet.packet_id)
                        self.last_ack_at = time.monotonic()
                        self.ack_times.append(self.last_ack_at)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def rate_between(self, first: int, last: int) -> float:
        """PUBACKs a second from the `first`-th to the `last`-th (1-based)."""
        with self._lock:
            times = self.ack_times[first - 1 : last]
        return (last - first) / (times[-1] - times[0])

    def wait_acked(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.acked_count() >= count:
                return True
            time.sleep(0.02)
        return self.acked_count() >= count

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class SwitchableSubscriber:
    """A QoS 1 subscriber to `topic` that reads and acknowledges only while `reading` is set."""

    def __init__(
        self, broker: BrokerProcess, client_id: str, topic: str, client: RawClient | None = None
    ) -> None:
        """Connects `client_id`, or takes over `client` (connected, say, on a chosen worker)."""
        self.client = connect_raw(broker, client_id) if client is None else client
        subscribe_raw(self.client, 1, (topic, 1))
        self.sock = self.client.sock
        self.received: list[bytes] = []
        self.reading = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        decoder = self.client.decoder
        while not self._closed:
            if not self.reading.wait(0.1):
                continue
            self.sock.settimeout(0.1)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            acks = []
            for packet in decoder.feed(data):
                if isinstance(packet, Publish):
                    with self._lock:
                        self.received.append(packet.payload)
                    if packet.qos:
                        acks.append(encode(PubAck(packet.packet_id), 4))
            if acks:
                try:
                    self.sock.sendall(b"".join(acks))
                except OSError:
                    return

    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def wait_received(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count() >= count:
                return True
            time.sleep(0.02)
        return self.count() >= count

    def close(self) -> None:
        self._closed = True
        self.sock.close()


def held_then_drained(
    slow: SwitchableSubscriber, publisher: PipelinedPublisher, count: int
) -> None:
    """`publisher`, held by `slow`'s session, stays held; once `slow` reads again, all
    `count` messages arrive, once and in order, and every one is acknowledged."""
    held_at = publisher.acked_count()
    time.sleep(1.0)
    assert publisher.acked_count() == held_at  # held, not merely slow: nothing drained
    slow.reading.set()
    assert slow.wait_received(count, timeout=90), slow.count()
    assert publisher.wait_acked(count, timeout=10)
    sequence = [int.from_bytes(payload[1:5], "big") for payload in slow.received]
    assert sequence == list(range(1, count + 1))  # nothing lost, in order
