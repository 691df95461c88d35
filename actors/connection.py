"""The read side of one client socket: a greenlet that reads, frames, and tells the client actor.

One `recv` of up to 64 KiB may hold hundreds of packets; the decoder frames them all and the
reader sends them to the client actor as ONE `PacketsReceived` message, so an actor hop
costs once per read, not once per packet.

The reader also enforces the two read deadlines: the CONNECT must be complete within
`limits.connect_timeout` of the accept, however its bytes dribble in, and afterwards some
packet must arrive within 1.5 times the keep-alive the client asked for [MQTT-3.1.2-24],
from the moment it decodes the CONNECT.

It bounds what one client can make the broker hold (docs/security.md): it yields after every
read, so a client whose socket always has data cannot hold the loop; it stops reading while
the actors have not handled `limits.max_unprocessed_packets` / `max_unprocessed_bytes` of its
input (`actors.intake`), and while more than `limits.max_write_buffer` bytes wait for the
client to read them. TCP then pushes back on the client; throttling is logged, at most one
line per second per reason.

On a tls, ws or wss listener every read first goes through the connection's stream layers
(`actors.stream_layers`, from the listener's `Endpoint`): what they answer (handshake
records, a WebSocket pong) is written at once, what they refuse (`LayerError`: a failed TLS
handshake, an HTTP 404) gets its reply written and the connection closed as a protocol
error, and a peer's TLS close_notify or WebSocket close ends the connection like a socket
close. The TLS handshake and the WebSocket upgrade happen inside the connect timeout.

A read holding only PUBACK/PUBREC/PUBCOMP from a connected client goes straight to the
client's session actor, which owns the in-flight window those acknowledge: on the QoS 1/2
delivery cycle that is one actor hop instead of two, and with a window of 32 messages the
hops per cycle bound a subscriber's throughput. Acknowledgements carry no ordering with
anything else the client sends, so nothing is reordered that matters.
"""

from __future__ import annotations

import logging
import time

import gevent
from gevent import socket

from actors.context import BrokerContext
from actors.endpoint import Endpoint
from actors.intake import Intake
from actors.messages import Acknowledged, ConnectionLost, PacketsReceived
from actors.runtime import tell_if_alive
from actors.stream_layers import LayerError, StreamLayer
from actors.transport import LayeredTransport, Transport
from core.reasons import DisconnectReason
from core.session_state import Ack
from mqtt.decoder import PacketDecoder
from mqtt.errors import MqttError
from mqtt.packets import Connect, PubAck, PubComp, PubRec

logger = logging.getLogger(__name__)

READ_SIZE = 65536
ACK_OF_PACKET = {PubAck: Ack.PUBACK, PubRec: Ack.PUBREC, PubComp: Ack.PUBCOMP}
CLOSE_WAIT_TIMEOUT = 5.0  # seconds the reader waits for the client actor to close the socket
PAUSE_TICK = 1.0  # seconds between checks of a paused reader's connection


class Connection:
    """Per-socket reader state shared with the client actor (which sets `idle_timeout`)."""

    __slots__ = (
        "accepted",
        "decoder",
        "identity",
        "idle_timeout",
        "intake",
        "layers",
        "peer",
        "session",
        "sock",
        "transport",
        "use_identity",
        "write_limit",
    )

    def __init__(
        self,
        sock: socket.socket,
        peer: str,
        max_packet_size: int,
        intake: Intake,
        write_limit: int,
        *,
        layers: StreamLayer | None = None,
        use_identity: bool = False,
    ) -> None:
        self.sock = sock
        self.peer = peer
        self.layers = layers  # TLS / WebSocket between the socket and the decoder; None: tcp
        self.transport: Transport = (
            Transport(sock, peer) if layers is None else LayeredTransport(sock, peer, layers)
        )
        # The client certificate's CN once the TLS handshake is done (None: no certificate),
        # and whether it replaces the CONNECT's user name (use_identity_as_username).
        self.identity: str | None = None
        self.use_identity = use_identity
        self.decoder = PacketDecoder(max_packet_size=max_packet_size)
        self.intake = intake
        self.write_limit = write_limit  # bytes waiting for the client before reads pause
        self.session: object = None  # the SessionActor ref while the client is connected
        self.accepted = False  # a CONNECT arrived: the keep-alive deadline applies from now
        self.idle_timeout: float | None = None  # 1.5 x keep-alive; None for keep-alive 0

    def connect_received(self, keepalive: int) -> None:
        """Switch from the connect timeout to the keep-alive deadline [MQTT-3.1.2-24].

        Done by the reader itself when it decodes the CONNECT, so the deadline holds from
        the first packet on, whatever the client actor is busy with (a refused CONNECT
        closes the connection anyway).
        """
        self.idle_timeout = keepalive * 1.5 if keepalive else None
        self.accepted = True


