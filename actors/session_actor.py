"""SessionActor: one per client id; owns its `SessionState` and outlives a persistent client.

It is the only place that changes the state of a client id: subscriptions, the outgoing
in-flight window and queue, and the incoming QoS 2 packet ids awaiting PUBREL. The pure
transitions live in `core.session_state` and answer with actions (see its docstring); this
actor carries them out with a class-level handler table (`_ACTION_HANDLERS`): bytes written
to the attached client's `Transport` (which never blocks), store ops for persistent sessions,
counters, loss log lines and hooks (message.delivered, message.acked, message.dropped,
session.unsubscribed), and messages for the router and the retainer. The drops of one batch
are reported together. QoS 0 fan-out to a 3.x client skips the table: a batch the state
answers with itself is written as its shared encodings in one go.

Lifecycle: created by the session registry; `Attach` binds a connection (writing CONNACK
first, then resending unacknowledged messages in their original order [MQTT-4.4.0-1]);
`Detach` unbinds it; a session whose expiry is 0 terminates on detach, any other keeps
queueing until its client comes back, it expires (the client's Session Expiry Interval, or
`limits.session_expiry` for 3.x), or it is terminated. A 5.0 will with a Will Delay Interval
waits here: published when the delay passes or the session ends, whichever comes first,
and never if the client resumes the session in time [MQTT-3.1.3-9].

For a 5.0 client the attached connection's `channel.outbound.Outbound` writes each PUBLISH
(properties, the expiry left, topic aliases) and says when one cannot be sent (expired, over
the client's Maximum Packet Size); the in-flight window is lowered to the client's Receive
Maximum.

Shared subscriptions (`router.shared`): a session gives back the shared deliveries it cannot
keep (`_hand_over_shared`), for the dispatcher to redispatch to another member: those that
arrive while its client is offline, the queued ones when its client goes, and also the
QoS 1 ones in flight when the session ends (as EMQX does). Retained messages are never sent
for a shared subscription [MQTT-4.8.2-6].

Flow control (docs/overload.md): while its client is connected, the session publishes its
load (in-flight + queued messages and payload bytes) to its `core.flow.SessionLoad` after
every batch, and its queue is unbounded: the publishers that feed it pause at the high-water
mark instead. Offline, or stuck (`Stalled`: over the mark without an acknowledgement for
`[overload] max_stall`), it falls back to `limits.max_queued_messages` / `max_queued_bytes`
and drop-oldest, and drops QoS 0 while stuck.

Read checks (`hooks.read_checks`): on attach the session tells the dispatcher's `ReadChecks`
who its client is (forgotten when the actor stops), so a client whose reads an ACL plugin
checks is given only the messages it may read; the retained messages for its new
subscriptions are filtered here with the same cached answers.

Persistent sessions mirror every change into the store (`actors.persistence`): messages
entering or leaving the in-flight window, acknowledgements, subscriptions and the incoming
QoS 2 packet ids. Answers whose promise depends on the store (SUBACK, PUBREC, PUBCOMP) are
written only after the commit.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, cast

import gevent

from actors.context import BrokerContext
from actors.losses import report_loss
from actors.messages import (
    ArrivedHandled,
    Attach,
    AwaitRoutes,
    CloseConnection,
    Deliver,
    DeliverRetained,
    Detach,
    EndForwarding,
    ForwardingEnded,
    HandleArrived,
    HandOff,
    MovedIn,
    MoveOut,
    MoveSettled,
    OrphansIn,
    Reauthorize,
    RemoveRoutes,
    RoutesChanged,
    SendRetained,
    SessionAttached,
    SessionExpired,
    Stalled,
    Terminate,
    WillDue,
)
from actors.persistence import (
    may_commit_lazily,
    session_meta,
    stored_delivery,
    stored_subscriptions,
)
from actors.runtime import GeventActor, tell_if_alive
from channel.actions import (
    Acknowledged,
    InboundQos2,
    Released,
    SubscribeRequest,
    UnsubscribeRequest,
)
from channel.authorization import may_read
from channel.outbound import Outbound
from channel.problems import refusal_ack
from channel.store_refusal import refused_pubrec
from core.client import ClientInfo
from core.flow import Transition
from core.message import Message
from core.move_in import MoveIn, queued_qos0
from core.reasons import DisconnectReason, DropReason
from core.session_state import (
    Action,
    Completed,
    Delivery,
    Dropped,
    ProtocolViolation,
    Revoked,
    SendPublish,
    SendPubrel,
    SessionState,
    Stage,
    SubscriptionOptions,
    TooManyAwaitingRelError,
)
from hooks.events import (
    MessageAcked,
    MessageDelivered,
    MessageDropped,
    SessionEvent,
    SessionSubscribed,
    SessionUnsubscribed,
)
from hooks.hookpoints import HookPoint
from mqtt.encoder import encode, encode_ack, encode_publish
from mqtt.packets import ConnAck, PacketType, SubAck, UnsubAck
from mqtt.reason_codes import ReasonCode
from net.transport import Transport
from router.fan_out import Route
from router.shared import inner_filter, is_shared
from store.base import (
    DeleteMessage,
    DeleteSession,
    MarkInFlight,
    Op,
    PutMessage,
    PutSession,
    StoredSubscription,
)

logger = logging.getLogger(__name__)

# What takes a session from its connection: another connection's Attach, a clean start's
# Terminate (from the registry), a pool's HandOff to another worker.
Takeover = Attach | HandOff | Terminate

_PUBREL = PacketType.PUBREL
_WIRE = itemgetter(4)  # Delivery.wire, read in C
_AWAIT_PUBCOMP = Stage.AWAIT_PUBCOMP.value
_FIRST_STAGE_VALUE = {1: Stage.AWAIT_PUBACK.value, 2: Stage.AWAIT_PUBREC.value}
_MESSAGE_ACKED = HookPoint.MESSAGE_ACKED  # Enum member lookups cost ~0.2 µs on hot paths
_MESSAGE_DELIVERED = HookPoint.MESSAGE_DELIVERED

_PUBCOMP = PacketType.PUBCOMP
_PUBREC = PacketType.PUBREC


class SessionActor(GeventActor):
    # Rarely set, so class-level defaults: an instance with more than 30 attributes loses
    # CPython's shared-key dict, which cost 1.3 KB per idle connection.
    # Takeovers waiting for the connection attached now (`_waits_for_arrived`).
    _takeovers: list[Takeover] | None = None
    _replaced = False  # by a clean start's new session, which owns the stored state

    def __init__(
        self, state: SessionState, context: BrokerContext, protocol_version: int = 4
    ) -> None:
        super().__init__()
        self.state = state
        self._context = context
        self._hooks = context.hooks
        self._client: ClientInfo | None = None
        self._client_ref: Any = None
        self._transport: Transport | None = None
        self._version = protocol_version
        self._out: list[bytes] = []
        self._ops: list[Op] = []  # store ops of the current message, submitted by after_drain
        # The stored form of the subscriptions, rebuilt only after SUBSCRIBE/UNSUBSCRIBE.
        self._stored_subscriptions: dict[str, StoredSubscription] | None = None
        self._persistence = context.persistence
        self._expiry_timer: gevent.Greenlet[..., Any] | None = None
        self._drops: list[Dropped] | None = None  # of the actions being carried out
        self._outbound: Outbound | None = None  # the attached 5.0 connection's PUBLISH writer
        self._will: Message | None = None  # a delayed will waiting for its time
        self._will_timer: gevent.Greenlet[..., Any] | None = None
        self._flow = context.flow
        self._load = context.flow.new_load(self.actor_ref)
        self._reads = context.dispatcher.read_checks  # who may read what is delivered here
        self._held_bytes = _payload_bytes(state)  # of the in-flight window and the queue
        bound = context.queue_bounds.get(state.client_id) if context.queue_bounds else None
        if bound is not None:  # a bridge's session (`_account`)
            state.max_queued = bound[0]
        # Pool (docs/pool.md "Deliveries during a move"): moving in from another worker
        # (set before launch), or moved away and forwarding what still reaches it.
        self.move_in: MoveIn | None = None
        self._writes_waiting = 0  # writes that wait for a commit (`after_drain`)
        self._move_out: MoveOut | None = None
        # The last user of a session that moved in (the store keeps no username).
        self.moved_user: str | None = None
        self.moved_user_known = False

    def moving_in(self, username: str | None, user_known: bool) -> None:
        """Before launch: this session, just loaded, is moving in from another worker whose
        last user was `username` (if `user_known`)."""
        state = self.state
        self.move_in = MoveIn(
            [*(state.queue or ()), *(e.delivery for e in state.inflight.values())]
        )
        self.moved_user, self.moved_user_known = username, user_known
        state.max_queued = 0  # not offline: its client is attaching (see `_account`)

    def on_receive(self, message: Any) -> Any:
        if self._move_out is not None:
            return self._while_moved_away(message)
        return _MESSAGE_HANDLERS[type(message)](self, message)

    def on_stop(self) -> None:
        self._reads.forget(self.actor_ref)  # however it ended: terminated, moved away

    def after_drain(self) -> None:
        gated = False
        if self._ops:
            ops, self._ops = self._ops, []
            lazy = may_commit_lazily(ops)
            if lazy or not self._out:
                self._persistence.submit(ops, lazy=lazy)
            else:
                # A QoS 2 stage (or another prompt op) with bytes to send: they go out
                # once it is committed, so a PUBLISH or PUBREL is never on the wire before
                # its packet id and stage are stored: after a crash the restored session
                # resends exactly what the client saw [MQTT-4.3.3-1] [MQTT-4.4.0-1].
                self._write_when_committed(ops)
                gated = True
        if self._out and not gated:
            if self._transport is not None:
                if self._writes_waiting:  # keep the order of what waits for a commit
                    self._write_when_committed([])
                    return
                data = b"".join(self._out)
                self._context.stats.bytes_sent += len(data)
                self._transport.write(data)
            self._out.clear()

    def _write_when_committed(self, ops: list[Op]) -> None:
        """Submit `ops` and write what is in `_out` once they (and all before) are committed."""
        data = b"".join(self._out)
        self._out.clear()
        transport = self._transport
        self._writes_waiting += 1

        def committed() -> None:
            self._writes_waiting -= 1
            if transport is not None:
                self._context.stats.bytes_sent += len(data)
                transport.write(data)

        self._persistence.submit(ops, committed)

    @property
    def _stored(self) -> bool:
        return self.state.persistent and self._persistence.enabled and not self._replaced

    def _when_durable(
        self, ops: list[Op], data: bytes, then: Callable[[], None] | None = None
    ) -> None:
        """Write `data` to the current connection once `ops` (and all before) are committed,
        then call `then`."""
        if not self._persistence.enabled:
            self._out.append(data)
            if then is not None:
                then()
            return
        self.after_drain()  # earlier ops and bytes go first
        transport = self._transport

        def committed() -> None:
            if transport is not None:
                transport.write(data)
            if then is not None:
                then()

        self._persistence.submit(ops, committed)

    def _meta_op(self, disconnected_at: float | None = None) -> PutSession:
        if self._stored_subscriptions is None:
            self._stored_subscriptions = stored_subscriptions(self.state)
        meta = session_meta(self.state, self._version, disconnected_at, self._stored_subscriptions)
        return PutSession(self.state.client_id, meta)

    # ----- connection binding ---------------------------------------------------------

    def _attach(self, attach: Attach) -> None:
        if not self._waits_for_arrived(attach):
            self._attach_now(attach)

    def _attach_now(self, attach: Attach) -> None:
        previous = self._client_ref
        if previous is not None and previous is not attach.client_ref:
            # Takeover: the older connection is closed as for any non-DISCONNECT close,
            # so its will is published [MQTT-3.1.4-2].
            tell_if_alive(previous, CloseConnection(DisconnectReason.TAKEN_OVER))
        self._out.clear()
        if attach.session_present:
            # Whoever resumes the session gets only what its own identity may read: the
            # subscriptions and queued messages are re-checked against the ACL for it.
            self._reauthorize(attach.client)
        self._client = attach.client
        self._reads.identify(self.actor_ref, attach.client)  # whose reads are checked
        self._client_ref = attach.client_ref
        self._transport = attach.transport
        client = attach.client
        self._version = client.protocol_version
        self._outbound = Outbound(client) if self._version >= 5 else None
        self._keep(client.keeps_session, client.session_expiry)
        # Never more unacknowledged PUBLISHes than the client's Receive Maximum [MQTT-3.3.4-9]
        self.state.max_inflight = min(self._context.limits.max_inflight, client.receive_maximum)
        self._load.enabled = self._flow.enabled
        self._cancel_expiry()
        if self._will is not None:
            # Resumed before the will delay passed: the will is not sent [MQTT-3.1.3-9].
            logger.info("session %r resumed: its delayed will is discarded", client.client_id)
            self._cancel_will()
        if self._stored:
            self._ops.append(self._meta_op())
        connack = ConnAck(
            session_present=attach.session_present,
            reason_code=0,
            properties=attach.connack_properties,
        )
        self._out.append(encode(connack, self._version))
        # In-flight messages resent in their original order, PUBLISH with DUP=1
        # [MQTT-4.4.0-1], then the queue as the window allows.
        self._carry_out(self.state.resume(time.time()))
        self._account()
        self.after_drain()
        tell_if_alive(
            attach.client_ref,
            SessionAttached(
                self.actor_ref, attach.session_present, frozenset(self.state.awaiting_rel)
            ),
        )
        point = HookPoint.SESSION_RESUMED if attach.session_present else HookPoint.SESSION_CREATED
        if self._hooks.has(point):
            self._hooks.run(point, SessionEvent(client_id=self.state.client_id))

    def _reauthorize_on_reload(self, _request: Reauthorize) -> int:
        if self._client is None:
            return 0  # restored from the store and not resumed yet: checked on resume
        return len(self._reauthorize(self._client))

    def _reauthorize(self, client: ClientInfo) -> list[str]:
        """Drop the subscriptions and undelivered messages the ACL denies `client`."""
        if not self._hooks.has(HookPoint.CLIENT_AUTHORIZE):
            return []
        decided: dict[tuple[str, int], bool] = {}

        def readable(topic: str, qos: int) -> bool:
            answer = decided.get((topic, qos))
            if answer is None:
                # A shared subscription reads the filter after its share name.
                answer = may_read(self._hooks, client, inner_filter(topic), qos)
                decided[topic, qos] = answer
            return answer

        owner = self._client
        known, previous = self.moved_user_known, self.moved_user  # restored: none known
        if owner is not None:
            known, previous = True, owner.username
        if known and previous != client.username:
            logger.warning(
                "session %r of user %r taken by user %r: its subscriptions and queued "
                "messages are re-authorised for the new user",
                self.state.client_id,
                previous,
                client.username,
            )
        actions = self.state.keep_readable(readable)
        revoked = [action.topic_filter for action in actions if type(action) is Revoked]
        if revoked:
            logger.warning(
                "session %r: the ACL denies user %r %d of its subscriptions; revoked: %s",
                self.state.client_id,
                client.username,
                len(revoked),
                ", ".join(repr(f) for f in revoked[:10]) + (" ..." if len(revoked) > 10 else ""),
            )
            self._stored_subscriptions = None
            if self._stored:
                self._ops.append(self._meta_op())
            self._context.router.tell(
                RemoveRoutes(self.state.client_id, revoked, session=self.actor_ref)
            )
        self._carry_out(actions)  # the hook for each Revoked filter; the drops
        return revoked

    def _detach(self, detach: Detach) -> None:
        if detach.client_ref is not self._client_ref:
            return  # an older connection that was taken over
        self.after_drain()
        self._client_ref = None
        self._transport = None
        self._outbound = None
        if detach.session_expiry is not None:  # a 5.0 DISCONNECT changed it (section 3.14.2.2.2)
            self._keep(detach.session_expiry > 0, detach.session_expiry)
        if detach.will is not None:
            self._will = detach.will
            self._will_timer = gevent.spawn_later(
                detach.will_delay, tell_if_alive, self.actor_ref, WillDue()
            )
        self._flow.over.pop(self._load, None)
        self._load.disable()  # offline: the bound and drop policy apply, nobody waits on it
        if not self.state.persistent:
            self._terminate(Terminate(reason="clean_session"))
            return
        self._hand_over_shared(ending=False)  # before the bounds: shared ones move, not drop
        self._account()  # what is queued beyond the offline bounds is dropped now
        if self._stored:
            self._ops.append(self._meta_op(disconnected_at=time.time()))
        self.start_expiry_timer(self.state.expiry)
        self._go_on()  # the connection is gone: a takeover waiting for it goes on

    def _keep(self, persistent: bool, expiry: float) -> None:
        """Set whether the session outlives its connection, and for how long. A stored
        session that no longer does is deleted from the store now: once not persistent it
        writes nothing more, and a stale record would bring it back after a restart, or to
        the worker of a pool that resumes the id from the store."""
        if self._stored and not persistent:
            self._ops.append(DeleteSession(self.state.client_id))
        self.state.persistent = persistent
        self.state.expiry = expiry

    def start_expiry_timer(self, seconds: float) -> None:
        """Terminate this detached session after `seconds` (math.inf: never expires)."""
        self._cancel_expiry()
        if 0 < seconds < math.inf:
            self._expiry_timer = gevent.spawn_later(
                seconds, tell_if_alive, self.actor_ref, SessionExpired()
            )

    def _will_due(self, _due: WillDue) -> None:
        self._will_timer = None
        self._publish_will()

    def _publish_will(self) -> None:
        """Publish the delayed will now (its delay passed, or the session ends)."""
        will, self._will = self._will, None
        if will is not None and self._client_ref is None:
            logger.info(
                "session %r: publishing its delayed will on %r", self.state.client_id, will.topic
            )
            self._context.dispatcher.publish([will])

    def _cancel_will(self) -> None:
        self._will = None
        if self._will_timer is not None:
            self._will_timer.kill(block=False)
            self._will_timer = None

    def _cancel_expiry(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.kill(block=False)
            self._expiry_timer = None

    def _expired(self, _expired: SessionExpired) -> None:
        if self._client_ref is None:
            logger.info("session %r expired", self.state.client_id)
            self._terminate(Terminate(reason="expired"))

    def _terminate(self, terminate: Terminate) -> None:
        waiting = self._takeovers
        if waiting is not None:  # (rare: no attribute written, no list made, on every end)
            self._takeovers = None
            # A clean start that waited is why the session ends.
            terminate = next((t for t in waiting if type(t) is Terminate), terminate)
        self._cancel_expiry()
        self._hand_over_shared(ending=True)
        if self._will is not None:
            self._publish_will()  # the session ends before the will delay [MQTT-3.1.3-9]
            self._cancel_will()
        self._flow.forget(self.actor_ref)
        if self._stored:
            self._ops.append(DeleteSession(self.state.client_id))
        self.after_drain()
        if self._client_ref is not None:
            tell_if_alive(
                self._client_ref,
                CloseConnection(DisconnectReason.TAKEN_OVER, session_ended=True),
            )
        filters = list(self.state.subscriptions)
        if filters:
            self._context.router.tell(
                RemoveRoutes(self.state.client_id, filters, session=self.actor_ref)
            )
        self._context.registry.ended(self.state.client_id, self.actor_ref)
        for takeover in waiting or ():
            if type(takeover) is HandOff:  # the claimant finds none, once the delete is in
                self._persistence.submit((), takeover.then)
            elif type(takeover) is Attach and self._replaced:
                # A clean start that came after it owns the id: taken over by that one.
                tell_if_alive(takeover.client_ref, CloseConnection(DisconnectReason.TAKEN_OVER))
            elif type(takeover) is Attach:  # it opens as if this session had not been there
                self._context.registry.attach(takeover)
        if self._hooks.has(HookPoint.SESSION_TERMINATED):
            self._hooks.run(
                HookPoint.SESSION_TERMINATED,
                SessionEvent(client_id=self.state.client_id, reason=terminate.reason),
            )
        self.stop()

    def _clean_start(self, terminate: Terminate) -> None:
        """The registry replaced this session by a clean start's [MQTT-3.1.2-4]. Its stored
        state goes now, before the new session writes its own, and it writes nothing more;
        the connection may still have to handle what it received (`_waits_for_arrived`)."""
        if self._stored:
            self._ops.append(DeleteSession(self.state.client_id))
            self.after_drain()
        self._replaced = True
        if not self._waits_for_arrived(terminate):
            self._terminate(terminate)

    def _hand_off(self, hand_off: HandOff) -> None:
        if not self._waits_for_arrived(hand_off):
            self._give_up(hand_off)

    def _waits_for_arrived(self, takeover: Takeover) -> bool:
        """Whether `takeover` waits until the connection attached now has handled what it
        already received. Its client sent that before it connected again, so it counts
        first: a DISCONNECT in it may end the session (section 3.14.2.2.2), and it
        discards the will [MQTT-3.14.4-3]. The client actor answers `ArrivedHandled`, or
        ends the connection (`_detach`). Takeovers that come meanwhile wait behind, each
        for the connection attached before it; a session that ends meanwhile passes them
        on (`_terminate`)."""
        waiting = self._takeovers
        if waiting is not None:
            waiting.append(takeover)
            return True
        client = self._client_ref
        if client is None or (type(takeover) is Attach and takeover.client_ref is client):
            return False
        if not tell_if_alive(client, HandleArrived(self.actor_ref)):
            # The connection ended, and its Detach is in this mailbox already: the takeover
            # goes on after it.
            self.actor_ref.tell(ArrivedHandled(client))
        self._takeovers = [takeover]
        return True

    def _arrived_handled(self, handled: ArrivedHandled) -> None:
        if handled.client_ref is self._client_ref:
            self._go_on()

    def _go_on(self) -> None:
        """The connection handled what it had received, or ended: the first waiting
        takeover goes on. The later ones stay where `_terminate` finds them while it does,
        then come again, each to wait for the connection attached before it."""
        waiting = self._takeovers
        if waiting is None:
            return
        first = waiting.pop(0)
        self._takeovers = waiting or None
        if isinstance(first, Attach):
            self._attach_now(first)
        elif isinstance(first, HandOff):
            self._give_up(first)
        else:
            self._terminate(first)
        later, self._takeovers = self._takeovers, None
        for takeover in later or ():
            self.actor_ref.tell(takeover)

    def _give_up(self, hand_off: HandOff) -> None:
        """Pool: a connection on another worker takes this session (docs/pool.md). The
        connection here is closed as in any takeover (its will is published
        [MQTT-3.1.4-2]); the state is left in the store for the new owner, which resumes it
        from there. A stored session keeps its routes and forwards what still reaches it to
        the new owner (`hand_off.move`) until `EndForwarding`."""
        if hand_off.discard:
            self._terminate(Terminate(reason="clean_start"))  # deletes it [MQTT-3.1.2-4]
        else:
            self._cancel_expiry()
            # Leaving this worker: publishers it holds resume, and the load is not kept.
            self._flow.forget(self.actor_ref)
            move = hand_off.move if self._stored else None
            if move is not None:
                client = self._client
                known = client is not None or self.moved_user_known
                user = client.username if client is not None else self.moved_user
                move.begin(user, known, *queued_qos0(self.state.queue))
            if self._stored:
                self._ops.append(self._meta_op(disconnected_at=time.time()))
            self.after_drain()
            if self._client_ref is not None:
                tell_if_alive(self._client_ref, CloseConnection(DisconnectReason.TAKEN_OVER))
            self._client_ref = self._transport = None
            self._context.registry.ended(self.state.client_id, self.actor_ref)
            if move is None:
                self._leave_routes(None)
                self.stop()
            else:
                self._move_out = move
        self._persistence.submit((), hand_off.then)

    def _leave_routes(self, reply_to: Any) -> None:
        filters = list(self.state.subscriptions)
        if filters or reply_to is not None:
            self._context.router.tell(
                RemoveRoutes(
                    self.state.client_id,
                    filters,
                    session=self.actor_ref,
                    reply_to=reply_to,
                    token=_FORWARDING_ENDS,
                )
            )

    def _while_moved_away(self, message: Any) -> None:
        """Moved to another worker: forward deliveries once their puts are committed (the
        new owner may have loaded them: it knows them by seq); leave the routes when told,
        and end once the router has (`_FORWARDING_ENDS`). Nothing else concerns this
        session any more: its connection is closed and its state is the new owner's."""
        move = self._move_out
        assert move is not None
        kind = type(message)
        if kind is Deliver or kind is DeliverRetained or kind is OrphansIn:
            deliveries = message.deliveries
            self._persistence.submit((), lambda: move.forward(deliveries))
        elif kind is EndForwarding:
            self._leave_routes(self.actor_ref)
        elif kind is RoutesChanged and message.token is _FORWARDING_ENDS:
            self._persistence.submit((), move.end)
            self.stop()

    # ----- outgoing messages ----------------------------------------------------------

    def _deliver(self, deliver: Deliver) -> None:
        deliveries = deliver.deliveries
        if self.move_in is not None:
            deliveries, duplicates = self.move_in.direct(deliveries)
            self._drop_duplicates(duplicates)
            if not deliveries:
                return
        self._deliver_now(deliveries)

    def _deliver_retained(self, deliver: DeliverRetained) -> None:
        # What waits goes to the socket first, so that the write bound sees it: a client
        # asking for the retained store again and again without reading has the QoS 0
        # messages of the later bursts dropped, not piled up (docs/overload.md).
        self.after_drain()
        self._deliver_now(self._retained_readable(deliver.deliveries))

    def _retained_readable(self, deliveries: list[Delivery]) -> list[Delivery]:
        """The retained messages for a new subscription that its client may read, when its
        reads are checked (a wildcard granted beside a deny rule); the others are not sent,
        as Mosquitto does not send them."""
        reads = self._reads
        client = reads.client_of(self.actor_ref)
        if client is None:
            return deliveries
        return [d for d in deliveries if reads.may_read(client, d.message.topic)]

    def _deliver_now(self, deliveries: list[Delivery]) -> None:
        transport = self._transport
        connected = transport is not None
        slow = (
            transport is not None
            and transport.backlog_bytes > self._context.limits.max_write_buffer
        )
        if not connected:
            deliveries = self._give_back_shared(deliveries)
        actions = self.state.deliver(deliveries, connected, drop_qos0=slow or self._load.stalled)
        # Hot path: a QoS 0 delivery to a 3.x client is written as its shared encoding.
        plain = self._version < 5 and not self._hooks.has(_MESSAGE_DELIVERED)
        if plain and actions is deliveries:  # all QoS 0, sent now (see SessionState.deliver)
            wires = list(map(_WIRE, deliveries))
            if None not in wires:
                self._out += wires
                self._context.stats.messages_sent += len(wires)
                return
        # Every delivery is held until an action lets it go (sent as QoS 0, completed, dropped).
        self._held_bytes += sum([len(delivery.message.payload) for delivery in deliveries])
        self._carry_out(actions)
        self._account()

    # ----- moving in from another worker (pool) ----------------------------------------

    def _moved_in(self, moved: MovedIn) -> None:
        """Deliveries the previous owner forwarded: after what the store had, in order."""
        move_in = self.move_in
        if move_in is None:  # not expected (the pool stops forwarding before it settles)
            self._deliver_now(self._readable(moved.deliveries))  # rather than lose them
            return
        fresh = move_in.forwarded(moved.deliveries)
        if self._stored:
            fresh = [self._stored_here(delivery) for delivery in fresh]
        self._deliver_now(self._readable(fresh))

    def _orphans_in(self, orphans: OrphansIn) -> None:
        """Messages kept for this session while its worker was dead (it was adopted from
        there): after what the store had, less what it has already (`MoveIn.orphaned`)."""
        deliveries = orphans.deliveries
        if self.move_in is not None:
            deliveries, duplicates = self.move_in.orphaned(deliveries)
            self._drop_duplicates(duplicates)
        self._deliver_now(self._readable(deliveries))

    def _stored_here(self, delivery: Delivery) -> Delivery:
        """A forwarded delivery as this session stores it: one the previous owner stored
        keeps its seq (its put is committed), so new ones order after it; a QoS 1/2 one it
        did not store gets a seq and a put here."""
        persistence = self._persistence
        if delivery.seq:
            persistence.advance_past(delivery.seq)
            return delivery
        if not delivery.qos:
            return delivery
        delivery = delivery._replace(seq=persistence.next_seq())
        self._ops.append(PutMessage(self.state.client_id, delivery.seq, stored_delivery(delivery)))
        return delivery

    def _readable(self, deliveries: list[Delivery]) -> list[Delivery]:
        """Forwarded deliveries the attached client may read (a new user may have resumed
        the session: `_reauthorize`); the others are dropped."""
        client = self._client
        if client is None or not deliveries or not self._hooks.has(HookPoint.CLIENT_AUTHORIZE):
            return deliveries
        keep = []
        denied = []
        for delivery in deliveries:
            if may_read(self._hooks, client, delivery.message.topic, delivery.qos):
                keep.append(delivery)
            else:
                denied.append(Dropped(delivery, DropReason.NOT_AUTHORIZED))
        if denied:
            self._drops = denied
            self._report_dropped()
        return keep

    def _forwarding_ended(self, ended: ForwardingEnded) -> None:
        """The previous owner forwards nothing more: the deliveries held meanwhile go now,
        but for the duplicates of forwarded ones."""
        if self.move_in is None:
            return
        deliveries, duplicates = self.move_in.end()
        self._drop_duplicates(duplicates)
        logger.info(
            "session %r moved in from worker %d: %d deliveries forwarded, %d held meanwhile, "
            "%d duplicates dropped",
            self.state.client_id,
            ended.source,
            self.move_in.forwarded_count,
            len(deliveries) + len(duplicates),
            len(duplicates),
        )
        if deliveries:
            self._deliver_now(self._readable(deliveries))

    def _move_settled(self, _settled: MoveSettled) -> None:
        self.move_in = None

    def _drop_duplicates(self, duplicates: list[Delivery]) -> None:
        """Copies of deliveries the session already has: not delivered, and their stored
        copies (put by this worker's dispatcher) deleted."""
        if self._stored:
            for delivery in duplicates:
                if delivery.seq:
                    self._store_deleted(delivery.seq)

    def _account(self) -> None:
        """Publish the load to flow control; apply the bound and drop policy when flow
        control does not hold this session (offline, stuck, or flow control off)."""
        state = self.state
        load = self._load
        queue = state.queue
        transition = load.update(
            len(state.inflight) + (len(queue) if queue else 0), self._held_bytes, time.monotonic()
        )
        if transition is not None:
            if transition is Transition.OVER:
                self._flow.went_over(self.actor_ref, load, state.client_id)
            else:
                self._flow.drained(load, state.client_id)
        if (load.enabled and not load.stalled) or self.move_in is not None:
            # Flow control bounds it: its publishers pause. A session moving in from another
            # worker is not offline: its client is attaching, as in a takeover on one worker.
            state.max_queued = 0
            return
        bounds = self._context.queue_bounds
        bound = bounds.get(state.client_id) if bounds else None
        if bound is None:
            limits = self._context.limits
            state.max_queued, max_bytes = limits.max_queued_messages, limits.max_queued_bytes
        else:
            state.max_queued, max_bytes = bound
        excess = self._held_bytes - max_bytes if max_bytes else 0
        if (queue and state.max_queued and len(queue) > state.max_queued) or excess > 0:
            self._carry_out(state.shed(state.max_queued, excess, qos0=False))

    def _stalled(self, _stalled: Stalled) -> None:
        """Over the high-water mark without progress for max_stall: a stuck subscriber."""
        load = self._load
        if not load.over:
            return  # drained or detached meanwhile
        load.stall()
        self._context.stats.stalls += 1
        logger.warning(
            "slow consumer: session %r made no progress for %.0f s with %d messages held "
            "([overload] max_stall): its publishers run again, its QoS 0 messages are "
            "dropped and its queue falls back to limits.max_queued_messages / "
            "max_queued_bytes, drop oldest",
            self.state.client_id,
            self._flow.config.max_stall,
            load.messages,
        )
        self._carry_out(self.state.shed(0, 0, qos0=True))
        self._account()
        self.after_drain()

    def _give_back_shared(self, deliveries: list[Delivery]) -> list[Delivery]:
        """The client is offline: shared deliveries go to another member if one can take
        them; the rest (and the ones nobody else takes) stay here."""
        shared = [delivery for delivery in deliveries if delivery.share is not None]
        if not shared:
            return deliveries
        left = self._context.dispatcher.redispatch(shared, self.state.client_id)
        self._forget_moved(shared, left)
        return [delivery for delivery in deliveries if delivery.share is None] + left

    def _hand_over_shared(self, ending: bool) -> None:
        """The client went (or the session ends): hand the shared deliveries it has not
        received to other members (`SessionState.take_shared`). What nobody else takes
        stays queued, or, when the session ends, is dropped like the rest of it."""
        taken = self.state.take_shared(in_flight=ending)
        if not taken:
            return
        left = self._context.dispatcher.redispatch(taken, self.state.client_id)
        self._forget_moved(taken, left)
        if ending:
            return  # the session's stored messages go with it (DeleteSession)
        self._carry_out(self.state.deliver(left, connected=False))

    def _forget_moved(self, given: list[Delivery], left: list[Delivery]) -> None:
        """The stored copies of the deliveries another member took are this session's no
        more."""
        if self._stored and len(left) < len(given):
            kept = {id(delivery) for delivery in left}
            for delivery in given:
                if delivery.seq and id(delivery) not in kept:
                    self._store_deleted(delivery.seq)

    def _carry_out(self, actions: Sequence[Action]) -> None:
        """Do what the session state asked for, in order; then report the drops.

        The two sends of the delivery hot path are handled inline: a QoS 1/2 PUBLISH, and a
        QoS 0 delivery to a 3.x client written as its shared encoding; every other action
        goes to its handler in `_ACTION_HANDLERS`.
        """
        plain = self._version < 5 and not self._hooks.has(_MESSAGE_DELIVERED)
        handlers = _ACTION_HANDLERS
        out = self._out
        sent = 0
        for action in actions:
            if type(action) is SendPublish:
                delivery = action.delivery
                data = self._encode(action.packet_id, delivery, action.dup)
                if data is None:
                    continue  # not sendable: discarded from the window and reported
                if action.dup:  # a resend: recorded, counted and reported when first sent
                    out.append(data)
                    continue
                if delivery.seq and self._stored:
                    self._store_in_flight(
                        action.packet_id, delivery, _FIRST_STAGE_VALUE[delivery.qos]
                    )
                out.append(data)
                sent += 1
                if not plain and self._hooks.has(_MESSAGE_DELIVERED):
                    self._delivered_hook(delivery)
            elif plain and type(action) is Delivery and action.wire is not None:
                out.append(action.wire)
                self._held_bytes -= len(action.message.payload)
                sent += 1
            else:
                handlers[type(action)](self, action)
        self._context.stats.messages_sent += sent
        if self._drops:
            self._report_dropped()

    def _send_qos0(self, delivery: Delivery) -> None:
        self._held_bytes -= len(delivery.message.payload)
        data = self._encode(0, delivery)
        if data is None:
            return
        self._out.append(data)
        self._context.stats.messages_sent += 1
        if self._hooks.has(_MESSAGE_DELIVERED):
            self._delivered_hook(delivery)

    def _send_pubrel(self, action: SendPubrel) -> None:
        packet_id = action.packet_id
        delivery = action.delivery
        if delivery is not None and delivery.seq and self._stored:
            self._store_in_flight(packet_id, delivery, _AWAIT_PUBCOMP)
        if action.found:
            self._out.append(encode_ack(_PUBREL, packet_id, ReasonCode.SUCCESS, self._version))
        else:
            self._out.append(self._unknown_packet_id(_PUBREL, packet_id))

    def _unknown_packet_id(self, packet_type: int, packet_id: int) -> bytes:
        """PUBREL/PUBCOMP 0x92 Packet Identifier not found, saying so to a 5.0 client that
        asked for problem information (3.x: the plain acknowledgement)."""
        assert self._client is not None
        why = f"packet identifier {packet_id} not found"
        code = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
        return refusal_ack(packet_type, packet_id, code, why, self._client)

    def _completed(self, action: Completed) -> None:
        delivery = action.delivery
        self._held_bytes -= len(delivery.message.payload)
        if delivery.seq and self._stored:
            self._store_deleted(delivery.seq)
        if self._hooks.has(_MESSAGE_ACKED):
            self._hooks.run(
                _MESSAGE_ACKED,
                MessageAcked(
                    client_id=self.state.client_id,
                    username=self._client.username if self._client else None,
                    message=delivery.message,
                ),
            )

    def _dropped(self, action: Dropped) -> None:
        self._held_bytes -= len(action.delivery.message.payload)
        if self._drops is None:
            self._drops = []
        self._drops.append(action)

    def _protocol_violation(self, action: ProtocolViolation) -> None:
        """The client acknowledged a delivery with an ack that does not fit it: its
        connection is closed as a Protocol Error (5.0: DISCONNECT 0x82 saying why)."""
        if self._client_ref is None:
            return  # the connection is gone already
        logger.warning(
            "closing client %r: protocol violation: %s", self.state.client_id, action.why
        )
        tell_if_alive(
            self._client_ref, CloseConnection(DisconnectReason.PROTOCOL_ERROR, detail=action.why)
        )

    def _revoked(self, action: Revoked) -> None:
        # The batch (routes, stored subscriptions, log line) is handled by _reauthorize.
        if self._hooks.has(HookPoint.SESSION_UNSUBSCRIBED):
            self._hooks.run(
                HookPoint.SESSION_UNSUBSCRIBED,
                SessionUnsubscribed(
                    client_id=self.state.client_id, topic_filter=action.topic_filter
                ),
            )

    def _store_in_flight(self, packet_id: int, delivery: Delivery, stage: str) -> None:
        last = self._ops[-1] if self._ops else None
        if type(last) is MarkInFlight and last.stage == stage:  # one op per run
            last.marks.append((delivery.seq, packet_id))
        else:
            self._ops.append(MarkInFlight(self.state.client_id, stage, [(delivery.seq, packet_id)]))

    def _store_deleted(self, seq: int) -> None:
        last = self._ops[-1] if self._ops else None
        if type(last) is DeleteMessage:  # one op per run
            last.seqs.append(seq)
        else:
            self._ops.append(DeleteMessage(self.state.client_id, [seq]))

    def _encode(self, packet_id: int, delivery: Delivery, dup: bool = False) -> bytes | None:
        """The PUBLISH of `delivery`; None if a 5.0 client cannot be sent it (expired, too
        large): then it is discarded as if delivered [MQTT-3.1.2-25] and reported dropped."""
        outbound = self._outbound
        if outbound is None:  # 3.x: no properties, and the shared QoS 0 encoding if any
            if delivery.wire is not None:
                return delivery.wire
            message = delivery.message
            return encode_publish(
                message.topic,
                message.payload,
                delivery.qos,
                delivery.retain,
                dup,
                packet_id or None,
                None,
                self._version,
            )
        now = time.time()
        data = outbound.publish(delivery, packet_id or None, dup, now)
        if type(data) is bytes:
            return data
        self._dropped(Dropped(delivery, cast(DropReason, data)))
        if packet_id:
            self._carry_out(self.state.discard(packet_id, self._transport is not None, now))
        return None

    def _acknowledged(self, acknowledged: Acknowledged) -> None:
        self._carry_out(
            self.state.acknowledge(
                acknowledged.acks, connected=self._transport is not None, now=time.time()
            )
        )
        load = self._load
        if load.over or load.stalled:
            load.progressed(time.monotonic())
        self._account()
        if acknowledged.intake is not None:
            acknowledged.intake.done(len(acknowledged.acks), acknowledged.size)

    # ----- incoming QoS 2 -------------------------------------------------------------

    def _inbound_qos2(self, inbound: InboundQos2) -> None:
        if self._persistence.failing and (
            self._stored
            or self._context.dispatcher.needs_store(
                [message for _id, message, _pubrec in inbound.publishes if message is not None]
            )
        ):
            self._refuse_qos2_for_store(inbound)
            return
        to_route, pubrecs = self._admit_qos2(inbound)
        # PUBREC promises exactly-once: the awaiting-PUBREL id and the routed copies must be
        # durable first, those on other workers of a pool too (the dispatcher's callback
        # waits for their commits). The id's op goes first, so one commit covers both.
        ops: list[Op] = [self._meta_op()] if self._stored and pubrecs else []
        if ops:
            self.after_drain()  # earlier ops and bytes go first
            self._persistence.submit(ops)
        transport = self._transport

        def routed() -> None:
            if transport is not None:
                transport.write(b"".join(pubrecs))  # as amended below for 0x10

        unmatched: set[int] = set()
        routed_durably = bool(to_route) and self._context.dispatcher.publish(
            to_route, routed if pubrecs else None, inbound.publisher, unmatched=unmatched
        )
        if unmatched and self._version >= 5:
            _mark_unmatched(inbound, pubrecs, unmatched)
        if pubrecs and not routed_durably:
            if ops:
                self._when_durable([], b"".join(pubrecs))
            else:
                self._out.extend(pubrecs)

    def _admit_qos2(self, inbound: InboundQos2) -> tuple[list[Message], list[bytes]]:
        """The new messages of `inbound` to route and the PUBRECs to send, in order: a
        packet id already awaiting PUBREL is acknowledged again, not routed again."""
        to_route: list[Message] = []
        pubrecs: list[bytes] = []
        v5 = self._version >= 5
        for packet_id, message, pubrec in inbound.publishes:
            if message is None and v5 and packet_id not in self.state.awaiting_rel:
                # A refusing PUBREC (0x80 or more) ends the exchange: the id is not kept, so
                # a PUBLISH that uses it again is a new message [MQTT-4.3.3-9].
                pubrecs.append(pubrec)
                continue
            try:
                is_new = self.state.receive_qos2(packet_id)
            except TooManyAwaitingRelError as error:
                if v5:  # 5.0 can refuse the one message instead (section 3.5.2.1)
                    logger.warning("%s: refused with PUBREC 0x97", error)
                    assert self._client is not None
                    pubrecs.append(
                        refusal_ack(
                            _PUBREC,
                            packet_id,
                            ReasonCode.QUOTA_EXCEEDED,
                            f"quota exceeded: {error}",
                            self._client,
                        )
                    )
                    continue
                logger.warning("closing %s: %s", self.state.client_id, error)
                tell_if_alive(
                    self._client_ref,
                    CloseConnection(DisconnectReason.PROTOCOL_ERROR, detail=str(error)),
                )
                break
            if is_new and message is not None:
                to_route.append(message)
            # Method B of [MQTT-4.3.3-2]: PUBREC now, never route the same packet id twice.
            pubrecs.append(pubrec)
        return to_route, pubrecs

    def _refuse_qos2_for_store(self, inbound: InboundQos2) -> None:
        """The store fails (docs/overload.md): a 5.0 client gets PUBREC 0x97 for each new
        QoS 2 message (the exchange ends there, nothing is recorded), a 3.x client is closed
        and resends on its next connection."""
        logger.warning(
            "the store fails (see its errors): refused %d QoS 2 publishes from %r %s; they are "
            "accepted again once the store commits (free disk space)",
            len(inbound.publishes),
            self.state.client_id,
            "with PUBREC 0x97" if self._version >= 5 else "by closing its MQTT 3.x connection",
        )
        if self._version < 5:
            tell_if_alive(
                self._client_ref, CloseConnection(DisconnectReason.STORE_FAILING, "store fails")
            )
            return
        for packet_id, _message, pubrec in inbound.publishes:
            if packet_id in self.state.awaiting_rel:
                self._out.append(pubrec)  # accepted before the store failed: still true
            else:
                assert self._client is not None
                self._out.append(refused_pubrec(packet_id, self._client))

    def _released(self, released: Released) -> None:
        version = self._version
        pubcomps = b"".join(
            encode_ack(_PUBCOMP, packet_id, ReasonCode.SUCCESS, version)
            if self.state.release(packet_id)
            # 5.0: 0x92 Packet Identifier not found for an id not awaiting PUBREL
            else self._unknown_packet_id(_PUBCOMP, packet_id)
            for packet_id in released.packet_ids
        )
        if self._stored:
            # A stale awaiting-PUBREL id restored after a crash would swallow the client's
            # next message with that id: PUBCOMP only once its removal is durable.
            self._when_durable([self._meta_op()], pubcomps)
        else:
            self._out.append(pubcomps)

    # ----- subscriptions --------------------------------------------------------------

    def _subscribe(self, request: SubscribeRequest) -> None:
        codes: list[int] = []
        routes: list[tuple[str, Route]] = []
        retained_for: list[tuple[str, SubscriptionOptions]] = []
        granted = iter(request.granted())
        for index, subscription in enumerate(request.subscriptions):
            refused = request.refused.get(index)
            if refused is not None:
                codes.append(refused)
                continue
            options = next(granted)[1]
            is_new = self.state.subscribe(subscription.topic_filter, options)
            self._stored_subscriptions = None
            route = Route(self.actor_ref, options, self.state.persistent)
            routes.append((subscription.topic_filter, route))
            codes.append(subscription.qos)
            # Retain Handling (MQTT 5): 0 always, 1 only for a new subscription, 2 never;
            # never for a shared subscription [MQTT-4.8.2-6].
            wants_retained = options.retain_handling == 0 or (
                options.retain_handling == 1 and is_new
            )
            if wants_retained and not is_shared(subscription.topic_filter):
                retained_for.append((subscription.topic_filter, options))
            if self._hooks.has(HookPoint.SESSION_SUBSCRIBED):
                self._hooks.run(
                    HookPoint.SESSION_SUBSCRIBED,
                    SessionSubscribed(
                        client_id=self.state.client_id,
                        topic_filter=subscription.topic_filter,
                        qos=subscription.qos,
                    ),
                )
        suback = SubAck(request.packet_id, codes, request.suback_properties or {})
        token = (suback, retained_for)
        if routes:
            if not request.routed:  # the client actor could not: written in this order
                self._context.routes.add(self.state.client_id, routes)
            # The SUBACK once every worker of a pool knows the routes.
            self._context.router.tell(AwaitRoutes(self.actor_ref, token))
        else:
            self._routes_changed(RoutesChanged(token))

    def _unsubscribe(self, request: UnsubscribeRequest) -> None:
        codes: list[int] = []
        for topic_filter in request.topic_filters:
            existed = self.state.unsubscribe(topic_filter)
            self._stored_subscriptions = None
            codes.append(ReasonCode.SUCCESS if existed else ReasonCode.NO_SUBSCRIPTION_EXISTED)
            if existed and self._hooks.has(HookPoint.SESSION_UNSUBSCRIBED):
                self._hooks.run(
                    HookPoint.SESSION_UNSUBSCRIBED,
                    SessionUnsubscribed(client_id=self.state.client_id, topic_filter=topic_filter),
                )
        unsuback = UnsubAck(request.packet_id, codes if self._version >= 5 else [])
        if not request.routed:  # the client actor could not: removed in this order
            self._context.routes.remove(
                self.state.client_id, list(request.topic_filters), self.actor_ref
            )
        # The routes are gone: nothing new is delivered for them after the UNSUBACK
        # [MQTT-3.10.4-2].
        self._routes_changed(RoutesChanged((unsuback, [])))

    def _routes_changed(self, changed: RoutesChanged) -> None:
        ack, retained_for = changed.token
        data = encode(ack, self._version)
        # Retained messages are requested once the SUBACK is on its way, so they follow it
        # [MQTT-3.3.1-6]; for a persistent session that is after its subscriptions commit.
        then = (lambda: self._send_retained(retained_for)) if retained_for else None
        if self._stored:
            self._when_durable([self._meta_op()], data, then)
        else:
            self._out.append(data)
            if then is not None:
                then()

    def _send_retained(self, subscriptions: list[tuple[str, SubscriptionOptions]]) -> None:
        self._context.retainer.tell(SendRetained(self.actor_ref, subscriptions))

    # ----- hooks ----------------------------------------------------------------------

    def _delivered_hook(self, delivery: Delivery) -> None:
        self._hooks.run(
            HookPoint.MESSAGE_DELIVERED,
            MessageDelivered(
                client_id=self.state.client_id,
                username=self._client.username if self._client else None,
                message=delivery.message,
                qos=delivery.qos,
            ),
        )

    def _report_dropped(self) -> None:
        dropped, self._drops = self._drops or [], None
        stats = self._context.stats
        stats.deliveries_dropped += len(dropped)
        bounds = self._context.queue_bounds
        if bounds and self.state.client_id in bounds:  # a bridge's session
            stats.count_session_drops(self.state.client_id, len(dropped))
        counts: dict[DropReason, int] = {}
        for drop in dropped:
            counts[drop.reason] = counts.get(drop.reason, 0) + 1
        for reason, count in counts.items():
            stats.count_drops(reason._value_, count)
            where = f"for client {self.state.client_id!r}"
            report_loss(self._context.loss_log, reason, count, where)
        if self._stored:
            for drop in dropped:
                if drop.delivery.seq:
                    self._store_deleted(drop.delivery.seq)
        if self._hooks.has(HookPoint.MESSAGE_DROPPED):
            for drop in dropped:
                self._hooks.run(
                    HookPoint.MESSAGE_DROPPED,
                    MessageDropped(
                        message=drop.delivery.message,
                        reason=drop.reason,
                        client_id=self.state.client_id,
                    ),
                )


