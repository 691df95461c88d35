"""ClientActor: one per connection; carries out what its `Channel` decides (emqttd_client).

The MQTT protocol of the connection is `channel.channel.Channel`, pure: this actor feeds it
what happens (a batch of packets, the session attached, the connection lost, a close asked
by the server) and carries out the actions it answers with (`channel.actions`): bytes to
send, messages to route or report dropped, the session to open, inputs for the session
actor, the read timeout, the input handled, the end of the connection.

The socket side (`net.connection.Connection`) calls `packets_received` and
`connection_lost` from the event loop; they only tell this actor, except that a read holding
nothing but acknowledgements of a connected client goes straight to the session actor
(`Channel.acks_only`), which owns the in-flight window they free.

One batch of packets is handled at once: its publishes are routed together, and all its
replies leave in one socket write (`after_drain`). The routes of a SUBSCRIBE or UNSUBSCRIBE
are written into the route table here, as its action is carried out, so they are in force
for the PUBLISHes after it (docs/channel.md, "Routes in read order").
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import gevent

from actors.context import BrokerContext, ConnectedClient
from actors.messages import (
    ArrivedHandled,
    CloseConnection,
    ConnectionLost,
    ConnectRefused,
    Detach,
    HandleArrived,
    PacketsReceived,
    PeerIdentified,
    SessionAttached,
)
from actors.runtime import GeventActor, tell_if_alive
from channel import actions
from channel.ack_order import AckSlot
from channel.channel import Channel, ChannelSettings, Phase
from channel.intake import Intake
from channel.pubacks import Pubacks
from core.client import ClientInfo
from core.message import Message
from core.rate_limit import RateLimiter
from core.reasons import DisconnectReason
from hooks.hookpoints import HookPoint
from mqtt.errors import MqttError
from mqtt.packets import Packet
from net.connection import Connection
from net.endpoint import Endpoint
from net.inprocess import PipeEnd
from router.fan_out import Route

logger = logging.getLogger(__name__)

_CLIENT_RATE_LIMIT = HookPoint.CLIENT_RATE_LIMIT


class ClientActor(GeventActor):
    # Set once its session is being taken over (`_handle_arrived`); class-level: rarely set.
    _handed_over = False
    # The timer closing it when its credentials expire (`ExpireCredentials`); class-level:
    # most clients' credentials do not expire.
    _expiry: gevent.Greenlet[Any, Any] | None = None

    def __init__(
        self, connection: Connection, context: BrokerContext, channel: Channel, endpoint: Endpoint
    ) -> None:
        super().__init__()
        self._endpoint = endpoint  # the listener it came in on: counts its connections
        endpoint.opened()
        self._connection = connection
        self._transport = connection.transport
        self._context = context
        self._channel = channel
        self._session: Any = None  # the SessionActor ref once attached
        self._flow_controlled = context.flow.enabled  # its publishes may pause its reads
        self._out: list[bytes] = []
        context.live_clients.add(self.actor_ref)

    # ----- called by the connection, from the event loop ---------------------------------

    def packets_received(self, packets: list[Packet], size: int) -> None:
        self._context.stats.bytes_received += size
        session = self._session
        if session is not None:
            acks = self._channel.acks_only(packets, size)
            if acks is not None:
                acks.intake = self._connection.intake
                if tell_if_alive(session, acks):
                    return
        if not tell_if_alive(self.actor_ref, PacketsReceived(packets, size)):
            self._connection.close()

    def peer_identified(self, identity: str) -> None:
        tell_if_alive(self.actor_ref, PeerIdentified(identity))

    def connection_lost(
        self, reason: DisconnectReason, error: MqttError | None, detail: str
    ) -> None:
        if not tell_if_alive(self.actor_ref, ConnectionLost(reason, error, detail)):
            self._connection.close()

    # ----- actor ------------------------------------------------------------------------

    def on_receive(self, message: Any) -> None:
        channel = self._channel
        if isinstance(message, PacketsReceived):
            self._carry_out(channel.handle_in(message.packets, message.size))
        elif isinstance(message, SessionAttached):
            if channel.phase is not Phase.CONNECTING:
                tell_if_alive(
                    message.session, Detach(self.actor_ref, DisconnectReason.SOCKET_CLOSED)
                )
                return
            self._session = message.session
            self._connected(message.session)
            address = _address(self._connection.peer)
            if address is not None:
                self._context.auth_failures.succeeded(address)
            if self._context.hooks.has(_CLIENT_RATE_LIMIT) and channel.client is not None:
                self._set_rate_limits(channel.client)
            self._carry_out(channel.session_attached(message.session_present, message.awaiting_rel))
        elif isinstance(message, PeerIdentified):
            channel.identify(message.identity)
        elif isinstance(message, ConnectionLost):
            self._carry_out(channel.connection_lost(message.reason, message.error, message.detail))
        elif isinstance(message, CloseConnection):
            self._carry_out(
                channel.close(message.reason, message.detail, session_ended=message.session_ended)
            )
        elif isinstance(message, ConnectRefused):
            self._carry_out(channel.session_refused(message.reason_code, message.why))
        elif isinstance(message, HandleArrived):
            self._handle_arrived(message)
        if channel.phase is Phase.CLOSED:
            self.stop()

    def _handle_arrived(self, message: HandleArrived) -> None:
        """This connection's session is being taken over (its client connected again, here
        or on another worker). What the client sent before that is handled first, in
        order: a DISCONNECT in it may end the session (section 3.14.2.2.2) or discard the
        will [MQTT-3.14.4-3]. Ending the connection tells the session `Detach` instead."""
        if message.read:
            # What this connection reads from now on may reach the session after the
            # takeover: it changes no route itself any more (`_route_now`).
            self._handed_over = True
            tell_if_alive(message.session, ArrivedHandled(self.actor_ref))
            return
        self._connection.read_arrived()  # tells this actor the packets, as any read does
        self.actor_ref.tell(HandleArrived(message.session, read=True))

    def after_drain(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._context.stats.bytes_sent += len(data)
            self._transport.write(data)
            self._out.clear()

    def _take_acks(self, slot: AckSlot, data: bytes) -> None:
        """Fill `slot` with `data` while handling a read: what that releases leaves with the
        read's other bytes (`after_drain`)."""
        if slot.fill(data):
            self._out.append(slot.order.take())

    def _write_acks(self) -> None:
        """Write the acknowledgements released so far (`channel.ack_order`) now: called where
        a commit completes, or by the session actor once it filled its PUBRECs' slot. The
        bytes waiting for `after_drain` go first: acknowledgements released before are among
        them, so nothing overtakes them."""
        order = self._channel.ack_order
        if order is not None:
            self._out.append(order.take())
        self.after_drain()

    def on_failure(self, *_exc_info: Any) -> None:
        # pykka has logged the traceback and stopped the actor; the connection still ends
        # the way every connection does (will, session, hook, counters).
        self._carry_out(self._channel.close(DisconnectReason.SERVER_ERROR, "(a broker bug)"))

    def _set_rate_limits(self, client: ClientInfo) -> None:
        """Ask the client.rate_limit plugins for this client's limits (docs/overload.md)."""
        limits = self._context.hooks.rate_limits(client, self._context.rate_limits)
        self._connection.rate_limiter = (
            None if limits.unlimited else RateLimiter(limits, gevent.get_hub().loop.now())
        )

    def _refused_from(self, action: actions.End) -> str | None:
        """The address whose refused CONNECT this is, to slow down (docs/overload.md); None:
        not a refused CONNECT (or from a unix socket)."""
        if action.reason is not DisconnectReason.NOT_AUTHORIZED or action.was_connected:
            return None
        return _address(self._connection.peer)

    def _close_refused(self, address: str) -> None:
        """Close a refused CONNECT's connection once its CONNACK waited the delay of the
        address's refusals (counted pool-wide in a pool: pool.auth_failures)."""
        last_words, self._out = b"".join(self._out), []
        self._context.stats.bytes_sent += len(last_words)
        close_after = self._connection.close_after(last_words)

        def answer(delay: float) -> None:
            if delay > 0:
                logger.warning(
                    "refused CONNECT from %s again: its CONNACK waits %.2f s ([overload] "
                    "auth_failure_delay, doubling per refusal up to max_auth_failure_delay)",
                    address,
                    delay,
                )
            close_after(delay)

        self._context.auth_failures.refused(address, gevent.get_hub().loop.now(), answer)

    # ----- actions ----------------------------------------------------------------------

    def _carry_out(self, answer: list[actions.Action]) -> None:
        for action in answer:
            if isinstance(action, actions.SessionInput):
                if type(action) is actions.InboundQos2:
                    if self._flow_controlled:
                        action.publisher = self._connection.intake
                    action.write_acks = self._write_acks
                elif isinstance(action, actions.SubscribeRequest | actions.UnsubscribeRequest):
                    self._route_now(action)
                # The session may have stopped (taken over, terminated): then these go
                # nowhere, and its CloseConnection is on its way to this actor.
                tell_if_alive(self._session, action)
            else:
                _ACTION_HANDLERS[type(action)](self, action)

    def _route_now(self, request: actions.SubscribeRequest | actions.UnsubscribeRequest) -> None:
        """Change the routes of a SUBSCRIBE / UNSUBSCRIBE now, before the actions after it
        (a PUBLISH of the same read) and before any connection read later, and mark the
        request `routed`; its session does the rest (its state, the SUBACK). Not once the
        session is being taken from this connection, nor if it stopped: the session then
        changes the routes with its state, if it still handles the request at all, so no
        route outlives the session it points at. Nor while the session has not yet handled
        a QoS 2 PUBLISH this connection sent before (it routes them), or a request left to
        it: it then changes the routes after those, in order (docs/channel.md, "Routes in
        read order")."""
        session = self._session
        if self._handed_over or not session.is_alive() or _unrouted(session):
            return
        client = self._channel.client
        assert client is not None
        routes = self._context.routes
        if isinstance(request, actions.SubscribeRequest):
            persistent = client.keeps_session
            routes.add(
                client.client_id,
                [
                    (topic_filter, Route(session, options, persistent))
                    for topic_filter, options in request.granted()
                ],
            )
        else:
            routes.remove(client.client_id, request.topic_filters, session)
        request.routed = True

    def _send(self, action: actions.Send) -> None:
        if action.slot is None:
            self._out.append(action.data)
        else:
            self._take_acks(action.slot, action.data)

    def _publish(self, action: actions.Publish) -> None:
        """Route the batch and write the PUBACKs its `acks` give for what routing found: once
        the messages are durable for persistent subscribers (write-ahead), else at once; in
        either case only after the acknowledgements of every earlier batch (`acks.slot`)."""
        acks = action.acks
        messages = action.messages
        dispatcher = self._context.dispatcher
        assert dispatcher is not None
        if (
            acks is not None
            and self._context.persistence.failing
            and dispatcher.needs_store(messages)
        ):
            self._refuse_for_store(messages, acks)
            return
        publisher = self._connection.intake if self._flow_controlled else None
        if acks is None:
            dispatcher.publish(messages, None, publisher)
            return
        # The ids of the messages that match nobody, if a PUBACK says so (5.0: 0x10).
        unmatched: set[int] | None = set() if acks.waits_for_routing else None
        slot = acks.slot
        assert slot is not None

        def on_durable() -> None:
            if slot.fill(acks.routed(unmatched or ())):
                self._write_acks()

        if not dispatcher.publish(messages, on_durable, publisher, unmatched=unmatched):
            self._take_acks(slot, acks.routed(unmatched or ()))

    def _refuse_for_store(self, messages: list[Message], acks: Pubacks) -> None:
        """The store fails: route this batch's QoS 0 publishes, and answer its QoS 1 ones as
        `acks` says (`channel.pubacks`: 5.0 PUBACKs 0x97, a 3.x connection closed)."""
        routed = [message for message in messages if not message.qos]
        dispatcher = self._context.dispatcher
        assert dispatcher is not None
        if routed:
            publisher = self._connection.intake if self._flow_controlled else None
            dispatcher.publish(routed, None, publisher)
        refused = acks.refused()
        self._context.throttle_log.note(
            "refused publishes (store failing)",
            len(messages) - len(routed),
            f"the store fails (see its errors): refused QoS 1/2 publishes to persistent "
            f"sessions from {self._connection.peer} "
            + ("with PUBACK 0x97" if refused is not None else "by closing the MQTT 3.x connection")
            + "; they are accepted again once the store commits (free disk space)",
            logging.WARNING,
        )
        assert acks.slot is not None
        if refused is not None:
            self._take_acks(acks.slot, refused)  # after the earlier batches' ones
        else:
            # The last of this connection: no later PUBLISH is acknowledged before the close,
            # ahead of these that never are (docs/channel.md, "Acknowledgements in PUBLISH
            # order").
            acks.slot.fill(b"", last=True)
            tell_if_alive(
                self.actor_ref,
                CloseConnection(DisconnectReason.STORE_FAILING, "the store fails"),
            )

    def _drop(self, action: actions.Drop) -> None:
        dispatcher = self._context.dispatcher
        assert dispatcher is not None
        dispatcher.dropped(action.message, action.reason)  # counts and logs it

    def _open_session(self, action: actions.OpenSession) -> None:
        self._context.registry.open(
            action.client, self.actor_ref, self._transport, action.connack_properties
        )

    def _set_read_timeout(self, action: actions.SetReadTimeout) -> None:
        self._connection.set_read_timeout(action.seconds)

    def _expire_credentials(self, action: actions.ExpireCredentials) -> None:
        """Close this connection when its credentials expire (5.0: DISCONNECT 0x87)."""
        if self._expiry is not None:
            self._expiry.kill(block=False)
        close = CloseConnection(DisconnectReason.CREDENTIALS_EXPIRED, "at the time they gave")
        delay = max(0.0, action.at - time.time())
        self._expiry = gevent.spawn_later(delay, tell_if_alive, self.actor_ref, close)

    def _input_handled(self, action: actions.InputHandled) -> None:
        self._connection.intake.done(action.packets, action.size)

    def _end(self, action: actions.End) -> None:
        if self._expiry is not None:
            self._expiry.kill(block=False)
        refused_from = self._refused_from(action)
        if refused_from is not None:
            # A refused CONNECT: after earlier refusals from its address, its CONNACK waits.
            self._close_refused(refused_from)
        else:
            self.after_drain()
            self._connection.close()
        self._connection.intake.close()
        self._context.live_clients.discard(self.actor_ref)
        self._endpoint.closed()
        session = self._session
        client = self._channel.client
        if session is None and client is not None:
            # Ended while its session was being opened: the session's SessionAttached to this
            # actor will find it stopped. The registry already holds that session, and the
            # Attach sent to it precedes this Detach, so the session detaches (and a clean one
            # ends [MQTT-3.1.2-6]) instead of staying attached to nobody.
            session = self._context.registry.sessions.get(client.client_id)
        # The session may already have stopped (a clean-start takeover terminated it); a
        # session attached to another connection ignores a Detach from this one.
        tell_if_alive(
            session,
            Detach(
                self.actor_ref,
                action.reason,
                session_expiry=action.session_expiry,
                will=action.will,
                will_delay=action.will_delay,
            ),
        )
        if action.was_connected and client is not None:
            stats = self._context.stats
            stats.connections -= 1
            stats.connected_by_version[client.protocol_version] -= 1
            entry = self._context.clients.get(client.client_id)
            if entry is not None and entry.client_ref is self.actor_ref:
                del self._context.clients[client.client_id]

    def _connected(self, session: Any) -> None:
        """Count the connection and list it for the admin API."""
        client = self._channel.client
        assert client is not None
        stats = self._context.stats
        stats.connections += 1
        stats.connections_total += 1
        stats.connections_max = max(stats.connections_max, stats.connections)
        stats.connected_by_version[client.protocol_version] += 1
        self._context.clients[client.client_id] = ConnectedClient(
            client, self.actor_ref, session, self._endpoint.name, time.time()
        )


