"""Every message one broker actor tells another, as small slotted dataclasses.

The inputs a session gets from its client's channel (acknowledgements, QoS 2 publishes,
releases, subscribe and unsubscribe requests) are channel actions: `channel.actions`.

Hot-path messages carry batches (all the packets of one socket read, all the deliveries
for one session from one batch of publishes), so an actor hop costs once per batch rather
than once per packet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from actors.refs import Ref
from core.client import ClientInfo
from core.message import Message
from core.reasons import DisconnectReason
from core.session_state import Delivery, SubscriptionOptions
from core.wire_messages import WireMessages
from mqtt.errors import MqttError
from mqtt.packets import Packet
from net.transport import Transport

# ----- connection (event loop) -> client actor ---------------------------------------


@dataclass(slots=True)
class PacketsReceived:
    packets: list[Packet]
    size: int  # bytes they were decoded from; the handler reports both to the Intake


@dataclass(slots=True)
class PeerIdentified:
    """The TLS handshake is done and the client's certificate names it (its CN)."""

    identity: str


@dataclass(slots=True)
class ConnectionLost:
    """The reader stopped: peer closed, socket error, a timeout, or undecodable input."""

    reason: DisconnectReason
    error: MqttError | None = None  # set when the input was malformed or too large
    detail: str = ""


# ----- anyone -> client actor ---------------------------------------------------------


@dataclass(slots=True)
class CloseConnection:
    """Close the connection from the server side (takeover, shutdown, session limits)."""

    reason: DisconnectReason
    detail: str = ""
    session_ended: bool = False  # the session ends with it: a delayed will goes out now


@dataclass(slots=True)
class SessionAttached:
    """The session has written CONNACK (and its resends); the client may go on."""

    session: Any  # ActorRef of the SessionActor
    session_present: bool
    # the incoming QoS 2 ids the session awaits PUBREL for (`Channel.session_attached`)
    awaiting_rel: frozenset[int] = frozenset()


@dataclass(slots=True)
class ConnectRefused:
    """The registry refuses the CONNECT instead of opening its session (a pool's home
    worker found the client id banned): CONNACK `reason_code`, `why` its Reason String."""

    reason_code: int
    why: str


@dataclass(slots=True)
class HandleArrived:
    """The session of this connection is being taken over. Handle what the socket already
    holds (its client sent it before it connected again), then tell `session`
    `ArrivedHandled`. The actor tells itself this again with `read` set, so that
    the packets just read are handled before the answer."""

    session: Any  # ActorRef of the SessionActor
    read: bool = False


# ----- client actor / registry -> session actor ---------------------------------------


