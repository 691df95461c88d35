"""The socket side of one client connection: reads and frames bytes, holds no greenlet.

A read watcher on gevent's event loop queues the connection when the socket has data
(`net.read_order` orders the reads of sockets ready at once). One
`recv` of up to 32 KiB may hold a few hundred small packets; the decoder frames them all and
the owner (the client actor) gets them as ONE batch, so an actor hop costs once per read,
not once per packet. The size weighs two costs:
- a batch's deliveries reach every subscriber only when the whole batch is handled, so a
  batch that holds most of what a fast publisher has in flight leaves the broker (and, in
  a pool, the other worker) waiting for its next burst: 64 KiB was slower than 16;
- every batch costs one write per subscriber, and each write may wake the subscriber's
  process. Once a fan-out's deliveries got cheap, those writes and wake-ups weighed more:
  32 KiB gave the 1 -> 100 fan-out 15 % (one process) and 26 % (a pool of two) over 16 KiB.

An idle connection holds no greenlet and no stack: two watchers, a timer, the socket and
its decoder.

Deadlines: the CONNECT must be complete within `limits.connect_timeout` of the accept,
however its bytes dribble in; once the channel has accepted it, some packet must arrive
within the read timeout it sets (1.5 times the keep-alive [MQTT-3.1.2-24]).

Bounds on what one client can make the broker hold (docs/security.md): a read watcher reads
once per loop iteration, so a client whose socket always has data cannot hold the loop; it
stops reading while the actors have not handled `limits.max_unprocessed_packets` /
`max_unprocessed_bytes` of its input (`channel.intake`), and while more than
`limits.max_write_buffer` bytes wait for the client to read them, checked after every read
(a read of WebSocket pings decodes no packet, but its pongs wait with the acknowledgements
and deliveries); a client that reads nothing of those for its read timeout is closed. TCP
then pushes back on the client; throttling is logged, at most one line per second per
reason.

Ending: whatever the socket side notices (EOF, a reset, a failed read or write, a deadline,
bad bytes, a peer's TLS or WebSocket close) goes through `_lost`, which stops watching the
socket and tells the owner once; the transport reports a failed write before it closes the
socket. The owner's channel then ends the connection (docs/channel.md, "How a connection
ends") and closes it with `close`.

Rate limits (`rate_limiter`, a `core.rate_limit.RateLimiter`; docs/overload.md): after each
read the client's buckets are charged with its PUBLISH packets and bytes; a client in debt is
not read from until the debt is repaid (a timer), never disconnected for its rate.

On a tls, ws or wss listener every read first goes through the connection's stream layers
(`net.stream_layers`, made by the listener's `Endpoint`): what they answer (handshake
records, a WebSocket pong) is written at once, what they refuse (`LayerError`: a failed TLS
handshake, an HTTP 404) gets its reply written and the connection closed as a protocol
error, and a peer's TLS close_notify or WebSocket close ends the connection like a socket
close. The TLS handshake and the WebSocket upgrade happen inside the connect timeout. Once
the layers are ready, a client certificate's identity (its CN) is reported to the owner
before any packet.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any, Protocol

import gevent

from channel.intake import Intake
from core.flow import FlowState
from core.rate_limit import RateLimiter
from core.reasons import DisconnectReason
from core.stats import BrokerStats
from mqtt.decoder import PacketDecoder
from mqtt.errors import MqttError
from mqtt.packets import Packet, Publish
from net.inprocess import READ, PipeEnd, watch
from net.rate_limited_log import RateLimitedLog
from net.read_order import Read, read_order
from net.stream_layers import LayerError, StreamLayer
from net.transport import LayeredTransport, Transport

logger = logging.getLogger(__name__)

READ_SIZE = 32768  # bytes per recv: see the module docstring


class ConnectionOwner(Protocol):
    """Who a connection reports to; called from the event loop, so neither may block."""

    def packets_received(self, packets: list[Packet], size: int) -> None: ...

    def peer_identified(self, identity: str) -> None: ...

    def connection_lost(
        self, reason: DisconnectReason, error: MqttError | None, detail: str
    ) -> None: ...


class Connection:
    """One accepted socket: the reader, its deadline timer, the decoder and the transport."""

    __slots__ = (
        "_identified",
        "_last_read",
        "_loop",
        "_owner",
        "_paused",
        "_rate_timer",
        "_read_order",
        "_reader",
        "_sock",
        "_stats",
        "_throttle_log",
        "_timeout",
        "_timer",
        "decoder",
        "intake",
        "layers",
        "peer",
        "rate_limiter",
        "transport",
        "write_limit",
    )

    def __init__(
        self,
        sock: socket.socket | PipeEnd,
        peer: str,
        *,
        max_packet_size: int,
        intake: Intake,
        write_limit: int,
        throttle_log: RateLimitedLog,
        layers: StreamLayer | None = None,
        stats: BrokerStats | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        loop = gevent.get_hub().loop
        self._loop = loop
        self._read_order = read_order(loop)
        self._sock = sock
        self.peer = peer
        self.layers = layers  # TLS / WebSocket between the socket and the decoder; None: tcp
        self.transport: Transport = (
            Transport(sock, peer, loop)
            if layers is None
            else LayeredTransport(sock, peer, loop, layers)
        )
        self._identified = False  # the layers' identity was reported (or there is none)
        self.decoder = PacketDecoder(max_packet_size=max_packet_size, from_client=True)
        self.intake = intake
        self.write_limit = write_limit  # bytes waiting for the client before reads pause
        self._throttle_log = throttle_log
        self._owner: ConnectionOwner | None = None
        self._reader: Any = None
        self._timer: Any = None
        self._timeout: float | None = None  # the read timeout once CONNECT was accepted
        self._last_read = 0.0
        self._paused = False
        self._stats = stats
        self.rate_limiter = rate_limiter  # None: unlimited
        self._rate_timer: Any = None  # while reads wait for the rate limit

    def open(self, owner: ConnectionOwner, connect_timeout: float) -> None:
        """Start reading for `owner`; the CONNECT must be in within `connect_timeout`."""
        self._owner = owner
        self.transport.on_error = self._write_failed
        self.transport.on_closing = self._stop
        self._reader = watch(self._loop, self._sock, READ)
        self._reader.start(self._read_order.add, self)
        self._timer = self._loop.timer(connect_timeout)
        self._timer.start(self._lost, DisconnectReason.CONNECT_TIMEOUT, None, "no CONNECT in time")

    def set_read_timeout(self, seconds: float | None) -> None:
        """Replace the connect deadline by a read timeout (None: none) [MQTT-3.1.2-23/24]."""
        if self._owner is None:
            return  # already ended
        self._timeout = seconds
        self._last_read = self._loop.now()
        self._arm(seconds)

    def close(self) -> None:
        """Stop reading and close the socket once what was written is sent."""
        self.transport.close()
        self._stop()

    def close_after(self, last_words: bytes) -> Callable[[float], None]:
        """Stop reading now; the answer, called with a delay, writes `last_words` and closes
        that many seconds later (the CONNACK of a refused CONNECT, slowed down:
        `core.auth_failures`; the delay may take a moment to count in a pool)."""
        self._stop()
        transport = self.transport

        def close() -> None:
            if last_words:
                transport.write(last_words)
            transport.close()

        def after(delay: float) -> None:
            if delay > 0:
                gevent.spawn_later(delay, close)
            else:
                close()

        return after

    # ----- reading ----------------------------------------------------------------------

    def read_arrived(self) -> None:
        """Read what the socket holds now, as when it becomes readable, paused or not (a
        session takeover: `ClientActor._handle_arrived`). A client waiting for its rate
        limit is left waiting: what it sent is read when the limit allows."""
        if self._owner is not None and self._rate_timer is None:
            self._on_readable()

    def _receive(self) -> bytes | None:
        """One `recv`, through the layers: the MQTT bytes in it (maybe none), or None if
        there was nothing to read or the connection ended (reported)."""
        try:
            data = self._sock.recv(READ_SIZE)
        except BlockingIOError:
            return None
        except OSError as error:
            self._lost(DisconnectReason.SOCKET_CLOSED, None, str(error))
            return None
        if not data:
            self._lost(DisconnectReason.SOCKET_CLOSED, None, "closed by peer")
            return None
        self._last_read = self._loop.now()
        layers = self.layers
        if layers is None:
            return data
        try:
            return self._through_layers(layers, data)
        except LayerError as error:
            self.transport.write_raw(error.reply)
            self._lost(DisconnectReason.PROTOCOL_ERROR, None, str(error))
            return None

    def read_queued(self) -> None:
        """The socket became readable (`net.read_order`): read it and hand it over."""
        read = self.take_read()
        if read is not None:
            self.hand_over(read)

    def take_read(self) -> Read | None:
        """One read, decoded, not handed over yet; None if the connection ended or paused
        its reads since it was queued, or there is nothing to hand over (a loss is
        reported)."""
        reader = self._reader
        if reader is None or not reader.active:
            return None
        return self._take()

    def _on_readable(self) -> None:
        read = self._take()
        if read is not None:
            self.hand_over(read)

    def _take(self) -> Read | None:
        data = self._receive()
        if data is None:
            return None
        try:
            packets = self.decoder.feed(data) if data else None
        except MqttError as error:
            self._lost(DisconnectReason.PROTOCOL_ERROR, error, str(error))
            return None
        if self._owner is None:
            return None  # writing the layers' answer failed: that loss is reported already
        return data, packets

    def hand_over(self, read: Read) -> None:
        """Give a read's packets to the owner, then charge its rate and check its backlog."""
        owner = self._owner
        if owner is None:
            return  # ended since the read (another connection's read took its session)
        data, packets = read
        layers = self.layers
        if packets:
            size = len(data)
            self.intake.add(len(packets), size)
            owner.packets_received(packets, size)
            if self._owner is None:
                return  # the owner is gone and closed the connection
        if layers is not None and layers.peer_closed:
            self._lost(DisconnectReason.SOCKET_CLOSED, None, "closed by peer (TLS or WebSocket)")
            return
        if packets and self._over_rate(packets, len(data)):
            return
        # After every read, packets or not: the layers' answers (a WebSocket pong, TLS
        # records) wait in the same backlog as acknowledgements and deliveries, so a client
        # that sends pings and reads nothing is paused as one that does not read its PUBACKs.
        self._pause_if_behind()

    def _over_rate(self, packets: list[Packet], size: int) -> bool:
        """Charge the client's rate limit with a read; True if that paused its reads."""
        limiter = self.rate_limiter
        if limiter is None:
            return False
        publishes = sum([type(packet) is Publish for packet in packets])
        delay = limiter.take(publishes, size, self._loop.now())
        if delay <= 0:
            return False
        self._pause_for_rate(delay)
        return True

    def _pause_for_rate(self, delay: float) -> None:
        """Over the client's rate limit: read nothing for `delay` seconds."""
        self._throttle_log.note(
            "rate limited (publisher paused)",
            1,
            f"rate limit: pausing reads from {self.peer} for {delay:.3f} s ([overload] "
            "messages_rate / bytes_rate, or a client.rate_limit plugin)",
        )
        if self._stats is not None:
            self._stats.rate_limited += 1
        self._pause()
        self._rate_timer = self._loop.timer(delay)
        self._rate_timer.start(self._rate_repaid)

    def _rate_repaid(self) -> None:
        self._rate_timer = None
        self._resume()

    def _through_layers(self, layers: StreamLayer, data: bytes) -> bytes:
        """`data` read from the socket -> the MQTT bytes in it; the layers' answers are
        written at once. Raises LayerError."""
        data, reply = layers.receive(data)
        if reply:
            self.transport.write_raw(reply)
        if not self._identified and layers.ready:
            self._identified = True
            identity = layers.identity
            if identity is not None and self._owner is not None:
                self._owner.peer_identified(identity)
        return data

    def _pause_if_behind(self) -> None:
        """Stop reading while the actors are behind on this client's input, or while the
        client does not read what the broker sends it; TCP then slows the client down."""
        intake = self.intake
        if intake.held and not intake.closed:
            state = intake.state
            self._throttle_log.note(
                f"flow control ({state.value})",
                1,
                f"{state.value}: pausing reads from {self.peer}: "
                + (
                    "the memory alarm is raised ([overload] memory_high_watermark)"
                    if state is FlowState.BLOCKED
                    else "it publishes to a session over its high-water mark ([overload] "
                    "high_water_messages / high_water_bytes)"
                ),
            )
            self._pause()
            intake.on_room = self._resume
            return
        if intake.full() and not intake.closed:
            self._throttle_log.note(
                "throttled reads (input not handled yet)",
                1,
                f"pausing reads from {self.peer}: {intake.packets} packets / "
                f"{intake.bytes} bytes not handled yet (limits.max_unprocessed_packets / "
                "max_unprocessed_bytes)",
            )
            self._pause()
            intake.on_room = self._resume
            return
        transport = self.transport
        if transport.backlog_bytes > self.write_limit and not transport.closed:
            self._throttle_log.note(
                "throttled reads (client not reading)",
                1,
                f"pausing reads from {self.peer}: {transport.backlog_bytes} bytes wait "
                f"for it to read them (limits.max_write_buffer = {self.write_limit})",
            )
            self._pause()
            transport.on_flushed = self._resume

    def _pause(self) -> None:
        self._paused = True
        self._reader.stop()

    def _resume(self) -> None:
        if self._owner is None or not self._paused or self._rate_timer is not None:
            return  # ended, not paused, or the rate limit's timer resumes it
        self._paused = False
        self._last_read = self._loop.now()  # the pause was the broker's doing, not silence
        self._reader.start(self._read_order.add, self)
        self._pause_if_behind()  # the other reason to pause may hold now

    # ----- deadlines --------------------------------------------------------------------

    def _arm(self, seconds: float | None) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if seconds is not None:
            self._timer = self._loop.timer(seconds)
            self._timer.start(self._check_idle)

    def _check_idle(self) -> None:
        """The read timeout may have passed: close, or re-arm for the time that is left."""
        limit = self._timeout
        assert limit is not None
        now = self._loop.now()
        transport = self.transport
        if self._paused and transport.backlog_bytes > self.write_limit:
            # Paused because the client reads nothing: it must take some bytes in time.
            idle = now - transport.last_progress
            if idle >= limit:
                self._lost(
                    DisconnectReason.KEEPALIVE_TIMEOUT,
                    None,
                    f"read nothing of {transport.backlog_bytes} waiting bytes for {idle:.0f} s",
                )
                return
        elif self._paused:
            idle = 0.0  # paused for the actors: the client is not to blame
            self._last_read = now
        else:
            idle = now - self._last_read
            if idle >= limit:
                self._lost(DisconnectReason.KEEPALIVE_TIMEOUT, None, f"silent for {idle:.1f} s")
                return
        self._arm(limit - idle)

    # ----- ending -----------------------------------------------------------------------

    def _lost(self, reason: DisconnectReason, error: MqttError | None, detail: str) -> None:
        """The one way the socket side ends a connection (a read or write error, a reset,
        EOF, a deadline, bad bytes): stop watching the socket and tell the owner why, once.
        The owner's channel then ends the connection (will, hook, counters, listing) and
        closes the socket. `close` is the other way: the owner ended it and knows."""
        owner = self._owner
        self._stop()
        if owner is not None:
            owner.connection_lost(reason, error, detail)

    def _write_failed(self, error: OSError) -> None:
        """A write failed (the transport reports it before it closes the socket)."""
        self._lost(DisconnectReason.SOCKET_CLOSED, None, f"write failed: {error}")

    def _stop(self) -> None:
        """Stop watching the socket; the owner hears nothing more from it."""
        self._owner = None
        self.intake.on_room = None
        self.transport.on_error = None
        self.transport.on_closing = None
        self.transport.on_flushed = None
        if self._reader is not None:
            self._reader.stop()
            self._reader = None
        if self._rate_timer is not None:
            self._rate_timer.stop()
            self._rate_timer = None
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
