"""What the channel answers with: the actions a connection's actors carry out.

`channel.channel.Channel` never writes to a socket or tells an actor; each of its methods
returns a list of these, in the order they must happen. The client actor carries them out
(`actors.client_actor`); the ones derived from `SessionInput` are told, as they are, to the
client's session actor, which owns the state they change.

Connection actions:
- `Send`: write these bytes to the client (acknowledgements with a `slot`: in their place
  among the connection's, `channel.ack_order`).
- `Publish`: route these messages; write the bytes `acks` (the PUBACKs of the batch,
  `channel.pubacks`) gives for the outcome once the messages are durable for persistent
  subscribers (write-ahead), or at once if nothing needs storing; if the store fails and
  they would need it, write its refusals, or close a 3.x connection, as `acks` says. The
  bytes go in their place among the connection's acknowledgements (`acks.slot`).
- `Drop`: a message the client sent is not routed (denied by the ACL): count, log, hook.
- `OpenSession`: the CONNECT is accepted; open (or resume) the session for this client.
- `SetReadTimeout`: from now on close the connection after this long without input.
- `ExpireCredentials`: close the connection (`CREDENTIALS_EXPIRED`) at this Unix time,
  instead of at any time set before.
- `InputHandled`: these packets (read from `size` bytes) are handled; the bound on the
  connection's unprocessed input (`channel.intake`) has room again.
- `End`: the connection is over: close the socket after the bytes sent so far, detach the
  session (with the Session Expiry Interval a 5.0 DISCONNECT set, and a will to publish
  after its Will Delay Interval), and (if it had connected) count it gone.

Session inputs (told to the session actor):
- `InboundQos2`: QoS 2 PUBLISH packets, each with its message (None if denied) and its
  PUBREC, which the session sends once it knows the packet id is recorded [MQTT-4.3.3-2],
  in their place among the connection's acknowledgements (`slot`).
- `Acknowledged`: PUBACK/PUBREC/PUBCOMP for messages the session delivered.
- `Released`: PUBREL packet ids, answered with PUBCOMP once the release is recorded.
- `SubscribeRequest` / `UnsubscribeRequest`: the filters, with what the channel refused (and
  for a 5.0 client the SUBACK properties that say why). `routed` says whether the client
  actor already changed the routes, in read order (docs/channel.md, "Routes in read order").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from channel.ack_order import AckSlot
from channel.intake import Intake
from channel.pubacks import Pubacks
from core.client import ClientInfo
from core.message import Message
from core.reasons import DisconnectReason, DropReason
from core.session_state import Ack, SubscriptionOptions
from mqtt.packets import Subscription


@dataclass(slots=True)
class Send:
    data: bytes
    # Acknowledgements (a batch's refused PUBACKs): written in their place among the
    # connection's (`channel.ack_order`), not before an earlier batch's.
    slot: AckSlot | None = field(default=None, compare=False)


@dataclass(slots=True)
class Publish:
    messages: list[Message]
    # The batch's PUBACKs, in PUBLISH order; their bytes depend on what routing found
    # (`Pubacks.routed`) or on a failing store (`Pubacks.refused`).
    acks: Pubacks | None = None


@dataclass(slots=True)
class Drop:
    message: Message
    reason: DropReason


@dataclass(slots=True)
class OpenSession:
    client: ClientInfo
    connack_properties: dict[int, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SetReadTimeout:
    seconds: float | None  # None: no deadline (keep-alive 0) [MQTT-3.1.2-23]


@dataclass(slots=True)
class ExpireCredentials:
    at: float  # Unix time (the authentication's `expires_at`)


@dataclass(slots=True)
class InputHandled:
    packets: int
    size: int


@dataclass(slots=True)
class End:
    reason: DisconnectReason
    was_connected: bool  # the session was attached: detach it and count the client gone
    session_expiry: float | None = None  # a 5.0 DISCONNECT changed it to this
    will: Message | None = None  # a will the session publishes after `will_delay` seconds
    will_delay: float = 0.0


class SessionInput:
    """Base of the actions the client actor tells to its session actor as they are."""

    __slots__ = ()


@dataclass(slots=True)
class InboundQos2(SessionInput):
    # (packet id, the message to route or None if denied, the PUBREC to answer with)
    publishes: list[tuple[int, Message | None, bytes]]
    # The publishing connection's intake, set by the client actor: flow control holds it.
    publisher: Intake | None = None
    # The PUBRECs' place among the connection's acknowledgements (`channel.ack_order`): the
    # session fills it with them (b"" if none) and calls `write_acks` (set by the client
    # actor), which writes what that released to the connection.
    slot: AckSlot | None = field(default=None, compare=False)
    write_acks: Callable[[], object] | None = field(default=None, compare=False)


@dataclass(slots=True)
class Acknowledged(SessionInput):
    """PUBACK/PUBREC/PUBCOMP packets from the client, in arrival order."""

    acks: list[tuple[Ack, int]]
    # Set when the batch went straight from the socket to the session: the session reports
    # it handled to the connection's Intake (`size` bytes).
    intake: Intake | None = None
    size: int = 0
    urgent = True  # handled before queued deliveries: it frees in-flight slots


@dataclass(slots=True)
class Released(SessionInput):
    """PUBREL packet ids; the session answers each with PUBCOMP once the release is recorded
    (5.0: 0x92 for an id it did not know)."""

    packet_ids: list[int]


@dataclass(slots=True)
class SubscribeRequest(SessionInput):
    packet_id: int
    subscriptions: list[Subscription]
    refused: dict[int, int]  # index in `subscriptions` -> failure reason code (5.0)
    subscription_id: int | None = None  # MQTT 5 Subscription Identifier property
    # The SUBACK's properties (5.0): a Reason String for the refusals (`channel.problems`).
    suback_properties: dict[int, Any] | None = None
    routed: bool = False  # set by the client actor: the routes are in the table already

    def granted(self) -> list[tuple[str, SubscriptionOptions]]:
        """Each filter not refused, with the options of its subscription, in order."""
        refused = self.refused
        return [
            (
                subscription.topic_filter,
                SubscriptionOptions(
                    qos=subscription.qos,
                    no_local=subscription.no_local,
                    retain_as_published=subscription.retain_as_published,
                    retain_handling=subscription.retain_handling,
                    subscription_id=self.subscription_id,
                ),
            )
            for index, subscription in enumerate(self.subscriptions)
            if index not in refused
        ]


@dataclass(slots=True)
class UnsubscribeRequest(SessionInput):
    packet_id: int
    topic_filters: list[str]
    routed: bool = False  # set by the client actor: the routes are gone already


Action = (
    Send
    | Publish
    | Drop
    | OpenSession
    | SetReadTimeout
    | ExpireCredentials
    | InputHandled
    | End
    | InboundQos2
    | Acknowledged
    | Released
    | SubscribeRequest
    | UnsubscribeRequest
)
