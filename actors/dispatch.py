"""Routing a batch of published messages to the sessions that subscribe to them.

Publishers call `Dispatcher.publish` from their own actor (the client actor for QoS 0/1, the
session actor for QoS 2): it reads the router's `RouteTable` directly, the way emqttd reads
its route tables from the caller's process, so a publish never queues behind the router's
mailbox. Changes to the table go through `actors.router_actor.RouteWriter` only.

For one batch it:
- writes, for QoS 1/2 deliveries to persistent sessions and for retained messages, the store
  ops that make them durable, and calls `on_durable` (the publisher's acks) after the commit
  (see `actors.persistence`);
- runs the `message.publish` hook chain (when any plugin listens) which may change or drop;
- hands retained messages to the retainer actor (one tell per batch);
- picks, per subscribing session, the highest QoS over all of its matching subscriptions,
  capped by the message's QoS, so overlapping subscriptions deliver once [MQTT-3.3.5-1]
  (that merge is the topic's plan, `router.fan_out`, cached until the route table changes);
- encodes a QoS 0 PUBLISH for MQTT 3.x subscribers once per message and shares the bytes;
- gives each share group matching the topic (`$share/...`, `router.shared`) the message
  once, to the member its `SharePicker` strategy picks; while the broker has no share group
  this is one attribute test per message;
- leaves out the subscribers whose deliveries are checked for read access and whose ACL
  denies the topic (`hooks.read_checks`, Mosquitto's per-message read check): while some
  subscriber is checked, the plans come filtered from `router.readable_plans`, which
  decides each (subscriber, topic) once and keeps the answer beside the plan; a share
  group's member that may not read the topic is passed over for another. While no
  subscriber is checked, that costs one attribute test per batch;
- tells each session one `Deliver` with all of its deliveries from the batch;
- in a pool (`remote` set, docs/pool.md), hands each message to the forwarder, which sends
  the batch once to each other worker with a matching subscriber; what a worker receives
  that way goes through `publish_forwarded`, to its local subscribers only (a frame of 3.x
  QoS 0 messages as their PUBLISH packets, a run of one topic at a time,
  `_fan_out_wires`). Share groups
  are pool-wide: the strategy picks among this worker's members and stand-ins for the
  other workers' members (`router.share_replica`); a stand-in picked hands the message to
  the forwarder for that worker, marked with the group, and that worker gives it to one of
  its own members (or, if none is left, to another worker's);
- flow control (`actors.overload`): holds the publisher's intake (pauses its reads) on every
  session of the batch that is over its high-water mark, and on the memory alarm while it is
  raised. That costs one dict lookup and one attribute read per session per batch.

Retained messages sent on SUBSCRIBE, messages resumed from a stored queue, forwarded by a
session's previous worker or kept for it while its worker was dead are checked by the session
actor instead.

`redispatch` takes shared deliveries back from a member that cannot keep them (offline, or
its session ended) and gives each to another member of its group, as EMQX does; in a pool
that member may be on another worker. In a cluster `share_again` does the same for the picks
another node's worker did not confirm before it was taken for gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from actors.losses import report_loss
from actors.messages import Deliver, DeliverWires, OrphansIn, StoreRetained
from actors.overload import FlowControl
from actors.persistence import Persistence, stored_delivery
from actors.runtime import tell_if_alive
from channel.intake import Intake
from core.flow import Gate
from core.message import Message
from core.reasons import DropReason
from core.session_state import Delivery
from core.share_origin import ShareMark, ShareOrigin
from core.stats import BrokerStats
from core.wire_messages import ForwardedMessages, WireMessages
from hooks.events import MessageDropped
from hooks.hookpoints import HookPoint
from hooks.read_checks import ReadChecks
from mqtt.encoder import encode_publish
from net.rate_limited_log import RateLimitedLog
from router.fan_out import FanOut, Plan, Route
from router.readable_plans import ReadablePlans
from router.route_table import RouteTable
from router.share_replica import RemoteShares, stand_in
from router.share_strategy import SharePicker, Strategy
from router.shared import SharedSubscriptions, ShareGroup, ShareMember
from store.base import DeleteRetained, Op, PutMessage, PutRetained

logger = logging.getLogger(__name__)
# Delivery's fields in order, all seven, built as the tuple it is: a NamedTuple's own
# constructor (a Python-level __new__ filling in defaults) cost 70 ns more per delivery,
# about 3 % of a QoS 0 fan-in's CPU.
_new_delivery = tuple.__new__
_DeliveryFields = tuple[Message, int, bool, tuple[int, ...], bytes | None, int, None]

_MESSAGE_PUBLISH = HookPoint.MESSAGE_PUBLISH  # module constants: Enum lookups cost ~0.2 µs
_MESSAGE_DROPPED = HookPoint.MESSAGE_DROPPED
_NO_SUBSCRIBERS = DropReason.NO_SUBSCRIBERS


class Plans(Protocol):
    """Where `_fan_out` reads a topic's plan: `FanOut`, or `ReadablePlans` while reads are
    checked."""

    def plan(self, topic: str) -> Plan: ...


class RemoteForwarder(Protocol):
    """The pool's side of a publish (pool.node): collects, then sends, per worker."""

    worker: int  # this worker's id
    shares: RemoteShares  # the other workers' members of each share group

    def add(self, message: Message) -> bool:
        """Whether another worker wants `message` (it is then forwarded at `flush`)."""
        ...

    def needs_store(self, topic: str) -> bool:
        """Whether another worker has a persistent session subscribed to `topic`."""
        ...

    def add_share(self, worker: int, message: Message, share: ShareOrigin) -> None:
        """Forward `message` at `flush` to `worker`, for one of its members of the group."""
        ...

    def flush(
        self,
        retained: list[Message],
        on_durable: Callable[[], object] | None,
        publisher: Gate | None = None,
    ) -> Callable[[], object] | None:
        """Send what `add` collected, and the batch's retained messages to every worker;
        the receivers hold `publisher` (flow control) on their sessions over their marks.
        If QoS 1/2 messages went to other workers and `on_durable` is given, `on_durable`
        waits for their commits too: the callback returned is then to be called once this
        worker's own ops are committed (None: nothing waits on other workers)."""
        ...


