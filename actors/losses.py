"""Telling the operator about lost messages: one rate-limited log line per drop reason.

Every message the broker does not deliver is counted (`BrokerStats`) and reported to the
`message.dropped` hook by whoever drops it; this module adds the log line, at most one per
second per reason with counts (`net.rate_limited_log`), naming the setting that decides.
A message with no subscriber is not a loss (nobody was owed it) and is not logged.
"""

from __future__ import annotations

import logging

from core.reasons import DropReason
from net.rate_limited_log import RateLimitedLog

# reason -> (log level, why, in words an operator can act on)
_EXPLAINED: dict[DropReason, tuple[int, str]] = {
    DropReason.QUEUE_FULL: (
        logging.WARNING,
        "the session queue is full, oldest dropped (limits.max_queued_messages / "
        "max_queued_bytes; a bridge's: its queue_max_messages / queue_max_bytes)",
    ),
    DropReason.SLOW_CONSUMER: (
        logging.WARNING,
        "QoS 0 to a subscriber that is not reading fast enough (limits.max_write_buffer)",
    ),
    DropReason.EXPIRED: (logging.WARNING, "its Message Expiry Interval passed before delivery"),
    DropReason.PACKET_TOO_LARGE: (
        logging.WARNING,
        "larger than the Maximum Packet Size the subscriber set in its CONNECT",
    ),
    DropReason.PAYLOAD_FORMAT_INVALID: (
        logging.INFO,
        "payload marked UTF-8 is not (mqtt.validate_utf8_payloads), refused with 0x99",
    ),
    DropReason.NOT_AUTHORIZED: (
        logging.INFO,
        "not authorised (the ACL, or a client write to $SYS)",
    ),
    DropReason.BY_PLUGIN: (logging.INFO, "dropped by a message.publish plugin"),
    DropReason.QOS0_OFFLINE: (
        logging.INFO,
        "QoS 0 to an offline session is not queued (limits.queue_qos0 = false)",
    ),
}


def report_loss(log: RateLimitedLog, reason: DropReason, count: int, where: str) -> None:
    """Log `count` messages dropped for `reason`; `where` names the client and topic."""
    explained = _EXPLAINED.get(reason)
    if explained is None:
        return
    level, why = explained
    log.note(
        f"dropped messages ({reason.value})",
        count,
        f"dropped {count} message{'s' if count != 1 else ''} {where}: {why}",
        level,
    )
