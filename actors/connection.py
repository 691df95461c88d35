"""The read side of one client socket: a greenlet that reads, frames, and tells the client actor.

One `recv` of up to 64 KiB may hold hundreds of packets; the decoder frames them all and the
reader sends them to the client actor as ONE `PacketsReceived` message, so an actor hop
costs once per read, not once per packet.

The reader also enforces the two read deadlines: the CONNECT must arrive within
`limits.connect_timeout`, and afterwards some packet must arrive within 1.5 times the
keep-alive the client asked for [MQTT-3.1.2-24], from the moment it decodes the CONNECT.

A read holding only PUBACK/PUBREC/PUBCOMP from a connected client goes straight to the
client's session actor, which owns the in-flight window those acknowledge: on the QoS 1/2
delivery cycle that is one actor hop instead of two, and with a window of 32 messages the
hops per cycle bound a subscriber's throughput. Acknowledgements carry no ordering with
anything else the client sends, so nothing is reordered that matters.
"""

from __future__ import annotations

import logging
import time

from gevent import socket

from actors.context import BrokerContext
from actors.messages import Acknowledged, ConnectionLost, PacketsReceived
from actors.runtime import tell_if_alive
from actors.session_state import Ack
from actors.transport import Transport
from hooks.events import DisconnectReason
from mqtt.decoder import PacketDecoder
from mqtt.errors import MqttError
from mqtt.packets import Connect, PubAck, PubComp, PubRec

logger = logging.getLogger(__name__)

READ_SIZE = 65536
ACK_OF_PACKET = {PubAck: Ack.PUBACK, PubRec: Ack.PUBREC, PubComp: Ack.PUBCOMP}
CLOSE_WAIT_TIMEOUT = 5.0  # seconds the reader waits for the client actor to close the socket


class Connection:
    """Per-socket reader state shared with the client actor (which sets `idle_timeout`)."""

    __slots__ = ("accepted", "decoder", "idle_timeout", "peer", "session", "sock", "transport")

    def __init__(self, sock: socket.socket, peer: str, max_packet_size: int) -> None:
        self.sock = sock
        self.peer = peer
        self.transport = Transport(sock, peer)
        self.decoder = PacketDecoder(max_packet_size=max_packet_size)
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


def serve_connection(sock: socket.socket, address: tuple, context: BrokerContext) -> None:
    """StreamServer handler: runs in the greenlet gevent gives each accepted socket."""
    from actors.client_actor import ClientActor  # noqa: PLC0415 (import cycle: client -> connection)

    peer = f"{address[0]}:{address[1]}"
    if len(context.live_clients) >= context.config.listener.max_connections:
        logger.warning(
            "refusing connection from %s: listener.max_connections (%d) reached",
            peer,
            context.config.listener.max_connections,
        )
        sock.close()
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    connection = Connection(sock, peer, context.limits.max_packet_size)
    client = ClientActor.start(connection, context)
    reason, error, detail = _read_loop(connection, client, context.limits.connect_timeout)
    tell_if_alive(client, ConnectionLost(reason, error, detail))
    # gevent's server closes the socket when this handler returns: wait until the client
    # actor has written its last words (CONNACK 0x01, a 5.0 DISCONNECT) and closed it.
    connection.transport.wait_closed(timeout=CLOSE_WAIT_TIMEOUT)


def _read_loop(
    connection: Connection, client: object, connect_timeout: float
) -> tuple[DisconnectReason, MqttError | None, str]:
    sock = connection.sock
    decoder = connection.decoder
    last_read = time.monotonic()
    sock.settimeout(connect_timeout)
    while True:
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
        if connection.accepted and sock.timeout != connection.idle_timeout:
            sock.settimeout(connection.idle_timeout)
        try:
            packets = decoder.feed(data)
        except MqttError as error:
            return DisconnectReason.PROTOCOL_ERROR, error, str(error)
        if packets and not _hand_over(connection, client, packets):
            return DisconnectReason.SOCKET_CLOSED, None, "client actor stopped"


def _deadline_passed(
    connection: Connection, last_read: float
) -> tuple[DisconnectReason, None, str] | None:
    """After a read timeout: why to close, or None after re-arming the socket's timeout."""
    if not connection.accepted:
        return DisconnectReason.CONNECT_TIMEOUT, None, "no CONNECT in time"
    limit = connection.idle_timeout
    if limit is None:
        connection.sock.settimeout(None)  # keep-alive 0: no deadline [MQTT-3.1.2-23]
        return None
    idle = time.monotonic() - last_read
    if idle >= limit:
        return DisconnectReason.KEEPALIVE_TIMEOUT, None, f"silent for {idle:.1f} s"
    connection.sock.settimeout(limit - idle)
    return None


def _hand_over(connection: Connection, client: object, packets: list) -> bool:
    """Tell the packets to the client actor (or acks to the session); False if it is gone."""
    if not connection.accepted and isinstance(packets[0], Connect):
        connection.connect_received(packets[0].keepalive)
        connection.sock.settimeout(connection.idle_timeout)
    session = connection.session
    if session is not None and all(type(p) in ACK_OF_PACKET for p in packets):
        acks = [(ACK_OF_PACKET[type(p)], p.packet_id) for p in packets]
        if tell_if_alive(session, Acknowledged(acks)):  # type: ignore[arg-type]
            return True
    return tell_if_alive(client, PacketsReceived(packets))  # type: ignore[arg-type]
