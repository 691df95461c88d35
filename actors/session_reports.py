"""What a session reports of its protocol's answers: hooks, counters, loss lines, closes.

`session.protocol.SessionProtocol` answers, besides bytes and store writes, with reports
(`session.actions.Report`); the session actor hands each batch to `carry_out_reports`,
which runs the plugin hooks (message.delivered, message.acked, message.dropped,
session.unsubscribed), counts and logs the drops of the batch together, and tells the
attached client actor to close its connection when the protocol says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from actors.context import BrokerContext
from actors.losses import report_loss
from actors.messages import CloseConnection
from actors.runtime import tell_if_alive
from core.client import ClientInfo
from core.reasons import DisconnectReason, DropReason
from core.session_state import Completed, Dropped, ProtocolViolation, Revoked
from hooks.events import MessageAcked, MessageDelivered, MessageDropped, SessionUnsubscribed
from hooks.hookpoints import HookPoint
from session.actions import Close, Delivered, Report

logger = logging.getLogger(__name__)

_MESSAGE_ACKED = HookPoint.MESSAGE_ACKED  # Enum member lookups cost ~0.2 µs on hot paths


def carry_out_reports(
    reports: Sequence[Report],
    context: BrokerContext,
    client_id: str,
    client: ClientInfo | None,
    client_ref: Any,
) -> None:
    """Carry out `reports` of the session of `client_id`, in order; `client` is its last
    client, `client_ref` the client actor attached now (None: none)."""
    hooks = context.hooks
    drops: list[Dropped] = []
    for report in reports:
        if type(report) is Completed:
            if hooks.has(_MESSAGE_ACKED):
                username = client.username if client else None
                hooks.run(
                    _MESSAGE_ACKED,
                    MessageAcked(
                        client_id=client_id, username=username, message=report.delivery.message
                    ),
                )
        elif type(report) is Dropped:
            drops.append(report)
        elif type(report) is Delivered:
            hooks.run(
                HookPoint.MESSAGE_DELIVERED,
                MessageDelivered(
                    client_id=client_id,
                    username=client.username if client else None,
                    message=report.delivery.message,
                    qos=report.delivery.qos,
                ),
            )
        elif type(report) is Revoked:
            # The batch (routes, stored subscriptions, log line) is the session actor's.
            if hooks.has(HookPoint.SESSION_UNSUBSCRIBED):
                hooks.run(
                    HookPoint.SESSION_UNSUBSCRIBED,
                    SessionUnsubscribed(client_id=client_id, topic_filter=report.topic_filter),
                )
        elif type(report) is ProtocolViolation:
            # The client acknowledged a delivery with an ack that does not fit it: closed as
            # a Protocol Error (5.0: DISCONNECT 0x82 saying why).
            if client_ref is not None:  # else the connection is gone already
                logger.warning("closing client %r: protocol violation: %s", client_id, report.why)
                close = CloseConnection(DisconnectReason.PROTOCOL_ERROR, detail=report.why)
                tell_if_alive(client_ref, close)
        elif type(report) is Close:
            tell_if_alive(client_ref, CloseConnection(report.reason, detail=report.detail))
    if drops:
        report_dropped(drops, context, client_id)


def report_dropped(dropped: list[Dropped], context: BrokerContext, client_id: str) -> None:
    """Count, log and hook the drops of one batch (their stored copies are gone already:
    `SessionProtocol.carry_out`, `SessionProtocol.forget`)."""
    stats = context.stats
    stats.deliveries_dropped += len(dropped)
    bounds = context.queue_bounds
    if bounds and client_id in bounds:  # a bridge's session
        stats.count_session_drops(client_id, len(dropped))
    counts: dict[DropReason, int] = {}
    for drop in dropped:
        counts[drop.reason] = counts.get(drop.reason, 0) + 1
    for reason, count in counts.items():
        stats.count_drops(reason._value_, count)
        report_loss(context.loss_log, reason, count, f"for client {client_id!r}")
    hooks = context.hooks
    if hooks.has(HookPoint.MESSAGE_DROPPED):
        for drop in dropped:
            hooks.run(
                HookPoint.MESSAGE_DROPPED,
                MessageDropped(
                    message=drop.delivery.message, reason=drop.reason, client_id=client_id
                ),
            )
