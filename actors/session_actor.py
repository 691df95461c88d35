"""SessionActor: one per client id; carries out what its `SessionProtocol` decides.

The session's state (subscriptions, the outgoing in-flight window and queue, the incoming
QoS 2 packet ids awaiting PUBREL) and every MQTT decision about it live in the pure
`session.protocol.SessionProtocol` (docs/channel.md, "The session"). This actor feeds it
what happens and carries out what it answers: the bytes it wrote for the attached
client's `Transport` (which never blocks), its store writes as store ops for persistent
sessions (`actors.persistence`), counters, loss log lines and hooks (message.delivered,
message.acked, message.dropped, session.subscribed/unsubscribed), and messages for the
router, the retainer and the client actor. QoS 0 fan-out to a 3.x client skips the
protocol: a batch the state answers with itself is written as its shared encodings.

What it does itself is what needs the runtime: the lifecycle (created by the session
registry; `Attach` binds a connection, `Detach` unbinds it; a session whose expiry is 0
terminates on detach, any other keeps queueing until its client comes back, it expires,
or it is terminated), the takeover queue (`session.takeovers` decides what each waits
for), its timers (expiry; a 5.0 will's delay, published when it passes or the session
ends, never if the client resumes in time [MQTT-3.1.3-9]), flow control, shared
subscriptions and a pool's moves.

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

Durability: the store writes of one message are submitted when the mailbox is empty
(`after_drain`); answers whose promise depends on the store (SUBACK, PUBREC, PUBCOMP, a
QoS 2 PUBLISH or PUBREL) are written only after the commit.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import gevent

from actors.context import BrokerContext
from actors.messages import (
    ArrivedHandled,
    Attach,
    AwaitRoutes,
    CloseConnection,
    Deliver,
    DeliverRetained,
    DeliverWires,
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
    RestoreSettled,
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
from actors.session_move_in import MovingIn
from actors.session_reports import carry_out_reports, report_dropped
from channel.actions import (
    Acknowledged,
    InboundQos2,
    Released,
    SubscribeRequest,
    UnsubscribeRequest,
)
from channel.authorization import may_read
from core.client import ClientInfo
from core.flow import Transition
from core.message import Message
from core.move_in import MoveIn, queued_qos0
from core.reasons import DisconnectReason, DropReason
from core.session_state import (
    Action,
    Delivery,
    Dropped,
    SessionState,
    SubscriptionOptions,
)
from hooks.events import (
    SessionEvent,
    SessionSubscribed,
    SessionUnsubscribed,
)
from hooks.hookpoints import HookPoint
from net.transport import Transport
from router.fan_out import Route
from router.shared import inner_filter
from session.actions import (
    Close,
    DeleteRecord,
    Forget,
    MarkSent,
    PutDelivery,
    Reply,
    Report,
    SaveSession,
    StoreWrite,
)
from session.protocol import SessionProtocol
from session.takeovers import Fate, Kind, Wait, fate, waits
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
_KIND: dict[type, Kind] = {Attach: Kind.ATTACH, HandOff: Kind.HAND_OFF, Terminate: Kind.CLEAN_START}

_QOS = itemgetter(1)  # Delivery.qos, read in C
_WIRE = itemgetter(4)  # Delivery.wire, read in C
_MESSAGE_DELIVERED = HookPoint.MESSAGE_DELIVERED


class SessionActor(GeventActor):
    # Rarely set, so class-level defaults: an instance with more than 30 attributes loses
    # CPython's shared-key dict, which cost 1.3 KB per idle connection.
    # Takeovers waiting for the connection attached now (`_waits_for_arrived`).
    _takeovers: list[Takeover] | None = None

    def __init__(
        self, state: SessionState, context: BrokerContext, protocol_version: int = 4
    ) -> None:
        super().__init__()
        self.state = state
        self._context = context
        self._hooks = context.hooks
        self._persistence = context.persistence
        self.protocol = SessionProtocol(state, protocol_version, self._persistence.enabled)
        self._client_ref: Any = None
        self._transport: Transport | None = None
        # The stored form of the subscriptions, rebuilt only after SUBSCRIBE/UNSUBSCRIBE.
        self._stored_subscriptions: dict[str, StoredSubscription] | None = None
        self._expiry_timer: gevent.Greenlet[..., Any] | None = None
        self._will: Message | None = None  # a delayed will waiting for its time
        self._will_timer: gevent.Greenlet[..., Any] | None = None
        self._flow = context.flow
        self._load = context.flow.new_load(self.actor_ref)
        self._reads = context.dispatcher.read_checks  # who may read what is delivered here
        bound = context.queue_bounds.get(state.client_id) if context.queue_bounds else None
        if bound is not None:  # a bridge's session (`_account`)
            state.max_queued = bound[0]
        # Pool (docs/pool.md "Deliveries during a move"): moving in from another worker
        # (set before launch), or moved away and forwarding what still reaches it.
        self.move_in: MovingIn | None = None
        # Cluster: restored from the store at start-up, what it was restored with, until
        # `RestoreSettled` (`keep_restored`).
        self.restored: MoveIn | None = None
        self._writes_waiting = 0  # writes that wait for a commit (`after_drain`)
        self._move_out: MoveOut | None = None
        # The last user of a session that moved in (the store keeps no username).
        self.moved_user: str | None = None
        self.moved_user_known = False

    def moving_in(self, username: str | None, user_known: bool) -> None:
        """Before launch: this session, just loaded, is moving in from another worker whose
        last user was `username` (if `user_known`)."""
        move = self.restored if self.restored is not None else self._loaded()
        self.move_in = MovingIn(move, self.protocol, self._persistence, self._deliver_readable)
        self.moved_user, self.moved_user_known = username, user_known
        self.state.max_queued = 0  # not offline: its client is attaching (see `_account`)

    def keep_restored(self) -> None:
        """Before launch, in a cluster: this session was restored from the store at start-up;
        until `RestoreSettled`, what another node had forwarded to the node's previous life
        (`OrphansIn`) is told apart from what the session was restored with, by message
        (`cluster.restored_sessions`). A pool's `moving_in` then shares the check."""
        self.restored = self._loaded()

    def _loaded(self) -> MoveIn:
        state = self.state
        return MoveIn([*(state.queue or ()), *(e.delivery for e in state.inflight.values())])

    def on_receive(self, message: Any) -> Any:
        if self._move_out is not None:
            return self._while_moved_away(message)
        return _MESSAGE_HANDLERS[type(message)](self, message)

    def on_stop(self) -> None:
        self._reads.forget(self.actor_ref)  # however it ended: terminated, moved away

    # ----- carrying out: bytes, store writes, reports --------------------------------

    def after_drain(self) -> None:
        protocol = self.protocol
        if protocol.sent:
            self._context.stats.messages_sent += protocol.sent
            protocol.sent = 0
        out = protocol.out
        gated = False
        if protocol.writes:
            ops = self._ops(protocol.writes)
            protocol.writes = []
            lazy = may_commit_lazily(ops)
            if lazy or not out:
                self._persistence.submit(ops, lazy=lazy)
            else:
                # A QoS 2 stage (or another prompt op) with bytes to send: they go out
                # once it is committed, so a PUBLISH or PUBREL is never on the wire before
                # its packet id and stage are stored: after a crash the restored session
                # resends exactly what the client saw [MQTT-4.3.3-1] [MQTT-4.4.0-1].
                self._write_when_committed(ops)
                gated = True
        if out and not gated:
            if self._transport is not None:
                if self._writes_waiting:  # keep the order of what waits for a commit
                    self._write_when_committed([])
                    return
                data = b"".join(out)
                self._context.stats.bytes_sent += len(data)
                self._transport.write(data)
            out.clear()

    def _write_when_committed(self, ops: list[Op]) -> None:
        """Submit `ops` and write what is in `out` once they (and all before) are committed."""
        out = self.protocol.out
        data = b"".join(out)
        out.clear()
        transport = self._transport
        self._writes_waiting += 1

        def committed() -> None:
            self._writes_waiting -= 1
            if transport is not None:
                self._context.stats.bytes_sent += len(data)
                transport.write(data)

        self._persistence.submit(ops, committed)

    def _reply(self, reply: Reply, then: Callable[[], None] | None = None) -> None:
        """Write `reply` to the current connection (once its store writes, and all before,
        are committed), then call `then`."""
        if reply.writes is None or not self._persistence.enabled:
            self.protocol.out.append(reply.data)
            if then is not None:
                then()
            return
        self.after_drain()  # earlier ops and bytes go first
        transport = self._transport
        data = reply.data

        def committed() -> None:
            if transport is not None:
                transport.write(data)
            if then is not None:
                then()

        self._persistence.submit(self._ops(reply.writes), committed)

    def _ops(self, writes: list[StoreWrite]) -> list[Op]:
        """The store ops of the protocol's store writes."""
        client_id = self.state.client_id
        ops: list[Op] = []
        for write in writes:
            if type(write) is MarkSent:
                ops.append(MarkInFlight(client_id, write.stage, write.marks))
            elif type(write) is Forget:
                ops.append(DeleteMessage(client_id, write.seqs))
            elif type(write) is SaveSession:
                ops.append(self._meta_op(write))
            elif type(write) is DeleteRecord:
                ops.append(DeleteSession(client_id))
            elif type(write) is PutDelivery:
                ops.append(PutMessage(client_id, write.seq, stored_delivery(write.delivery)))
        return ops

    def _meta_op(self, write: SaveSession) -> PutSession:
        if self._stored_subscriptions is None or write.subscriptions_changed:
            self._stored_subscriptions = stored_subscriptions(self.state)
        meta = session_meta(
            self.state, self.protocol.version, write.disconnected_at, self._stored_subscriptions
        )
        return PutSession(self.state.client_id, meta)

    def _carry_out(self, actions: Sequence[Action]) -> None:
        """Carry out what the session state asked for, through the protocol."""
        delivered_hook = self._hooks.has(_MESSAGE_DELIVERED)
        reports = self.protocol.carry_out(actions, time.time(), delivered_hook)
        if reports:
            self._report(reports)

    def _report(self, reports: list[Report]) -> None:
        """Carry out the protocol's reports (`actors.session_reports`)."""
        client_id = self.state.client_id
        carry_out_reports(reports, self._context, client_id, self.protocol.client, self._client_ref)

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
        client = attach.client
        if attach.session_present:
            # Whoever resumes the session gets only what its own identity may read: the
            # subscriptions and queued messages are re-checked against the ACL for it.
            self._reauthorize(client)
        self._reads.identify(self.actor_ref, client)  # whose reads are checked
        self._client_ref = attach.client_ref
        self._transport = attach.transport
        self._load.enabled = self._flow.enabled
        self._cancel_expiry()
        if self._will is not None:
            # Resumed before the will delay passed: the will is not sent [MQTT-3.1.3-9].
            logger.info("session %r resumed: its delayed will is discarded", client.client_id)
            self._cancel_will()
        reports = self.protocol.attach(
            client,
            session_present=attach.session_present,
            connack_properties=attach.connack_properties,
            max_inflight=client.inflight_bound(self._context.limits.max_inflight),
            now=time.time(),
            delivered_hook=self._hooks.has(_MESSAGE_DELIVERED),
        )
        self._report(reports)
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
        client = self.protocol.client
        if client is None:
            return 0  # restored from the store and not resumed yet: checked on resume
        return len(self._reauthorize(client))

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

        owner = self.protocol.client
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
        revoked, reports = self.protocol.reauthorize(readable)
        if revoked:
            logger.warning(
                "session %r: the ACL denies user %r %d of its subscriptions; revoked: %s",
                self.state.client_id,
                client.username,
                len(revoked),
                ", ".join(repr(f) for f in revoked[:10]) + (" ..." if len(revoked) > 10 else ""),
            )
            self._context.router.tell(
                RemoveRoutes(self.state.client_id, revoked, session=self.actor_ref)
            )
        self._report(reports)  # the hook for each Revoked filter; the drops
        return revoked

    def _detach(self, detach: Detach) -> None:
        if detach.client_ref is not self._client_ref:
            return  # an older connection that was taken over
        self.after_drain()
        self._client_ref = None
        self._transport = None
        protocol = self.protocol
        protocol.detached()
        if detach.session_expiry is not None:  # a 5.0 DISCONNECT changed it (section 3.14.2.2.2)
            protocol.keep(detach.session_expiry > 0, detach.session_expiry)
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
        protocol.save(disconnected_at=time.time())
        self.start_expiry_timer(self.state.expiry)
        self._go_on()  # the connection is gone: a takeover waiting for it goes on

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
        self.protocol.delete()
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
        self._pass_on(waiting)
        if self._hooks.has(HookPoint.SESSION_TERMINATED):
            self._hooks.run(
                HookPoint.SESSION_TERMINATED,
                SessionEvent(client_id=self.state.client_id, reason=terminate.reason),
            )
        self.stop()

    def _pass_on(self, waiting: list[Takeover] | None) -> None:
        """The takeovers that waited while this session ended, each to its fate: a hand-off
        answered once what this session wrote is committed, an attach closed or reopened
        as if this session had not been there."""
        for takeover in waiting or ():
            after = fate(_KIND[type(takeover)], self.protocol.replaced)
            if after is Fate.ANSWER:  # the claimant finds none, once the delete is in
                assert type(takeover) is HandOff  # fate() answers hand-offs only
                self._persistence.submit((), takeover.then)
            elif after is not None:  # an attach: taken over, or opened as if none was here
                assert type(takeover) is Attach  # fate() closes or reopens attaches only
                if after is Fate.CLOSE:
                    tell_if_alive(takeover.client_ref, CloseConnection(DisconnectReason.TAKEN_OVER))
                else:
                    self._context.registry.attach(takeover)

    def _clean_start(self, terminate: Terminate) -> None:
        """The registry replaced this session by a clean start's [MQTT-3.1.2-4]. Its stored
        state goes now, before the new session writes its own, and it writes nothing more;
        the connection may still have to handle what it received (`_waits_for_arrived`)."""
        if self.protocol.stored:
            self.protocol.delete()
            self.after_drain()
        self.protocol.replaced = True
        if not self._waits_for_arrived(terminate):
            self._terminate(terminate)

    def _hand_off(self, hand_off: HandOff) -> None:
        if not self._waits_for_arrived(hand_off):
            self._give_up(hand_off)

    def _waits_for_arrived(self, takeover: Takeover) -> bool:
        """Whether `takeover` waits (`session.takeovers`). It asks the attached connection
        to handle what it received: the client actor answers `ArrivedHandled`, or ends the
        connection (`_detach`). A session that ends meanwhile passes the waiting ones on
        (`_terminate`)."""
        client = self._client_ref
        kind = _KIND[type(takeover)]
        own = type(takeover) is Attach and takeover.client_ref is client
        wait = waits(kind, self._takeovers is not None, client is not None, own)
        if wait is Wait.NOW:
            return False
        if wait is Wait.BEHIND:
            self._takeovers.append(takeover)  # type: ignore[union-attr]
            return True
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
            protocol = self.protocol
            move = hand_off.move if protocol.stored else None
            if move is not None:
                client = protocol.client
                known = client is not None or self.moved_user_known
                user = client.username if client is not None else self.moved_user
                move.begin(user, known, *queued_qos0(self.state.queue))
            protocol.save(disconnected_at=time.time())
            self.after_drain()
            if self._client_ref is not None:
                tell_if_alive(self._client_ref, CloseConnection(DisconnectReason.TAKEN_OVER))
            self._client_ref = self._transport = None
            protocol.detached()
            self._context.registry.ended(self.state.client_id, self.actor_ref)
            if move is None:
                self._leave_routes(None)
                # Takeovers that queued behind this one (a cluster's and a pool's at once)
                # find the session gone, as after `_terminate`.
                waiting, self._takeovers = self._takeovers, None
                self._pass_on(waiting)
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
            deliveries = self.move_in.direct(deliveries)
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

    def _deliver_wires(self, deliver: DeliverWires) -> None:
        """QoS 0 deliveries held as their 3.x PUBLISH packets (`core.wire_messages`): written
        as they are if QoS 0 deliveries to this session would be written now, as those
        packets; else taken as the deliveries they are."""
        if self.move_in is None and self._writes_packets_as_is():
            wires = deliver.wires
            self.protocol.out += wires
            self._context.stats.messages_sent += len(wires)
        else:
            self._deliver(Deliver(deliver.deliveries()))

    def _drops_qos0(self) -> bool:
        """The owner's slow-consumer verdict: QoS 0 deliveries are dropped, not written, while
        the socket's backlog is over `max_write_buffer` or the session is stalled."""
        transport = self._transport
        return (
            transport is not None
            and transport.backlog_bytes > self._context.limits.max_write_buffer
        ) or self._load.stalled

    def _writes_packets_as_is(self) -> bool:
        """Whether a QoS 0 delivery with a 3.x encoding is written now, as that encoding:
        `SessionState.deliver` would send it at once, and the client speaks 3.x with no
        `message.delivered` hook."""
        return (
            self.protocol.version < 5
            and not self._hooks.has(_MESSAGE_DELIVERED)
            and self.state.sends_qos0_now(self._transport is not None, self._drops_qos0())
        )

    def _deliver_now(self, deliveries: list[Delivery]) -> None:
        protocol = self.protocol
        # Hot path: QoS 0 deliveries to a 3.x client are written as their shared encoding.
        if not any(map(_QOS, deliveries)) and self._writes_packets_as_is():
            wires = list(map(_WIRE, deliveries))
            if None not in wires:
                protocol.out += wires
                self._context.stats.messages_sent += len(wires)
                return
        connected = self._transport is not None
        if not connected:
            deliveries = self._give_back_shared(deliveries)
        actions = self.state.deliver(deliveries, connected, drop_qos0=self._drops_qos0())
        # Every delivery is held until an action lets it go (sent as QoS 0, completed, dropped).
        protocol.held_bytes += sum([len(delivery.message.payload) for delivery in deliveries])
        self._carry_out(actions)
        self._account()

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

    # ----- moving in from another worker (pool) ----------------------------------------

    def _moved_in(self, moved: MovedIn) -> None:
        if self.move_in is None:  # not expected (the pool stops forwarding before it settles)
            self._deliver_readable(moved.deliveries)  # rather than lose them
        else:
            self.move_in.forwarded(moved.deliveries)

    def _orphans_in(self, orphans: OrphansIn) -> None:
        if self.move_in is not None:
            self.move_in.orphans(orphans.deliveries)
        elif self.restored is not None:
            deliveries, duplicates = self.restored.orphaned(orphans.deliveries)
            self.protocol.forget(duplicates)
            self._deliver_readable(deliveries)
        else:
            self._deliver_readable(orphans.deliveries)

    def _restore_settled(self, _settled: RestoreSettled) -> None:
        self.restored = None

    def _forwarding_ended(self, ended: ForwardingEnded) -> None:
        if self.move_in is not None:
            self.move_in.forwarding_ended(ended.source)

    def _move_settled(self, _settled: MoveSettled) -> None:
        self.move_in = None

    def _deliver_readable(self, deliveries: list[Delivery]) -> None:
        """Deliver what the attached client may read of deliveries forwarded to it (a new
        user may have resumed the session: `_reauthorize`); the others are dropped."""
        client = self.protocol.client
        if client is not None and deliveries and self._hooks.has(HookPoint.CLIENT_AUTHORIZE):
            keep = []
            denied = []
            for delivery in deliveries:
                if may_read(self._hooks, client, delivery.message.topic, delivery.qos):
                    keep.append(delivery)
                else:
                    denied.append(Dropped(delivery, DropReason.NOT_AUTHORIZED))
            if denied:
                self.protocol.forget(drop.delivery for drop in denied)
                report_dropped(denied, self._context, self.state.client_id)
            deliveries = keep
        self._deliver_now(deliveries)

    def _account(self) -> None:
        """Publish the load to flow control; apply the bound and drop policy when flow
        control does not hold this session (offline, stuck, or flow control off)."""
        state = self.state
        load = self._load
        queue = state.queue
        held = self.protocol.held_bytes
        transition = load.update(
            len(state.inflight) + (len(queue) if queue else 0), held, time.monotonic()
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
        excess = held - max_bytes if max_bytes else 0
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
        if len(left) < len(given):
            kept = {id(delivery) for delivery in left}
            self.protocol.forget(delivery for delivery in given if id(delivery) not in kept)

    # ----- incoming QoS 2 -------------------------------------------------------------

    def _inbound_qos2(self, inbound: InboundQos2) -> None:
        protocol = self.protocol
        dispatcher = self._context.dispatcher
        publishes = inbound.publishes
        failing = self._persistence.failing and (
            protocol.stored
            or dispatcher.needs_store(
                [message for _id, message, _pubrec in publishes if message is not None]
            )
        )
        answer = protocol.inbound_qos2(publishes, failing)
        self._report(answer.reports)
        # PUBREC promises exactly-once: the awaiting-PUBREL id and the routed copies must be
        # durable first, those on other workers of a pool too (the dispatcher's callback
        # waits for their commits). The id's write goes first, so one commit covers both.
        if answer.writes:
            self.after_drain()  # earlier ops and bytes go first
            self._persistence.submit(self._ops(answer.writes))
        pubrecs = answer.pubrecs
        transport = self._transport
        slot, write_acks = inbound.slot, inbound.write_acks
        # The connection is closed after these (3.x refused while the store fails, too many
        # awaiting PUBREL): no later PUBLISH of it is acknowledged (`channel.ack_order`).
        last = any(type(report) is Close for report in answer.reports)

        def routed() -> None:
            data = b"".join(pubrecs)  # as amended below for 0x10
            if slot is None:
                if transport is not None:
                    transport.write(data)
            # In their place among the connection's acknowledgements (`channel.ack_order`);
            # filled even if empty, so the ones after them are not held.
            elif slot.fill(data, last=last) and write_acks is not None:
                write_acks()

        unmatched: set[int] = set()
        routed_durably = bool(answer.to_route) and dispatcher.publish(
            answer.to_route,
            routed if pubrecs or slot is not None else None,
            inbound.publisher,
            unmatched=unmatched,
        )
        protocol.mark_unmatched(publishes, answer, unmatched)
        if routed_durably:
            return
        if slot is None:
            if pubrecs:
                self._reply(Reply(b"".join(pubrecs), [] if answer.writes else None))
        elif answer.writes and self._persistence.enabled:
            # Once the packet ids' write (submitted above) is committed.
            self._persistence.submit([], routed)
        else:
            self.after_drain()  # earlier bytes go first (a PUBCOMP of a PUBREL before them)
            routed()

    def _released(self, released: Released) -> None:
        self._reply(self.protocol.release(released.packet_ids))

    # ----- subscriptions --------------------------------------------------------------

    def _subscribe(self, request: SubscribeRequest) -> None:
        subscribed = self.protocol.subscribe(request)
        persistent = self.state.persistent
        routes = [
            (topic_filter, Route(self.actor_ref, options, persistent))
            for topic_filter, options in subscribed.granted
        ]
        if self._hooks.has(HookPoint.SESSION_SUBSCRIBED):
            for topic_filter, options in subscribed.granted:
                self._hooks.run(
                    HookPoint.SESSION_SUBSCRIBED,
                    SessionSubscribed(
                        client_id=self.state.client_id,
                        topic_filter=topic_filter,
                        qos=options.qos,
                    ),
                )
        token = (subscribed.ack, subscribed.retained_for)
        if routes:
            if not request.routed:  # the client actor could not: written in this order
                self._context.routes.add(self.state.client_id, routes)
            # The SUBACK once every worker of a pool knows the routes.
            self._context.router.tell(AwaitRoutes(self.actor_ref, token))
        else:
            self._routes_changed(RoutesChanged(token))

    def _unsubscribe(self, request: UnsubscribeRequest) -> None:
        unsuback, removed = self.protocol.unsubscribe(request)
        if self._hooks.has(HookPoint.SESSION_UNSUBSCRIBED):
            for topic_filter in removed:
                self._hooks.run(
                    HookPoint.SESSION_UNSUBSCRIBED,
                    SessionUnsubscribed(client_id=self.state.client_id, topic_filter=topic_filter),
                )
        if not request.routed:  # the client actor could not: removed in this order
            self._context.routes.remove(
                self.state.client_id, list(request.topic_filters), self.actor_ref
            )
        # The routes are gone: nothing new is delivered for them after the UNSUBACK
        # [MQTT-3.10.4-2].
        self._routes_changed(RoutesChanged((unsuback, [])))

    def _routes_changed(self, changed: RoutesChanged) -> None:
        ack, retained_for = changed.token
        # Retained messages are requested once the SUBACK is on its way, so they follow it
        # [MQTT-3.3.1-6]; for a persistent session that is after its subscriptions commit.
        then = (lambda: self._send_retained(retained_for)) if retained_for else None
        self._reply(self.protocol.acknowledge(ack), then)

    def _send_retained(self, subscriptions: list[tuple[str, SubscriptionOptions]]) -> None:
        self._context.retainer.tell(SendRetained(self.actor_ref, subscriptions))


# Messages a session handles, and the method for each: class-level, so an idle session
# holds no per-instance table of bound methods.
_MESSAGE_HANDLERS: dict[type, Callable[[SessionActor, Any], Any]] = {
    Deliver: SessionActor._deliver,
    DeliverWires: SessionActor._deliver_wires,
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
    RestoreSettled: SessionActor._restore_settled,
}

_FORWARDING_ENDS = object()  # the token of the router's answer to a moved session's leave