# Messages a session handles, and the method for each: class-level, so an idle session
# holds no per-instance table of bound methods.
_MESSAGE_HANDLERS: dict[type, Callable[[SessionActor, Any], Any]] = {
    Deliver: SessionActor._deliver,
    DeliverRetained: SessionActor._deliver_retained,
    Acknowledged: SessionActor._acknowledged,
    InboundQos2: SessionActor._inbound_qos2,
    Released: SessionActor._released,
    SubscribeRequest: SessionActor._subscribe,
    UnsubscribeRequest: SessionActor._unsubscribe,
    RoutesChanged: SessionActor._routes_changed,
    Attach: SessionActor._attach,
    Detach: SessionActor._detach,
    Terminate: SessionActor._clean_start,
    HandOff: SessionActor._hand_off,
    ArrivedHandled: SessionActor._arrived_handled,
    SessionExpired: SessionActor._expired,
    Stalled: SessionActor._stalled,
    Reauthorize: SessionActor._reauthorize_on_reload,
    WillDue: SessionActor._will_due,
    MovedIn: SessionActor._moved_in,
    OrphansIn: SessionActor._orphans_in,
    ForwardingEnded: SessionActor._forwarding_ended,
    MoveSettled: SessionActor._move_settled,
}

_FORWARDING_ENDS = object()  # the token of the router's answer to a moved session's leave