# The handler of each action that is not a session input. A class-level table: a
# per-instance dict of bound methods would cost ~1 KB per idle connection.
_ACTION_HANDLERS: dict[type, Callable[[ClientActor, Any], None]] = {
    actions.Send: ClientActor._send,
    actions.Publish: ClientActor._publish,
    actions.Drop: ClientActor._drop,
    actions.OpenSession: ClientActor._open_session,
    actions.SetReadTimeout: ClientActor._set_read_timeout,
    actions.ExpireCredentials: ClientActor._expire_credentials,
    actions.InputHandled: ClientActor._input_handled,
    actions.End: ClientActor._end,
}


def _unrouted(session: Any) -> bool:
    """Whether `session` still holds, unhandled, a QoS 2 PUBLISH batch (which it routes) or
    a SUBSCRIBE/UNSUBSCRIBE whose routes it changes itself. Asked only for a SUBSCRIBE or
    UNSUBSCRIBE, never on the publish path."""
    return any(
        type(message) is actions.InboundQos2
        or (
            isinstance(message, actions.SubscribeRequest | actions.UnsubscribeRequest)
            and not message.routed
        )
        for message in session.actor_inbox.waiting()
    )


def _address(peer: str) -> str | None:
    """The IP address of "ip:port" (None for a unix socket's client)."""
    if peer.startswith("unix:"):
        return None
    return peer.rsplit(":", 1)[0]


