"""SessionProtocol: one client id's session as a value; inputs in, bytes, store writes and
actions out (the vocabulary is `session.actions`).

It owns the `core.session_state.SessionState` (the QoS flows as explicit state: each
outgoing QoS 1/2 delivery's in-flight stage, the incoming QoS 2 ids awaiting PUBREL) and
turns what the state answers into what goes on the wire and into the store:

- **Attach** (`attach`): CONNACK first, with Session Present as the registry found the
  session [MQTT-3.2.2-2]; then the in-flight messages in their original order, PUBLISH
  with DUP=1 and PUBREL [MQTT-4.4.0-1], then the queue as the window allows. The window is
  the configured one lowered to the client's Receive Maximum [MQTT-3.3.4-9].
- **Outgoing** (`carry_out`): each delivery's PUBLISH (a 5.0 client's through
  `channel.outbound.Outbound`: properties, expiry left, topic aliases; one it cannot be
  sent leaves the window as if acknowledged [MQTT-3.1.2-25]), PUBREL after PUBREC, and the
  store writes that record the stages of a persistent session's stored messages.
- **Incoming QoS 2** (`inbound_qos2`, `release`): method B of [MQTT-4.3.3-2]: a new packet
  id is recorded and its message routed once, a repeated one is acknowledged again. PUBREC
  and PUBCOMP and their reason codes are chosen here (0x10 no subscriber, 0x97 quota or a
  failing store, 0x92 unknown id).
- **Subscriptions** (`subscribe`, `unsubscribe`, `acknowledge`): SUBACK/UNSUBACK codes and
  which retained messages the new subscriptions want.

Answers that promise something stored (PUBREC, PUBCOMP, SUBACK/UNSUBACK of a persistent
session) carry the store writes they wait for; the actor writes them after the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from channel.actions import SubscribeRequest, UnsubscribeRequest
from channel.outbound import Outbound
from channel.problems import refusal_ack
from channel.pubacks import refused_pubrec
from core.client import ClientInfo
from core.message import Message
from core.reasons import DisconnectReason
from core.session_state import (
    Action,
    Completed,
    Delivery,
    Dropped,
    Revoked,
    SendPublish,
    SendPubrel,
    SessionState,
    Stage,
    SubscriptionOptions,
    TooManyAwaitingRelError,
)
from mqtt.encoder import encode, encode_ack, encode_publish
from mqtt.packets import ConnAck, PacketType, SubAck, UnsubAck
from mqtt.reason_codes import ReasonCode
from router.shared import is_shared
from session.actions import (
    Close,
    DeleteRecord,
    Delivered,
    Forget,
    MarkSent,
    PutDelivery,
    Reply,
    Report,
    SaveSession,
    StoreWrite,
)

logger = logging.getLogger(__name__)

_PUBREL = PacketType.PUBREL
_PUBREC = PacketType.PUBREC
_PUBCOMP = PacketType.PUBCOMP
_AWAIT_PUBCOMP = Stage.AWAIT_PUBCOMP.value
_FIRST_STAGE_VALUE = {1: Stage.AWAIT_PUBACK.value, 2: Stage.AWAIT_PUBREC.value}

# One incoming QoS 2 PUBLISH as the channel hands it over: (packet id, the message to route
# or None if denied, the PUBREC the channel encoded).
InboundPublish = tuple[int, Message | None, bytes]


@dataclass(slots=True)
class Qos2Answer:
    """What the session does with a batch of incoming QoS 2 PUBLISHes."""

    to_route: list[Message]  # the new messages, routed once each
    pubrecs: list[bytes]  # the PUBRECs, in order, once `writes` and the routed copies are stored
    writes: list[StoreWrite]  # the awaiting-PUBREL ids, submitted before routing
    reports: list[Report]  # a close instead of a PUBREC


@dataclass(slots=True)
class Subscribed:
    """A SUBSCRIBE taken into the state: its SUBACK once the routes are in place."""

    ack: SubAck
    granted: list[tuple[str, SubscriptionOptions]]  # the routes to add, in order
    retained_for: list[tuple[str, SubscriptionOptions]]  # want retained messages after SUBACK


class SessionProtocol:
    # One per session: slots keep an idle session small.
    __slots__ = (
        "_subscriptions_changed",
        "client",
        "connected",
        "held_bytes",
        "out",
        "outbound",
        "replaced",
        "sent",
        "state",
        "store_enabled",
        "version",
        "writes",
    )

    def __init__(self, state: SessionState, version: int, store_enabled: bool) -> None:
        self.state = state
        self.version = version
        self.store_enabled = store_enabled  # the broker has a store
        self.replaced = False  # by a clean start's new session, which owns the stored state
        self.client: ClientInfo | None = None  # the last client attached
        self.outbound: Outbound | None = None  # the attached 5.0 connection's PUBLISH writer
        self.connected = False
        self.out: list[bytes] = []  # for the attached connection, in order
        self.writes: list[StoreWrite] = []  # for the store, in order (persistent only)
        self.held_bytes = _payload_bytes(state)  # of the in-flight window and the queue
        self.sent = 0  # messages written since the owner last counted them
        self._subscriptions_changed = True

    @property
    def stored(self) -> bool:
        """Whether the session's changes are written to the store."""
        return self.state.persistent and self.store_enabled and not self.replaced

    # ----- lifecycle ------------------------------------------------------------------

    def attach(
        self,
        client: ClientInfo,
        *,
        session_present: bool,
        connack_properties: dict[int, Any],
        max_inflight: int,
        now: float,
        delivered_hook: bool,
    ) -> list[Report]:
        """A connection takes the session: CONNACK, then the resends (module docstring)."""
        self.out.clear()  # what was not written to the previous connection is not for this one
        self.client = client
        self.version = client.protocol_version
        self.outbound = Outbound(client) if self.version >= 5 else None
        self.connected = True
        self.keep(client.keeps_session, client.session_expiry)
        # Never more unacknowledged PUBLISHes than the client's Receive Maximum [MQTT-3.3.4-9]
        self.state.max_inflight = min(max_inflight, client.receive_maximum)
        self.save()
        connack = ConnAck(session_present, 0, connack_properties)
        self.out.append(encode(connack, self.version))
        return self.carry_out(self.state.resume(now), now, delivered_hook)

    def detached(self) -> None:
        self.connected = False
        self.outbound = None

    def keep(self, persistent: bool, expiry: float) -> None:
        """Set whether the session outlives its connection, and for how long. A stored
        session that no longer does is deleted from the store now: once not persistent it
        writes nothing more, and a stale record would bring it back after a restart, or to
        the worker of a pool that resumes the id from the store."""
        if self.stored and not persistent:
            self.writes.append(DeleteRecord())
        self.state.persistent = persistent
        self.state.expiry = expiry

    def save(self, disconnected_at: float | None = None) -> None:
        """Write the session's record (a persistent session's)."""
        if self.stored:
            self.writes.append(self._record(disconnected_at))

    def delete(self) -> None:
        """Delete the session's record and messages (it ends, or a clean start replaced it)."""
        if self.stored:
            self.writes.append(DeleteRecord())

    def _record(self, disconnected_at: float | None = None) -> SaveSession:
        changed, self._subscriptions_changed = self._subscriptions_changed, False
        return SaveSession(disconnected_at, changed)

    def reauthorize(self, readable: Callable[[str, int], bool]) -> tuple[list[str], list[Report]]:
        """Drop what `readable` (the ACL's answer for the client) no longer allows: the
        revoked filters, and what to report."""
        actions = self.state.keep_readable(readable)
        revoked = [action.topic_filter for action in actions if type(action) is Revoked]
        if revoked:
            self._subscriptions_changed = True
            self.save()
        return revoked, self.carry_out(actions, 0.0, False)

    # ----- outgoing -------------------------------------------------------------------

    def carry_out(
        self, actions: Sequence[Action], now: float, delivered_hook: bool
    ) -> list[Report]:
        """Write what the session state asked for, in order, into `out` and `writes`;
        answer what the owner reports (a `Delivered` only with `delivered_hook`)."""
        reports: list[Report] = []
        self._carry_out(actions, now, delivered_hook, reports)
        if self.stored:
            for report in reports:
                if type(report) is Dropped and report.delivery.seq:
                    self._forget(report.delivery.seq)
        return reports

    def _carry_out(
        self, actions: Sequence[Action], now: float, delivered_hook: bool, reports: list[Report]
    ) -> None:
        plain = self.version < 5 and not delivered_hook
        out = self.out
        stored = self.stored
        sent = 0
        for action in actions:
            if type(action) is SendPublish:
                delivery = action.delivery
                data = self._encode(action.packet_id, delivery, action.dup, now, reports)
                if data is None:
                    continue  # not sendable: discarded from the window and reported
                out.append(data)
                if action.dup:
                    continue  # a resend: recorded, counted and reported when first sent
                if delivery.seq and stored:
                    self._mark(action.packet_id, delivery.seq, _FIRST_STAGE_VALUE[delivery.qos])
                sent += 1
                if delivered_hook:
                    reports.append(Delivered(delivery))
            elif type(action) is Delivery:  # QoS 0, written now
                self.held_bytes -= len(action.message.payload)
                data = action.wire if plain else None
                if data is None:
                    data = self._encode(0, action, False, now, reports)
                    if data is None:
                        continue
                out.append(data)
                sent += 1
                if delivered_hook:
                    reports.append(Delivered(action))
            else:
                self._settle(action, stored, reports)
        self.sent += sent

    def _settle(self, action: Action, stored: bool, reports: list[Report]) -> None:
        """An action that sends no PUBLISH: PUBREL, or one the owner reports."""
        if type(action) is SendPubrel:
            self._pubrel(action)
        elif type(action) is Completed:
            delivery = action.delivery
            self.held_bytes -= len(delivery.message.payload)
            if delivery.seq and stored:
                self._forget(delivery.seq)
            reports.append(action)
        elif type(action) is Dropped:
            self.held_bytes -= len(action.delivery.message.payload)
            reports.append(action)
        else:  # Revoked, ProtocolViolation
            reports.append(action)  # type: ignore[arg-type]

    def _pubrel(self, action: SendPubrel) -> None:
        packet_id = action.packet_id
        delivery = action.delivery
        if delivery is not None and delivery.seq and self.stored:
            self._mark(packet_id, delivery.seq, _AWAIT_PUBCOMP)
        if action.found:
            self.out.append(encode_ack(_PUBREL, packet_id, ReasonCode.SUCCESS, self.version))
        else:
            self.out.append(self._unknown_packet_id(_PUBREL, packet_id))

    def _encode(
        self, packet_id: int, delivery: Delivery, dup: bool, now: float, reports: list[Report]
    ) -> bytes | None:
        """The PUBLISH of `delivery`; None if a 5.0 client cannot be sent it (expired, too
        large): then it is discarded as if delivered [MQTT-3.1.2-25] and reported dropped."""
        outbound = self.outbound
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
                self.version,
            )
        data = outbound.publish(delivery, packet_id or None, dup, now)
        if type(data) is bytes:
            return data
        self.held_bytes -= len(delivery.message.payload)
        reports.append(Dropped(delivery, data))  # type: ignore[arg-type]
        if packet_id:
            discarded = self.state.discard(packet_id, self.connected, now)
            self._carry_out(discarded, now, False, reports)
        return None

    def _unknown_packet_id(self, packet_type: int, packet_id: int) -> bytes:
        """PUBREL/PUBCOMP 0x92 Packet Identifier not found, saying so to a 5.0 client that
        asked for problem information (3.x: the plain acknowledgement)."""
        assert self.client is not None
        why = f"packet identifier {packet_id} not found"
        code = ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
        return refusal_ack(packet_type, packet_id, code, why, self.client)

    def _mark(self, packet_id: int, seq: int, stage: str) -> None:
        writes = self.writes
        last = writes[-1] if writes else None
        if type(last) is MarkSent and last.stage == stage:  # one write per run
            last.marks.append((seq, packet_id))
        else:
            writes.append(MarkSent(stage, [(seq, packet_id)]))

    def _forget(self, seq: int) -> None:
        writes = self.writes
        last = writes[-1] if writes else None
        if type(last) is Forget:  # one write per run
            last.seqs.append(seq)
        else:
            writes.append(Forget([seq]))

    def forget(self, deliveries: Iterable[Delivery]) -> None:
        """These deliveries are the session's no more (another member or worker has them,
        they were not readable): their stored copies go."""
        if self.stored:
            for delivery in deliveries:
                if delivery.seq:
                    self._forget(delivery.seq)

    def store_delivery(self, delivery: Delivery, seq: int) -> Delivery:
        """A QoS 1/2 delivery the session stores itself, as `seq` (one a pool's previous
        owner forwarded without storing it)."""
        delivery = delivery._replace(seq=seq)
        self.writes.append(PutDelivery(seq, delivery))
        return delivery

    # ----- incoming QoS 2 -------------------------------------------------------------

    def inbound_qos2(self, publishes: list[InboundPublish], store_failing: bool) -> Qos2Answer:
        """Take QoS 2 PUBLISHes (`store_failing`: they cannot be made durable now)."""
        if store_failing:
            return self._refuse_qos2_for_store(publishes)
        to_route: list[Message] = []
        pubrecs: list[bytes] = []
        reports: list[Report] = []
        v5 = self.version >= 5
        for packet_id, message, pubrec in publishes:
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
                    assert self.client is not None
                    why = f"quota exceeded: {error}"
                    code = ReasonCode.QUOTA_EXCEEDED
                    pubrecs.append(refusal_ack(_PUBREC, packet_id, code, why, self.client))
                    continue
                logger.warning("closing %s: %s", self.state.client_id, error)
                reports.append(Close(DisconnectReason.PROTOCOL_ERROR, str(error)))
                break
            if is_new and message is not None:
                to_route.append(message)
            # Method B of [MQTT-4.3.3-2]: PUBREC now, never route the same packet id twice.
            pubrecs.append(pubrec)
        # PUBREC promises exactly-once: the awaiting-PUBREL id must be durable first.
        writes: list[StoreWrite] = [self._record()] if self.stored and pubrecs else []
        return Qos2Answer(to_route, pubrecs, writes, reports)

    def _refuse_qos2_for_store(self, publishes: list[InboundPublish]) -> Qos2Answer:
        """The store fails (docs/overload.md): a 5.0 client gets PUBREC 0x97 for each new
        QoS 2 message (the exchange ends there, nothing is recorded), a 3.x client is closed
        and resends on its next connection."""
        logger.warning(
            "the store fails (see its errors): refused %d QoS 2 publishes from %r %s; they are "
            "accepted again once the store commits (free disk space)",
            len(publishes),
            self.state.client_id,
            "with PUBREC 0x97" if self.version >= 5 else "by closing its MQTT 3.x connection",
        )
        answer = Qos2Answer([], [], [], [])
        if self.version < 5:
            answer.reports.append(Close(DisconnectReason.STORE_FAILING, "store fails"))
            return answer
        # In `pubrecs`, like accepted ones: they leave in their place among the connection's
        # acknowledgements (`channel.ack_order`).
        for packet_id, _message, pubrec in publishes:
            if packet_id in self.state.awaiting_rel:
                answer.pubrecs.append(pubrec)  # accepted before the store failed: still true
            else:
                assert self.client is not None
                answer.pubrecs.append(refused_pubrec(packet_id, self.client))
        return answer

    def mark_unmatched(
        self, publishes: list[InboundPublish], answer: Qos2Answer, unmatched: set[int]
    ) -> None:
        """PUBREC 0x10 for each routed message nobody subscribes to (5.0 section 3.5.2.1)."""
        if not unmatched or self.version < 5:
            return
        pubrecs = answer.pubrecs
        for index, (packet_id, message, _pubrec) in enumerate(publishes[: len(pubrecs)]):
            if message is not None and message.message_id in unmatched:
                code = ReasonCode.NO_MATCHING_SUBSCRIBERS
                pubrecs[index] = encode_ack(_PUBREC, packet_id, code, 5)

    def release(self, packet_ids: list[int]) -> Reply:
        """PUBREL: forget the ids; PUBCOMP each (5.0: 0x92 for an id not awaiting PUBREL)."""
        version = self.version
        pubcomps = b"".join(
            encode_ack(_PUBCOMP, packet_id, ReasonCode.SUCCESS, version)
            if self.state.release(packet_id)
            else self._unknown_packet_id(_PUBCOMP, packet_id)
            for packet_id in packet_ids
        )
        # A stale awaiting-PUBREL id restored after a crash would swallow the client's next
        # message with that id: PUBCOMP only once its removal is durable.
        return Reply(pubcomps, [self._record()] if self.stored else None)

    # ----- subscriptions --------------------------------------------------------------

    def subscribe(self, request: SubscribeRequest) -> Subscribed:
        codes: list[int] = []
        granted: list[tuple[str, SubscriptionOptions]] = []
        retained_for: list[tuple[str, SubscriptionOptions]] = []
        options_of = iter(request.granted())
        for index, subscription in enumerate(request.subscriptions):
            refused = request.refused.get(index)
            if refused is not None:
                codes.append(refused)  # the channel's refusal
                continue
            topic_filter, options = next(options_of)
            is_new = self.state.subscribe(topic_filter, options)
            self._subscriptions_changed = True
            granted.append((topic_filter, options))
            codes.append(subscription.qos)
            # Retain Handling (MQTT 5): 0 always, 1 only for a new subscription, 2 never;
            # never for a shared subscription [MQTT-4.8.2-6].
            wants_retained = options.retain_handling == 0 or (
                options.retain_handling == 1 and is_new
            )
            if wants_retained and not is_shared(topic_filter):
                retained_for.append((topic_filter, options))
        ack = SubAck(request.packet_id, codes, request.suback_properties or {})
        return Subscribed(ack, granted, retained_for)

    def unsubscribe(self, request: UnsubscribeRequest) -> tuple[UnsubAck, list[str]]:
        """The UNSUBACK, and the filters that were subscribed."""
        codes: list[int] = []
        removed: list[str] = []
        for topic_filter in request.topic_filters:
            existed = self.state.unsubscribe(topic_filter)
            self._subscriptions_changed = True
            codes.append(ReasonCode.SUCCESS if existed else ReasonCode.NO_SUBSCRIPTION_EXISTED)
            if existed:
                removed.append(topic_filter)
        return UnsubAck(request.packet_id, codes if self.version >= 5 else []), removed

    def acknowledge(self, ack: SubAck | UnsubAck) -> Reply:
        """The SUBACK/UNSUBACK once the routes are in place; a persistent session's only
        once its subscriptions are stored."""
        return Reply(encode(ack, self.version), [self._record()] if self.stored else None)


def _payload_bytes(state: SessionState) -> int:
    """The payload bytes a (restored) session holds in its window and queue."""
    if not state.inflight and not state.queue:
        return 0  # a new session (every clean one): no generators to set up
    held = sum(len(entry.delivery.message.payload) for entry in state.inflight.values())
    return held + sum(len(delivery.message.payload) for delivery in state.queue or ())