@dataclass(slots=True)
class Attach:
    client: ClientInfo
    client_ref: Ref[ClientMessage]
    transport: Transport
    session_present: bool
    connack_properties: dict[int, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Detach:
    client_ref: Ref[ClientMessage]
    reason: DisconnectReason
    session_expiry: float | None = None  # a 5.0 DISCONNECT changed the session's expiry
    will: Message | None = None  # published after `will_delay` s unless the session resumes
    will_delay: float = 0.0


@dataclass(slots=True)
class ArrivedHandled:
    """The answer to `HandleArrived`: what the connection held has been handled."""

    client_ref: Ref[ClientMessage]


@dataclass(slots=True)
class Terminate:
    """Discard the session (a clean-start connection replaced it, or it expired)."""

    reason: str


class MoveOut(Protocol):
    """Pool: the previous owner's side of a session's move (pool.session_moves); the
    session calls it, on the loop, to forward what still reaches it to the new owner."""

    def begin(
        self, username: str | None, user_known: bool, qos0: list[Delivery], after: list[int]
    ) -> None:
        """The session is handed over: tell the new owner what the store does not hold."""
        ...

    def forward(self, deliveries: list[Delivery]) -> None:
        """Deliveries that reached the session after its hand-over (their puts committed)."""
        ...

    def end(self) -> None:
        """Nothing more will be forwarded."""
        ...


@dataclass(slots=True)
class HandOff:
    """Pool: another worker takes the session over (docs/pool.md). Close the connection,
    write the session's state to the store (`discard`: delete it, a clean start), stop, and
    call `then` once the store has committed all of it. With `move`, a stored session
    forwards what still reaches it through `move` until told `EndForwarding`."""

    discard: bool
    then: Callable[[], object]
    move: MoveOut | None = None


@dataclass(slots=True)
class EndForwarding:
    """Pool: to a session that moved away: every worker routes its messages to the new
    owner now; leave the routes, forward what reached it before, and stop."""


@dataclass(slots=True)
class MovedIn:
    """Pool: to a session moving in: deliveries its previous owner forwarded, in order."""

    deliveries: list[Delivery]


@dataclass(slots=True)
class OrphansIn:
    """To a session adopted from a dead worker of a pool: deliveries of messages another
    worker kept for it while nobody hosted it (`pool.orphans`), in order; in a cluster, to a
    session restored at start-up, what another node had forwarded to the node's previous
    life and never saw confirmed (`cluster.restored_sessions`)."""

    deliveries: list[Delivery]


@dataclass(slots=True)
class RestoreSettled:
    """Cluster: to a session restored from the store at start-up: the other nodes have had
    time to give what they had forwarded to the node's previous life
    (`cluster.restored_sessions`); copies of what it has need no more checking."""


@dataclass(slots=True)
class ForwardingEnded:
    """Pool: to a session moving in: its previous owner (worker `source`) forwards nothing
    more."""

    source: int


@dataclass(slots=True)
class MoveSettled:
    """Pool: to a moved session: every copy of a message sent to the previous owner before
    its forwarding ended has arrived; duplicates need no more checking."""


@dataclass(slots=True)
class SessionExpired:
    """Told by a detached session's own expiry timer."""


@dataclass(slots=True)
class WillDue:
    """Told by a detached session's will-delay timer: publish the will now."""


@dataclass(slots=True)
class Stalled:
    """Told by the overload check: this session has been over its high-water mark without
    progress for `[overload] max_stall` seconds (`actors.overload`)."""


@dataclass(slots=True)
class Reauthorize:
    """Asked of every session after a plugin reload: drop what the ACL now denies.

    The answer is the number of subscriptions revoked."""


@dataclass(slots=True)
class Deliver:
    deliveries: list[Delivery]


@dataclass(slots=True)
class DeliverWires:
    """QoS 0 deliveries to one session of forwarded 3.x messages held as their PUBLISH
    packets (`core.wire_messages`): `wires`, the packets to write, in order, and `runs`, the
    ranges of `messages` they are with each range's subscription identifiers, for a session
    that needs them as deliveries."""

    messages: WireMessages
    wires: list[bytes]
    runs: list[tuple[int, int, tuple[int, ...]]]

    def deliveries(self) -> list[Delivery]:
        """As `Deliver` would carry them: QoS 0, RETAIN 0, the encoding shared."""
        messages = self.messages.messages
        return [
            Delivery(message, 0, False, identifiers, message.wire)
            for start, end, identifiers in self.runs
            for message in messages[start:end]
        ]


@dataclass(slots=True)
class DeliverRetained(Deliver):
    """The retained messages for a new subscription (from the retainer): new to the
    session even if it had the same message live, so never held or dropped as a duplicate
    while the session moves in from another worker (`core.move_in`)."""


# ----- session actor <-> router actor -------------------------------------------------


@dataclass(slots=True)
class AddRoutes:
    """Routes of a session restored from the store (a live subscription's routes are
    written by its subscriber: `actors.router_actor.RouteWriter`)."""

    client_id: str
    routes: list[tuple[str, Any]]  # (topic filter, Route)


@dataclass(slots=True)
class AwaitRoutes:
    """Asked of the router after a subscription's routes were written: answered with
    `RoutesChanged(token)` once every worker of a pool has applied them (at once in one
    process), which releases the SUBACK."""

    reply_to: Any
    token: Any


@dataclass(slots=True)
class RemoveRoutes:
    client_id: str
    topic_filters: list[str]
    session: Any  # only routes that still point at this session are removed
    reply_to: Any = None
    token: Any = None


@dataclass(slots=True)
class RoutesChanged:
    token: Any


@dataclass(slots=True)
class Sync:
    """Asked of an actor: answered once everything told to it before has been handled."""


# ----- session actor / dispatcher -> retainer actor -----------------------------------


@dataclass(slots=True)
class StoreRetained:
    messages: list[Any]  # hooks.events.Message with retain=True


@dataclass(slots=True)
class SendRetained:
    session: Any
    subscriptions: list[tuple[str, SubscriptionOptions]]


# What each actor handles: the `M` of its `actors.refs.Ref[M]`.
ClientMessage = (
    PacketsReceived
    | SessionAttached
    | PeerIdentified
    | ConnectionLost
    | CloseConnection
    | ConnectRefused
    | HandleArrived
)
RouterMessage = Sync | AwaitRoutes | AddRoutes | RemoveRoutes
RetainerMessage = StoreRetained | SendRetained
