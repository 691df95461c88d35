"""A small MQTT client on gevent sockets and the project's codec, for load generation.

One `MqttClient` is one connection: the caller's greenlet sends and waits for acknowledgements,
one reader greenlet per connection decodes what the broker sends, resolves the waiting
acknowledgements, answers the broker's QoS 1/2 flows and hands PUBLISHes to `on_message`.
No threads: hundreds of clients live in one process next to Locust (paho's default network
loop stops scaling near 340 clients).

Invariants:
- Writes go through one lock, so an acknowledgement written by the reader never splits a
  packet written by the caller.
- Every wait is bounded by `timeout`; a lost connection fails every pending wait with
  `ConnectionLostError` and calls `on_connection_lost(reason)` once (not after `close()`).
- The client sends PINGREQ when it has written nothing for half the keep-alive, so idle
  subscribers stay within the broker's 1.5 x keep-alive limit [MQTT-3.1.2-24].
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import gevent
import gevent.event
import gevent.lock
import gevent.socket

from mqtt import (
    ConnAck,
    Connect,
    Disconnect,
    MqttError,
    Packet,
    PacketDecoder,
    PacketType,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    encode,
    encode_publish,
)

_FAILURE = ReasonCode.UNSPECIFIED_ERROR  # the lowest failure code, and 3.1.1 SUBACK's only one
_READ_SIZE = 65_536
_MAX_PACKET_ID = 0xFFFF

MessageHandler = Callable[[Publish], None]
Reply = TypeVar("Reply", ConnAck, PubAck, PubComp, SubAck, UnsubAck, PingResp)
LostHandler = Callable[[str], None]


class MqttClientError(Exception):
    """Base of every failure the client reports; the message says what went wrong."""


class ConnectRefusedError(MqttClientError):
    """The broker answered CONNECT with a non-zero CONNACK code."""


class SubscribeRefusedError(MqttClientError):
    """The broker refused at least one topic filter of a SUBSCRIBE (SUBACK 0x80 or more)."""


class AckTimeoutError(MqttClientError):
    """The expected acknowledgement did not arrive within the client's timeout."""


class ConnectionLostError(MqttClientError):
    """The connection closed or failed while the client was using it."""


def _code_name(code: int) -> str:
    try:
        return ReasonCode(code).name
    except ValueError:
        return "unknown"


