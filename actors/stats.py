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