def serve_connection(
    sock: socket.socket, address: object, context: BrokerContext, endpoint: Endpoint
) -> None:
    """StreamServer handler: runs in the greenlet gevent gives each accepted socket."""
    from actors.client_actor import ClientActor  # noqa: PLC0415 (import cycle: client -> connection)

    accepted_at = time.monotonic()
    if isinstance(address, tuple):
        peer = f"{address[0]}:{address[1]}"
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        peer = f"unix:{sock.fileno()}"  # a unix socket's clients have no address
    limit = endpoint.config.max_connections
    if endpoint.connections >= limit:
        logger.warning(
            "refusing connection from %s: max_connections (%d) of listener %s reached",
            peer,
            limit,
            endpoint.name,
        )
        sock.close()
        return
    endpoint.connections += 1
    try:
        limits = context.limits
        connection = Connection(
            sock,
            peer,
            limits.max_packet_size,
            Intake(limits.max_unprocessed_packets, limits.max_unprocessed_bytes),
            limits.max_write_buffer,
            layers=endpoint.new_layers(),
            use_identity=endpoint.use_identity_as_username,
        )
        client = ClientActor.start(connection, context)
        reader = _Reader(connection, client, context, accepted_at + limits.connect_timeout)
        reason, error, detail = reader.run()
        tell_if_alive(client, ConnectionLost(reason, error, detail))
        # gevent's server closes the socket when this handler returns: wait until the client
        # actor has written its last words (CONNACK 0x01, a 5.0 DISCONNECT) and closed it.
        connection.transport.wait_closed(timeout=CLOSE_WAIT_TIMEOUT)
    finally:
        endpoint.connections -= 1


Ending = tuple[DisconnectReason, MqttError | None, str]


