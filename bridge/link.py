"""One MQTT client connection of a bridge over a connected gevent socket (the remote broker)
or the bridge's end of an in-process stream (this broker, `net.inprocess.GreenEnd`): packets
in and out.

`handshake` sends CONNECT and waits for CONNACK; `request` sends a SUBSCRIBE and waits for
its SUBACK, `unsubscribe` an UNSUBSCRIBE and its UNSUBACK; whatever else arrives meanwhile
(a resumed session's messages) is kept, in order, for the next `receive`. Writes from
several greenlets never interleave mid-packet (one lock per link).

Toward the remote each packet batch costs system calls on a busy path, so a write is one
`send` (gevent's `sendall` asks the socket its buffer size first, a second call), and once
a read has emptied the socket the next one waits until the socket is readable rather than
trying a `recv` that would fail (a third call, and an exception).
With `raw_publish` (the local link of a bridge to a 3.1.1 remote) each PUBLISH is read as a
`bridge.frames.RawPublish`, to be passed on as bytes; with `raw_acks` (the link to a 3.1.1
remote) each PUBACK, PUBREC, PUBREL and PUBCOMP of just a packet id is read as its bytes
(`bridge.frames.is_plain_ack`); `send` takes bytes besides packets.

A closed socket, a read error or bytes that break the protocol raise `LinkClosedError` with
the reason in words.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import gevent
import gevent.lock
import gevent.socket

from bridge.frames import RawPublish, is_plain_ack, split
from mqtt.decoder import PacketDecoder
from mqtt.encoder import encode
from mqtt.errors import MqttError
from mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)

READ_SIZE = 65536

# What `receive` returns: RawPublish only with `raw_publish`, bytes only with `raw_acks`
Received = Packet | RawPublish | bytes


class LinkClosedError(Exception):
    """The connection ended; the message says why."""


class Link:
    """A client's side of one MQTT connection; `peer` names the other end in messages."""

    __slots__ = (
        "_decoder",
        "_drained",
        "_max_packet_size",
        "_pending",
        "_raw",
        "_raw_acks",
        "_sock",
        "_unread",
        "_write_lock",
        "closed",
        "last_received",
        "last_sent",
        "peer",
        "version",
    )

    def __init__(
        self,
        sock: Any,
        version: int,
        peer: str,
        max_packet_size: int,
        *,
        raw_publish: bool = False,
        raw_acks: bool = False,
    ) -> None:
        self._sock = sock  # a connected gevent socket, gevent SSLSocket or GreenEnd
        self.version = version
        self.peer = peer
        self._decoder = PacketDecoder(max_packet_size, protocol_version=version)
        self._max_packet_size = max_packet_size
        self._raw = raw_publish or raw_acks
        self._raw_acks = raw_acks
        self._unread = b""  # in a raw mode: the start of an unfinished packet
        self._pending: list[Received] = []
        self._write_lock = gevent.lock.Semaphore()
        # The last read emptied the socket: the next waits for data first. Only for a plain
        # gevent socket; a TLS socket may hold decrypted bytes the kernel's buffer does not.
        self._drained = False
        self.closed = False
        self.last_received = self.last_sent = time.monotonic()

    def send(self, packets: Sequence[Packet | bytes]) -> None:
        """Write `packets` (packets, or bytes already encoded) in one go. Raises
        LinkClosedError."""
        if not packets:
            return
        version = self.version
        data = b"".join([p if isinstance(p, bytes) else encode(p, version) for p in packets])
        with self._write_lock:
            try:
                sent = self._sock.send(data)  # waits (gevent) while the socket is full
                while sent < len(data):
                    sent += self._sock.send(memoryview(data)[sent:])
            except OSError as error:
                raise LinkClosedError(f"write to {self.peer} failed: {error}") from None
        self.last_sent = time.monotonic()

    def receive(self) -> list[Received]:
        """The next packets from the peer (at least one). Raises LinkClosedError."""
        if self._pending:
            packets, self._pending = self._pending, []
            return packets
        sock = self._sock
        while True:
            try:
                if self._drained:
                    sock._wait(sock._read_event)  # gevent: until readable (or closed)
                data = sock.recv(READ_SIZE)
            except OSError as error:
                raise LinkClosedError(f"read from {self.peer} failed: {error}") from None
            if not data:
                raise LinkClosedError(f"{self.peer} closed the connection")
            self._drained = len(data) < READ_SIZE and type(sock) is gevent.socket.socket
            self.last_received = time.monotonic()
            try:
                packets = self._read_raw(data) if self._raw else self._decode(data)
            except MqttError as error:
                raise LinkClosedError(f"{self.peer} broke the protocol: {error}") from None
            if packets:
                return packets

    def _decode(self, data: bytes) -> list[Received]:
        packets: list[Received] = []
        packets += self._decoder.feed(data)
        return packets

    def _read_raw(self, data: bytes) -> list[Received]:
        """The packets `data` completes, each PUBLISH as a RawPublish (`raw_publish`) or each
        plain acknowledgement as bytes (`raw_acks`). Raises MqttError."""
        buf = self._unread + data if self._unread else data
        raw_acks = self._raw_acks
        items, end = split(buf, self._max_packet_size, publishes=not raw_acks)
        self._unread = buf[end:]
        packets: list[Received] = []
        for item in items:
            if type(item) is bytes:
                if raw_acks and is_plain_ack(item):
                    packets.append(item)
                else:
                    packets += self._decoder.feed(item)  # a whole packet
            else:
                assert isinstance(item, RawPublish)
                packets.append(item)
        return packets

    def handshake(self, connect: Connect, timeout: float) -> ConnAck:
        """Send `connect`; the CONNACK. Raises LinkClosedError (also after `timeout` seconds)."""
        self.send([connect])
        answer = self._await(ConnAck, timeout, "CONNACK")
        assert isinstance(answer, ConnAck)
        return answer

    def request(self, subscribe: Subscribe, timeout: float) -> SubAck:
        """Send `subscribe`; its SUBACK. Raises LinkClosedError (also after `timeout` seconds)."""
        answer = self._request(subscribe, SubAck, timeout)
        assert isinstance(answer, SubAck)
        return answer

    def unsubscribe(self, unsubscribe: Unsubscribe, timeout: float) -> UnsubAck:
        """Send `unsubscribe`; its UNSUBACK. Raises LinkClosedError (also after `timeout`
        seconds)."""
        answer = self._request(unsubscribe, UnsubAck, timeout)
        assert isinstance(answer, UnsubAck)
        return answer

    def _request(
        self, request: Subscribe | Unsubscribe, kind: type[SubAck | UnsubAck], timeout: float
    ) -> Received:
        self.send([request])
        while True:
            answer = self._await(kind, timeout, kind.__name__.upper())
            assert isinstance(answer, SubAck | UnsubAck)
            if answer.packet_id == request.packet_id:
                return answer

    def _await(self, kind: type, timeout: float, name: str) -> Received:
        kept: list[Received] = []
        late = LinkClosedError(f"no {name} from {self.peer} in {timeout} s")
        try:
            with gevent.Timeout(timeout, late):
                while True:
                    packets = self.receive()
                    for index, packet in enumerate(packets):
                        if isinstance(packet, kind):
                            kept += packets[index + 1 :]
                            return packet
                        if isinstance(packet, Disconnect):
                            raise LinkClosedError(
                                f"{self.peer} sent DISCONNECT (reason 0x{packet.reason_code:02x})"
                            )
                        kept.append(packet)
        finally:
            self._pending = kept + self._pending

    def close(self, farewell: Disconnect | None = None) -> None:
        """Close the socket, after sending `farewell` if it can be sent at once."""
        if self.closed:
            return
        self.closed = True
        if farewell is not None:
            try:
                with gevent.Timeout(1.0):
                    self.send([farewell])
            except (LinkClosedError, gevent.Timeout):
                pass  # the socket is closed below either way
        with contextlib.suppress(OSError):
            self._sock.close()