class MqttClient:
    """One MQTT connection for load tests: `connect`, `publish`, `subscribe`, `disconnect`.

    `publish` returns when the QoS flow completes (QoS 0: when written; QoS 1: PUBACK;
    QoS 2: PUBCOMP). Inbound QoS 1/2 PUBLISHes are acknowledged by the reader and passed to
    `on_message` once, when they arrive.
    """

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        *,
        username: str | None = None,
        password: str | None = None,
        keepalive: int = 60,
        timeout: float = 10.0,
        protocol_version: int = 4,
        on_message: MessageHandler | None = None,
        on_connection_lost: LostHandler | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.username = username
        self.password = password
        self.keepalive = keepalive
        self.timeout = timeout
        self.protocol_version = protocol_version
        self.on_message = on_message
        self.on_connection_lost = on_connection_lost
        self._sock: gevent.socket.socket | None = None
        self._reader: gevent.Greenlet[..., Any] | None = None
        self._decoder = PacketDecoder(protocol_version=protocol_version)
        self._send_lock = gevent.lock.Semaphore()
        self._waiters: dict[tuple[int, int], gevent.event.AsyncResult[Packet]] = {}
        self._last_packet_id = 0
        self._last_send = 0.0
        self._closing = False
        self.connected = False

    # ------------------------------------------------------------------ public API
    def connect(self, clean_start: bool = True) -> ConnAck:
        """Open the TCP connection and wait for CONNACK; raises on refusal or timeout."""
        if self._sock is not None:
            raise MqttClientError(f"{self.client_id}: already connected; disconnect first")
        self._closing = False
        self._decoder = PacketDecoder(protocol_version=self.protocol_version)
        try:
            self._sock = gevent.socket.create_connection((self.host, self.port), self.timeout)
        except OSError as error:
            raise ConnectionLostError(
                f"TCP connect to {self.host}:{self.port} failed: {error}"
            ) from error
        self._sock.setsockopt(gevent.socket.IPPROTO_TCP, gevent.socket.TCP_NODELAY, 1)
        self._sock.settimeout(self._read_timeout())
        self._reader = gevent.spawn(self._read_loop, self._sock)
        password = self.password.encode() if self.password is not None else None
        packet = Connect(
            client_id=self.client_id,
            protocol_version=self.protocol_version,
            clean_start=clean_start,
            keepalive=self.keepalive,
            username=self.username,
            password=password,
        )
        try:
            connack = self._request((PacketType.CONNACK, 0), encode(packet), ConnAck)
        except MqttClientError:
            self.close()
            raise
        if connack.reason_code:
            self.close()
            code = connack.reason_code
            raise ConnectRefusedError(f"CONNACK refused with code {code} ({_code_name(code)})")
        self.connected = True
        return connack

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        """Send a PUBLISH and wait until its QoS flow completes."""
        version = self.protocol_version
        if qos == 0:
            self._send(encode_publish(topic, payload, 0, retain, False, None, None, version))
            return
        packet_id = self._next_packet_id()
        wire = encode_publish(topic, payload, qos, retain, False, packet_id, None, version)
        reply: PubAck | PubComp
        if qos == 1:
            reply = self._request((PacketType.PUBACK, packet_id), wire, PubAck)
        else:
            reply = self._request((PacketType.PUBCOMP, packet_id), wire, PubComp)
        if reply.reason_code >= _FAILURE:
            code = reply.reason_code
            name = type(reply).__name__.upper()
            raise MqttClientError(f"{name} failed with {code:#x} ({_code_name(code)})")

    def subscribe(self, filters: Sequence[tuple[str, int]]) -> SubAck:
        """SUBSCRIBE to `(topic_filter, qos)` pairs; raises if any filter is refused."""
        packet_id = self._next_packet_id()
        packet = Subscribe(packet_id, [Subscription(name, qos) for name, qos in filters])
        wire = encode(packet, self.protocol_version)
        suback = self._request((PacketType.SUBACK, packet_id), wire, SubAck)
        if len(suback.reason_codes) != len(filters):
            raise MqttClientError(
                f"SUBACK has {len(suback.reason_codes)} codes for {len(filters)} filters "
                "[MQTT-3.8.4-5]"
            )
        codes = zip(filters, suback.reason_codes, strict=True)
        refused = [name for (name, _), code in codes if code >= _FAILURE]
        if refused:
            raise SubscribeRefusedError(f"SUBACK refused filters {refused}")
        return suback

    def unsubscribe(self, filters: Sequence[str]) -> UnsubAck:
        """UNSUBSCRIBE from topic filters and wait for UNSUBACK."""
        packet_id = self._next_packet_id()
        wire = encode(Unsubscribe(packet_id, list(filters)), self.protocol_version)
        return self._request((PacketType.UNSUBACK, packet_id), wire, UnsubAck)

    def ping(self) -> None:
        """Send PINGREQ and wait for PINGRESP."""
        wire = encode(PingReq(), self.protocol_version)
        self._request((PacketType.PINGRESP, 0), wire, PingResp)

    def disconnect(self) -> None:
        """Send DISCONNECT (so no will is published) and close; quiet if already closed."""
        if self._sock is not None and self.connected:
            with contextlib.suppress(MqttClientError):  # already gone: nothing left to close
                self._send(encode(Disconnect(), self.protocol_version))
        self.close()

    def close(self) -> None:
        """Close the socket and stop the reader without reporting a lost connection."""
        self._closing = True
        self.connected = False
        sock, self._sock = self._sock, None
        reader, self._reader = self._reader, None
        if sock is not None:
            sock.close()
        if reader is not None and reader is not gevent.getcurrent():
            reader.kill(block=False)
        self._fail_waiters("connection closed by the client")

    # ------------------------------------------------------------------ sending
    def _read_timeout(self) -> float | None:
        return self.keepalive / 2 if self.keepalive else None

    def _send(self, data: bytes) -> None:
        sock = self._sock
        if sock is None:
            raise ConnectionLostError("not connected")
        try:
            with self._send_lock:
                sock.sendall(data)
        except OSError as error:
            raise ConnectionLostError(f"write failed: {error}") from error
        self._last_send = time.monotonic()

    def _request(self, key: tuple[int, int], data: bytes, expected: type[Reply]) -> Reply:
        """Send `data` and wait for the `expected` packet that `key` identifies."""
        waiter: gevent.event.AsyncResult[Packet] = gevent.event.AsyncResult()
        self._waiters[key] = waiter
        name = expected.__name__.upper()
        try:
            self._send(data)
            reply = waiter.get(timeout=self.timeout)
        except gevent.Timeout as timeout:
            raise AckTimeoutError(f"no {name} within {self.timeout:g} s") from timeout
        finally:
            self._waiters.pop(key, None)
        if not isinstance(reply, expected):  # the key names the packet type: cannot happen
            raise MqttClientError(f"expected {name}, got {type(reply).__name__}")
        return reply

    def _next_packet_id(self) -> int:
        """A packet identifier not in use by a pending flow [MQTT-2.3.1-2]."""
        for _ in range(_MAX_PACKET_ID):
            self._last_packet_id = self._last_packet_id % _MAX_PACKET_ID + 1
            candidate = self._last_packet_id
            if not any(key[1] == candidate for key in self._waiters):
                return candidate
        raise MqttClientError("all 65535 packet identifiers are in use")

    # ------------------------------------------------------------------ reading
    def _read_loop(self, sock: gevent.socket.socket) -> None:
        reason = "closed by the broker"
        try:
            while True:
                try:
                    data = sock.recv(_READ_SIZE)
                except TimeoutError:
                    data = None
                if data == b"":
                    break
                if data:
                    for packet in self._decoder.feed(data):
                        self._dispatch(packet)
                self._ping_if_idle()
        except (OSError, MqttError, MqttClientError) as error:
            reason = f"{type(error).__name__}: {error}"
        self._lost(sock, reason)

    def _ping_if_idle(self) -> None:
        if self.keepalive and time.monotonic() - self._last_send >= self.keepalive / 2:
            self._send(encode(PingReq(), self.protocol_version))

    def _dispatch(self, packet: Packet) -> None:
        if isinstance(packet, Publish):
            self._receive_publish(packet)
        elif isinstance(packet, PubRec):
            self._continue_qos2(packet)
        elif isinstance(packet, PubRel):
            self._send(encode(PubComp(packet.packet_id), self.protocol_version))
        else:
            waiter = self._waiters.get((packet.packet_type, getattr(packet, "packet_id", 0)))
            if waiter is not None:
                waiter.set(packet)

    def _continue_qos2(self, pubrec: PubRec) -> None:
        """PUBREC -> PUBREL; PUBREL only after a PUBREC below 0x80 (5.0 [MQTT-4.3.3-4])."""
        waiter = self._waiters.get((PacketType.PUBCOMP, pubrec.packet_id))
        if pubrec.reason_code >= _FAILURE:
            if waiter is not None:
                waiter.set(pubrec)
            return
        self._send(encode(PubRel(pubrec.packet_id), self.protocol_version))

    def _receive_publish(self, packet: Publish) -> None:
        if packet.qos == 1:
            self._send(encode(PubAck(packet.packet_id or 0), self.protocol_version))
        elif packet.qos == 2:
            self._send(encode(PubRec(packet.packet_id or 0), self.protocol_version))
        if self.on_message is not None:
            self.on_message(packet)

    def _lost(self, sock: gevent.socket.socket, reason: str) -> None:
        if self._sock is not sock or self._closing:
            return
        self.connected = False
        self._sock = None
        self._reader = None
        sock.close()
        self._fail_waiters(f"connection lost: {reason}")
        if self.on_connection_lost is not None:
            self.on_connection_lost(reason)

    def _fail_waiters(self, reason: str) -> None:
        waiters = list(self._waiters.values())
        self._waiters.clear()
        for waiter in waiters:
            if not waiter.ready():  # an answer that already arrived (a refusing CONNACK) wins
                waiter.set_exception(ConnectionLostError(reason))