class _Reader:
    """The read loop of one connection, with its deadlines and its two reasons to pause."""

    __slots__ = ("_client", "_connect_deadline", "_connection", "_throttle_log")

    def __init__(
        self, connection: Connection, client: object, context: BrokerContext, deadline: float
    ) -> None:
        self._connection = connection
        self._client = client
        self._connect_deadline = deadline  # monotonic time by which the CONNECT must be in
        self._throttle_log = context.throttle_log

    def run(self) -> Ending:
        connection = self._connection
        sock = connection.sock
        last_read = time.monotonic()
        while True:
            if not self._arm_read_deadline():
                return DisconnectReason.CONNECT_TIMEOUT, None, "no CONNECT in time"
            try:
                data = sock.recv(READ_SIZE)
            except TimeoutError:
                expired = _deadline_passed(connection, last_read)
                if expired is not None:
                    return expired
                continue
            except OSError as error:
                return DisconnectReason.SOCKET_CLOSED, None, str(error)
            if not data:
                return DisconnectReason.SOCKET_CLOSED, None, "closed by peer"
            last_read = time.monotonic()
            layers = connection.layers
            if layers is not None:
                try:
                    data = _through_layers(connection, layers, data)
                except LayerError as error:
                    connection.transport.write_raw(error.reply)
                    return DisconnectReason.PROTOCOL_ERROR, None, str(error)
            ending = self._decode(data)
            if ending is not None:
                return ending
            # Let the actors handle this read before the next: a client whose socket always
            # has data must not hold the loop (gevent never preempts a greenlet).
            gevent.sleep(0)
            ending = self._pause_while_behind()
            if ending is not None:
                return ending

    def _decode(self, data: bytes) -> Ending | None:
        """Frame MQTT bytes and hand the packets over; why to close, or None to read on."""
        connection = self._connection
        try:
            packets = connection.decoder.feed(data) if data else None
        except MqttError as error:
            return DisconnectReason.PROTOCOL_ERROR, error, str(error)
        if packets:
            connection.intake.add(len(packets), len(data))
            if not _hand_over(connection, self._client, packets, len(data)):
                return DisconnectReason.SOCKET_CLOSED, None, "client actor stopped"
        layers = connection.layers
        if layers is not None and layers.peer_closed:
            return DisconnectReason.SOCKET_CLOSED, None, "closed by peer (TLS or WebSocket)"
        return None

    def _arm_read_deadline(self) -> bool:
        """Set the socket timeout for the next read; False if the CONNECT deadline passed."""
        connection = self._connection
        sock = connection.sock
        if not connection.accepted:
            # The CONNECT timeout runs from accept, whatever bytes arrive before a complete
            # CONNECT: a client dribbling bytes cannot hold a connection open.
            remaining = self._connect_deadline - time.monotonic()
            if remaining <= 0:
                return False
            sock.settimeout(remaining)
        elif sock.timeout != connection.idle_timeout:
            sock.settimeout(connection.idle_timeout)
        return True

    def _pause_while_behind(self) -> Ending | None:
        """Stop reading while the actors are behind on this client's input, or while the
        client does not read what the broker sends it; TCP then slows the client down."""
        connection = self._connection
        intake = connection.intake
        transport = connection.transport
        if intake.full() and not intake.closed:
            self._throttle_log.note(
                "throttled reads (input not handled yet)",
                1,
                f"pausing reads from {connection.peer}: {intake.packets} packets / "
                f"{intake.bytes} bytes not handled yet (limits.max_unprocessed_packets / "
                "max_unprocessed_bytes)",
            )
            while not intake.wait(PAUSE_TICK):
                if transport.closed:
                    return DisconnectReason.SOCKET_CLOSED, None, "closed while paused"
        limit = connection.write_limit
        if transport.backlog_bytes > limit and not transport.closed:
            self._throttle_log.note(
                "throttled reads (client not reading)",
                1,
                f"pausing reads from {connection.peer}: {transport.backlog_bytes} bytes wait "
                f"for it to read them (limits.max_write_buffer = {limit})",
            )
            waited = 0.0
            while not transport.wait_flushed(PAUSE_TICK):
                waited += PAUSE_TICK
                idle_timeout = connection.idle_timeout
                if idle_timeout is not None and waited >= idle_timeout:
                    return (
                        DisconnectReason.KEEPALIVE_TIMEOUT,
                        None,
                        f"read nothing of {transport.backlog_bytes} waiting bytes for "
                        f"{waited:.0f} s",
                    )
        return None


def _through_layers(connection: Connection, layers: StreamLayer, data: bytes) -> bytes:
    """`data` read from the socket -> the MQTT bytes in it; the layers' answers are written
    at once. Raises LayerError."""
    data, reply = layers.receive(data)
    if reply:
        connection.transport.write_raw(reply)
    if connection.identity is None and layers.ready:
        connection.identity = layers.identity
    return data


def _deadline_passed(connection: Connection, last_read: float) -> Ending | None:
    """After a read timeout: why to close, or None after re-arming the socket's timeout."""
    if not connection.accepted:
        return None  # the loop checks the connect deadline before every read
    limit = connection.idle_timeout
    if limit is None:
        connection.sock.settimeout(None)  # keep-alive 0: no deadline [MQTT-3.1.2-23]
        return None
    idle = time.monotonic() - last_read
    if idle >= limit:
        return DisconnectReason.KEEPALIVE_TIMEOUT, None, f"silent for {idle:.1f} s"
    connection.sock.settimeout(limit - idle)
    return None


def _hand_over(connection: Connection, client: object, packets: list, size: int) -> bool:
    """Tell the packets to the client actor (or acks to the session); False if it is gone."""
    if not connection.accepted and isinstance(packets[0], Connect):
        connection.connect_received(packets[0].keepalive)
    session = connection.session
    if session is not None and all(type(p) in ACK_OF_PACKET for p in packets):
        acks = [(ACK_OF_PACKET[type(p)], p.packet_id) for p in packets]
        if tell_if_alive(session, Acknowledged(acks, connection.intake, size)):  # type: ignore[arg-type]
            return True
    return tell_if_alive(client, PacketsReceived(packets, size))  # type: ignore[arg-type]