class Dispatcher:
    def __init__(
        self,
        routes: RouteTable[str, Route],
        retainer: Any,
        hooks: Any,
        stats: BrokerStats,
        persistence: Persistence,
        *,
        loss_log: RateLimitedLog,
        shares: SharedSubscriptions | None = None,
        picker: SharePicker | None = None,
        flow: FlowControl | None = None,
    ) -> None:
        self._flow = flow
        self._loads = flow.loads if flow is not None else {}
        self._shares = SharedSubscriptions() if shares is None else shares
        self._picker = SharePicker(Strategy.ROUND_ROBIN) if picker is None else picker
        self._fan_out_plans = FanOut(routes, shares=self._shares)
        # Per-delivery read checks: the sessions register their clients (`identify`), the
        # broker resets it after a reload.
        self.read_checks = ReadChecks(hooks)
        self._readable_plans = ReadablePlans(self._fan_out_plans, self.read_checks)
        self._loss_log = loss_log
        self._retainer = retainer
        self._hooks = hooks
        self._stats = stats
        self._persistence = persistence
        self.remote: RemoteForwarder | None = None  # set by a pool worker

    def publish(
        self,
        messages: list[Message],
        on_durable: Callable[[], object] | None = None,
        publisher: Intake | None = None,
        *,
        unmatched: set[int] | None = None,
    ) -> bool:
        """Route `messages` (in order) to their subscribers and the retainer.

        Returns True if store ops were submitted; `on_durable` then runs after their commit.
        False means nothing needed the store and `on_durable` was not called. `unmatched`,
        if given, gets the message id of each message no subscription matched (before
        `on_durable` runs): a 5.0 PUBACK/PUBREC says so with 0x10. `publisher` is the
        publishing connection's intake, held by flow control (None: not flow controlled).
        """
        hooks = self._hooks
        filter_by_hooks = hooks.has(_MESSAGE_PUBLISH)
        per_session: dict[Any, list[Delivery]] = {}
        retained: list[Message] = []
        ops: list[Op] = []
        remote = self.remote
        # Whether any share group has members here or on another worker: nothing the loop
        # below runs can change that, so it is asked once per batch, not once per message.
        any_shares = bool(self._shares.group_count or (remote is not None and remote.shares))
        reads = self.read_checks if self.read_checks.active else None
        plans = None if reads is None else self._readable_plans
        for original in messages:
            message = hooks.publish(original) if filter_by_hooks else original
            if message is None:
                self.dropped(original, DropReason.BY_PLUGIN)
                continue
            self._stats.messages_received += 1
            self._stats.received_by_qos[message.qos] += 1
            if message.retain:
                retained.append(message)
                if self._persistence.enabled:
                    ops.append(
                        PutRetained(message) if message.payload else DeleteRetained(message.topic)
                    )
            delivered = self._fan_out(message, per_session, ops, plans)
            if remote is not None and remote.add(message):
                delivered = True
            if any_shares:
                groups = self._share_plan(message.topic)
                delivered = (
                    self._share_out(message, groups, per_session, ops, reads=reads) or delivered
                )
            if not delivered:
                self.dropped(message, DropReason.NO_SUBSCRIBERS)
                if unmatched is not None:
                    unmatched.add(original.message_id)
        self._stats.count_topics(messages)
        # Submitted first: in a pool the frames for other workers are then written before the
        # local sessions' drains run (each is a callback queued by `_deliver`), so the other
        # workers fan out in parallel with this one instead of after it.
        submitted = self._submit(ops, retained, on_durable, publisher)
        self._deliver(per_session, publisher)
        if retained:
            self._retainer.tell(StoreRetained(retained))
        return submitted

    def _submit(
        self,
        ops: list[Op],
        retained: list[Message],
        on_durable: Callable[[], object] | None,
        publisher: Intake | None,
    ) -> bool:
        """Submit a batch's store ops (`on_durable` runs after their commit); in a pool, first
        send the other workers what the forwarder collected (and the retained messages),
        naming `publisher` for their flow control."""
        remote = self.remote
        if remote is not None:
            local_part = remote.flush(retained, on_durable, publisher)
            if local_part is not None:  # the acks wait for other workers' commits too
                self._persistence.submit(ops, local_part)
                return True
        if ops:
            self._persistence.submit(ops, on_durable)
            return True
        return False

    def needs_store(self, messages: list[Message]) -> bool:
        """Whether routing `messages` would store a QoS 1/2 delivery for a persistent session
        on this worker or, in a pool, on another (asked only while the store is failing:
        docs/overload.md)."""
        plan = self._fan_out_plans.plan
        remote = self.remote
        return any(
            message.qos
            and (
                any(target.persistent for target in plan(message.topic))
                or (remote is not None and remote.needs_store(message.topic))
            )
            for message in messages
        )

    def _deliver(
        self,
        per_session: Mapping[Any, list[Delivery] | DeliverWires],
        publisher: Gate | None,
    ) -> None:
        """Tell each session its deliveries (in a `Deliver`, or the `DeliverWires` that holds
        them). With a `publisher` (flow control on: a local connection's intake, or another
        worker's publisher as a `RemoteGate`), hold it on the sessions over their high-water
        mark, and on the memory alarm while it is raised (`core.flow`)."""
        if publisher is None:
            for session, deliveries in per_session.items():
                told = deliveries if isinstance(deliveries, DeliverWires) else Deliver(deliveries)
                tell_if_alive(session, told)
            return
        loads = self._loads
        for session, deliveries in per_session.items():
            told = deliveries if isinstance(deliveries, DeliverWires) else Deliver(deliveries)
            tell_if_alive(session, told)
            load = loads.get(session)
            if load is not None and load.over:
                load.hold(publisher)
        flow = self._flow
        if flow is not None and flow.alarm.raised:
            flow.alarm.hold(publisher)

    def _fan_out(
        self,
        message: Message,
        per_session: dict[Any, list[Delivery]],
        ops: list[Op],
        plans: Plans | None = None,
    ) -> bool:
        """`message` to the subscribers of this worker's route table (of `plans`' if given:
        `ReadablePlans` while reads are checked)."""
        plan = (plans or self._fan_out_plans).plan(message.topic)
        wire_qos0: bytes | None = None
        persistence = self._persistence
        delivered = False
        # The last delivery made that is not stored, and what it was made of: a Delivery is
        # an immutable tuple, so every further subscriber that gets an equal one (the same
        # QoS, RETAIN flag and subscription identifiers: nearly all of a fan-out's) shares
        # that object. Making one per subscriber was half of a 1 -> 100 fan-out's CPU. What it
        # was made of is kept in locals: reading it back from the tuple cost 13 % more per
        # delivery in the dispatch.
        made: Delivery | None = None
        made_qos = -1
        made_retain = False
        made_ids: tuple[int, ...] = ()
        for target in plan:
            # Overlapping subscriptions of one client deliver once, at the highest granted
            # QoS, capped by the message's [MQTT-3.3.5-1]; No Local (MQTT 5) [MQTT-3.8.3-3].
            granted = target.own_qos if target.client_id == message.publisher else target.qos
            if granted < 0:
                continue
            qos = granted if granted < message.qos else message.qos
            # Live deliveries go out with RETAIN=0 unless the subscriber asked for
            # Retain As Published (MQTT 5) [MQTT-3.3.1-9] [MQTT-3.3.1-12/13].
            retain = message.retain and target.retain_as_published
            if qos and target.persistent and persistence.enabled:
                delivery = Delivery(
                    message, qos, retain, target.subscription_ids, None, persistence.next_seq()
                )
                ops.append(PutMessage(target.client_id, delivery.seq, stored_delivery(delivery)))
            elif (
                qos == made_qos
                and retain == made_retain
                and target.subscription_ids is made_ids
                and made is not None
            ):
                delivery = made
            else:
                made_qos, made_retain, made_ids = qos, retain, target.subscription_ids
                fields: _DeliveryFields
                if qos == 0 and not retain:
                    if wire_qos0 is None:
                        wire_qos0 = message.wire or encode_publish(
                            message.topic, message.payload, 0, False, False, None, None, 4
                        )
                    fields = (message, 0, False, made_ids, wire_qos0, 0, None)
                else:
                    fields = (message, qos, retain, made_ids, None, 0, None)
                delivery = made = _new_delivery(Delivery, fields)
            deliveries = per_session.get(target.session)
            if deliveries is None:
                per_session[target.session] = [delivery]
            else:
                deliveries.append(delivery)
            delivered = True
        return delivered

    def publish_forwarded(
        self,
        messages: ForwardedMessages,
        marks: tuple[ShareMark, ...] | None = None,
        publisher: Gate | None = None,
    ) -> None:
        """Pool: messages another worker forwarded (its hooks ran, it counted them and keeps
        the retained ones): to this worker's subscribers only, never onwards; and, per
        `marks`, to one member here of each share group that worker picked this one for
        (a message marked for share groups only does not go to the ordinary subscribers).
        `publisher` stands for the publishing connection there, for flow control."""
        plans = self._readable_plans if self.read_checks.active else None
        if type(messages) is WireMessages:  # a plain `Forward` of 3.x QoS 0 messages
            told = self._fan_out_wires(messages, plans)
            if told is not None:
                self._deliver(told, publisher)
                return
        per_session: dict[Any, list[Delivery]] = {}
        ops: list[Op] = []
        fan_out = self._fan_out
        if marks is None:  # a plain `Forward`
            for message in messages:
                fan_out(message, per_session, ops, plans)
        else:
            for message, mark in zip(messages, marks, strict=True):
                if mark.ordinary:
                    fan_out(message, per_session, ops, plans)
                for share in mark.shares:
                    self._share_here(message, share, per_session, ops)
        if ops:  # first: called from the loop, a tell may run the session at once, and its
            self._persistence.submit(ops)  # in-flight marks must follow the puts
        self._deliver(per_session, publisher)
        if marks is not None and self.remote is not None:
            self.remote.flush([], None)  # what had to go on to a third worker

    def _fan_out_wires(
        self, messages: WireMessages, plans: Plans | None
    ) -> dict[Any, DeliverWires] | None:
        """`_fan_out` of forwarded messages held as their 3.x QoS 0 PUBLISH packets
        (`core.wire_messages`), one run of a topic at a time, without building them: what
        each session is told, or None if a run's plan holds one of the frame's publishers.

        For such a message `_fan_out` decides the same for every subscriber of its topic's
        plan: QoS 0 (capped by the message's), RETAIN 0, never stored, the packet as it
        came, the subscriber's identifiers. Only No Local [MQTT-3.8.3-3] tells two messages
        of a run apart: a frame with a run whose plan holds one of its publishers goes
        message by message. Otherwise every subscriber of a run gets the run's packets (one
        list, extended in the frame's order per session) and its identifiers beside them.
        A worker receives every QoS 0 message another worker or node forwards it through
        here; building and routing each one was about half of a receiving worker's CPU in a
        QoS 0 fan-in across nodes.
        """
        plan_of = (plans or self._fan_out_plans).plan
        publishers = messages.publishers
        wires = messages.wires
        told: dict[Any, DeliverWires] = {}
        for topic, start, end in messages.runs:
            plan = plan_of(topic)
            if not plan:
                continue
            if any(target.client_id in publishers for target in plan):
                return None
            run = wires[start:end]
            for target in plan:
                session = target.session
                deliver = told.get(session)
                if deliver is None:
                    told[session] = DeliverWires(
                        messages, run.copy(), [(start, end, target.subscription_ids)]
                    )
                else:
                    deliver.wires += run
                    deliver.runs.append((start, end, target.subscription_ids))
        return told

    def deliver_orphans(self, messages: tuple[Message, ...], plans: FanOut) -> None:
        """Pool: messages another worker kept for the persistent sessions of a dead worker
        (`pool.orphans`), to the sessions this worker adopted from it (`plans` holds
        their routes only): stored, then told to each session as `OrphansIn`."""
        per_session: dict[Any, list[Delivery]] = {}
        ops: list[Op] = []
        for message in messages:
            self._fan_out(message, per_session, ops, plans)
        if ops:  # first: the sessions' in-flight marks must follow the puts
            self._persistence.submit(ops)
        for session, deliveries in per_session.items():
            tell_if_alive(session, OrphansIn(deliveries))

    def _share_here(
        self,
        message: Message,
        share: ShareOrigin,
        per_session: dict[Any, list[Delivery]],
        ops: list[Op],
    ) -> None:
        """A message another worker picked this one for, for the group `share` names: to a
        member here; if none is left that has not tried it (the last one left while the
        message travelled), to another worker's (never back here: this worker joins
        `tried`), else it is dropped."""
        local = self._shares.group(share.group, share.topic_filter)
        reads = self.read_checks if self.read_checks.active else None
        if local is not None and self._share_out(
            message, (local,), per_session, ops, share.tried, reads=reads
        ):
            return
        remote = self.remote
        group = None
        if remote is not None:
            group = remote.shares.pool_group(share.group, share.topic_filter, None)
        tried = share.tried | {stand_in(remote.worker if remote is not None else 0)}
        if group is None or not self._share_out(
            message, (group,), per_session, ops, tried, reads=reads
        ):
            logger.info(
                "shared subscriptions: no member of group %r (%r) is left to take a message on "
                "%r forwarded for it; dropped",
                share.group,
                share.topic_filter,
                message.topic,
            )
            self.dropped(message, DropReason.NO_SUBSCRIBERS)

    def _share_plan(self, topic: str) -> tuple[ShareGroup, ...]:
        """The share groups of a message on `topic`: this worker's, pool-wide in a pool."""
        groups = self._fan_out_plans.shared_plan(topic)
        remote = self.remote
        if remote is None or not remote.shares:
            return groups
        return remote.shares.pool_groups(topic, groups, self._shares.version)

    def _pool_group(self, share: ShareOrigin) -> ShareGroup | None:
        """The group a delivery came through, with its members pool-wide in a pool."""
        local = self._shares.group(share.group, share.topic_filter)
        remote = self.remote
        if remote is None or not remote.shares:
            return local
        return remote.shares.pool_group(share.group, share.topic_filter, local)

    def _share_out(
        self,
        message: Message,
        groups: tuple[ShareGroup, ...],
        per_session: dict[Any, list[Delivery]],
        ops: list[Op],
        tried: frozenset[str] = frozenset(),
        *,
        reads: ReadChecks | None = None,
    ) -> bool:
        """One delivery per share group, to the member the strategy picks (not one of
        `tried`, nor one that `reads` says may not read the topic); False if no group had
        a member to take it. A stand-in for another worker's members (no route) picked: the
        forwarder takes it to that worker, whose members are checked there."""
        delivered = False
        for group in groups:
            member = self._picker.pick(group, message.topic, message.publisher or "", tried)
            if reads is not None:
                member = self._readable_member(group, message, member, tried, reads)
            if member is None:
                continue
            delivered = True
            if member.route is None:
                assert self.remote is not None  # stand-ins exist in a pool only
                share = ShareOrigin(group.group, group.topic_filter, tried)
                self.remote.add_share(member.worker, message, share)
                continue
            options = member.route.options
            qos = options.qos if options.qos < message.qos else message.qos
            ids = (options.subscription_id,) if options.subscription_id else ()
            share = ShareOrigin(group.group, group.topic_filter, tried)
            # Live deliveries keep RETAIN only with Retain As Published [MQTT-3.3.1-12].
            retain = message.retain and options.retain_as_published
            if qos and member.route.persistent and self._persistence.enabled:
                seq = self._persistence.next_seq()
                delivery = Delivery(message, qos, retain, ids, None, seq, share)
                ops.append(PutMessage(member.client_id, seq, stored_delivery(delivery)))
            else:
                delivery = Delivery(message, qos, retain, ids, None, 0, share)
            per_session.setdefault(member.route.session, []).append(delivery)
        return delivered

    def _readable_member(
        self,
        group: ShareGroup,
        message: Message,
        member: ShareMember | None,
        tried: frozenset[str],
        reads: ReadChecks,
    ) -> ShareMember | None:
        """`member`, or if it may not read the message's topic, the next pick among those
        that have not been passed over (None: no member of the group may read it)."""
        topic = message.topic
        while member is not None and member.route is not None:
            if reads.keeps(member.route.session, topic):
                return member
            tried = tried | {member.client_id}
            member = self._picker.pick(group, topic, message.publisher or "", tried)
        return member

    def redispatch(self, deliveries: list[Delivery], giver: str) -> list[Delivery]:
        """Give shared deliveries that the member `giver` cannot keep to other members of
        their groups; returns those no other member could take (the group is gone, or
        every other member has tried), in order."""
        left = self.share_again(deliveries, giver)
        if len(left) < len(deliveries):
            logger.info(
                "shared subscriptions: %d messages of client %r went to other members of "
                "their groups",
                len(deliveries) - len(left),
                giver,
            )
        return left

    def share_again(self, deliveries: list[Delivery], giver: str) -> list[Delivery]:
        """As `redispatch`, unlogged: `giver` is a member's client id, or the stand-in id of
        a worker whose members did not take them (a node gone, cluster.numbered_forwarding)."""
        per_session: dict[Any, list[Delivery]] = {}
        ops: list[Op] = []
        left: list[Delivery] = []
        for delivery in deliveries:
            share = delivery.share
            group = None if share is None else self._pool_group(share)
            if share is None or group is None:
                left.append(delivery)
                continue
            tried = share.tried | {giver}
            reads = self.read_checks if self.read_checks.active else None
            if not self._share_out(
                delivery.message, (group,), per_session, ops, tried, reads=reads
            ):
                left.append(delivery)
        if ops:  # first: the sessions' in-flight marks must follow the puts
            self._persistence.submit(ops)
        for session, moved in per_session.items():
            tell_if_alive(session, Deliver(moved))
        if self.remote is not None:
            self.remote.flush([], None)  # those that went to another worker's members
        return left

    def dropped(self, message: Message, reason: DropReason) -> None:
        """Count a message that will not be routed, log it, and tell the message.dropped hook."""
        stats = self._stats
        stats.messages_dropped += 1
        if reason is _NO_SUBSCRIBERS:
            stats.dropped_no_subscribers += 1  # the common drop: one increment, no dict
        else:
            stats.count_drops(reason._value_, 1)
            where = f"from {message.publisher!r} on {message.topic!r}"
            report_loss(self._loss_log, reason, 1, where)
        if self._hooks.has(_MESSAGE_DROPPED):
            self._hooks.run(_MESSAGE_DROPPED, MessageDropped(message=message, reason=reason))

    def clear_retained(self, topic: str) -> None:
        """Clear `topic`'s retained message without publishing anything (the admin API): in
        the retainer, the store and, in a pool, every worker's replica."""
        clear = Message(topic=topic, payload=b"", retain=True)
        self._retainer.tell(StoreRetained([clear]))
        self._submit([DeleteRetained(topic)], [clear], None, None)

    def publish_internal(
        self, messages: list[Message], retained: list[Message] | None = None
    ) -> None:
        """Route messages the broker makes itself ($SYS) to the current subscribers and to one
        member of each share group, at QoS 0, and keep `retained` in the retainer (not in
        the store: stale after a restart).

        Not counted as received, never dropped or persisted, and no message.publish hook:
        it is the broker reporting, not a client's traffic. In a pool they are forwarded
        to the other workers' subscribers and retained-message replicas, as a publish is.
        """
        per_session: dict[Any, list[Delivery]] = {}
        remote = self.remote
        reads = self.read_checks if self.read_checks.active else None
        plans = None if reads is None else self._readable_plans
        any_shares = bool(self._shares.group_count or (remote is not None and remote.shares))
        ops: list[Op] = []  # stays empty: these messages are QoS 0
        for message in messages:
            self._fan_out(message, per_session, ops, plans)
            if remote is not None:
                remote.add(message)
            if any_shares:  # a share group reads $SYS too: one member gets each message
                groups = self._share_plan(message.topic)
                self._share_out(message, groups, per_session, ops, reads=reads)
        for session, deliveries in per_session.items():
            tell_if_alive(session, Deliver(deliveries))
        if retained:
            self._retainer.tell(StoreRetained(retained))
        if remote is not None:
            remote.flush(retained or [], None)