# What the session does for each action of `core.session_state` (see its docstring); a
# SendPublish is handled inline in `SessionActor._carry_out`, the delivery hot path.
_ACTION_HANDLERS: dict[type, Callable[[SessionActor, Any], None]] = {
    Delivery: SessionActor._send_qos0,
    SendPubrel: SessionActor._send_pubrel,
    Completed: SessionActor._completed,
    Dropped: SessionActor._dropped,
    Revoked: SessionActor._revoked,
    ProtocolViolation: SessionActor._protocol_violation,
}


def _mark_unmatched(inbound: InboundQos2, pubrecs: list[bytes], unmatched: set[int]) -> None:
    """PUBREC 0x10 for each message nobody subscribes to (5.0 section 3.5.2.1)."""
    for index, (packet_id, message, _pubrec) in enumerate(inbound.publishes[: len(pubrecs)]):
        if message is not None and message.message_id in unmatched:
            pubrecs[index] = encode_ack(_PUBREC, packet_id, ReasonCode.NO_MATCHING_SUBSCRIBERS, 5)


def _payload_bytes(state: SessionState) -> int:
    """The payload bytes a (restored) session holds in its window and queue."""
    if not state.inflight and not state.queue:
        return 0  # a new session (every clean one): no generators to set up
    held = sum(len(entry.delivery.message.payload) for entry in state.inflight.values())
    return held + sum(len(delivery.message.payload) for delivery in state.queue or ())
