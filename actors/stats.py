"""Broker-wide counters (logged at shutdown; the base for $SYS topics); plain integers, no locking.

All actors of a worker run in one gevent loop, so increments never race.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class BrokerStats:
    connections: int = 0
    messages_received: int = 0  # application messages accepted from publishers
    messages_sent: int = 0  # PUBLISH packets written to subscribers
    messages_dropped: int = 0  # no subscriber, denied, dropped by a plugin
    deliveries_dropped: int = 0  # queue overflow, slow consumer, QoS 0 to an offline session
    flow_pauses: int = 0  # a session went over its high-water mark (its publishers paused)
    stalls: int = 0  # a session stuck over its mark for max_stall fell back to drop policy
    memory_alarms: int = 0  # the memory watermark was passed (every publisher blocked)
    rate_limited: int = 0  # reads paused because a client was over its rate limit