def accept_connection(
    sock: socket.socket | PipeEnd,
    address: Any,
    context: BrokerContext,
    endpoint: Endpoint,
    settings: ChannelSettings,
) -> None:
    """The listener's handler for one accepted socket (or a bridge's in-process stream,
    `net.inprocess`): called from the event loop, it sets up the connection and its client
    actor and returns; nothing runs until bytes arrive.

    A failure here (a broker bug, or the socket already reset) closes this one socket and is
    logged; the listener goes on accepting."""
    try:
        _set_up(sock, address, context, endpoint, settings)
    except Exception:
        logger.exception("could not set up a connection on listener %s: closed it", endpoint.name)
        sock.close()


def _set_up(
    sock: socket.socket | PipeEnd,
    address: Any,
    context: BrokerContext,
    endpoint: Endpoint,
    settings: ChannelSettings,
) -> None:
    # TCP_NODELAY is set once on the listening socket (`Listener`) and inherited; a unix
    # socket's clients have no address, the bridges' in-process connections
    # (`bridge.local_link`) have one.
    if isinstance(address, tuple):
        peer = f"{address[0]}:{address[1]}"
    else:
        assert not isinstance(sock, PipeEnd)
        peer = f"unix:{sock.fileno()}"
    if endpoint.full:
        elsewhere = endpoint.elsewhere
        logger.warning(
            "refusing connection from %s: max_connections (%d) of listener %s reached%s",
            peer,
            endpoint.config.max_connections,
            endpoint.name,
            f" ({endpoint.connections} here, {elsewhere} on the other workers)"
            if elsewhere
            else "",
        )
        sock.close()
        return
    sock.setblocking(False)
    limits = context.limits
    rate_limits = context.rate_limits
    connection = Connection(
        sock,
        peer,
        max_packet_size=limits.max_packet_size,
        intake=Intake(limits.max_unprocessed_packets, limits.max_unprocessed_bytes),
        write_limit=limits.max_write_buffer,
        throttle_log=context.throttle_log,
        layers=endpoint.new_layers(),
        stats=context.stats,
        rate_limiter=None
        if rate_limits.unlimited
        else RateLimiter(rate_limits, gevent.get_hub().loop.now()),
    )
    client = ClientActor(connection, context, Channel(peer, context.hooks, settings), endpoint)
    client.launch()
    connection.open(client, limits.connect_timeout)
