"""Broker-wide counters of one worker: plain integers, no locking, read by `$SYS`, `/metrics`,
the admin API and the shutdown log line.

All actors of a worker run in one gevent loop, so increments never race; each figure is
changed by the actor that owns the event (the client actor counts connections and bytes read,
the dispatcher messages in and dropped, the session actor messages out). Readers copy what they
need between two yields. Everything a worker counts lives here (plus the listeners' open
connections, the store's commit latency and the banned CONNECTs, which their owners keep), so
that a pool of workers can later sum them field by field.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from core.message import Message

TOP_TOPICS_LIMIT = 10_000  # topics counted before the counts are halved and the rare dropped
# The "top topics" view counts the topics of one publish batch in this many: a ranking, not a
# tally (a dict update per message costs the QoS 0 fan-in path a few per cent).
TOPIC_SAMPLE = 16


def _by_qos() -> list[int]:
    return [0, 0, 0]


@dataclass(slots=True)
class BrokerStats:
    started_at: float = field(default_factory=time.time)
    connections: int = 0  # clients connected now (CONNACK sent, not yet ended)
    connections_total: int = 0  # CONNECTs accepted since start
    connections_max: int = 0  # the most connected at once
    connected_by_version: dict[int, int] = field(default_factory=lambda: {3: 0, 4: 0, 5: 0})
    messages_received: int = 0  # application messages accepted from publishers
    received_by_qos: list[int] = field(default_factory=_by_qos)
    messages_sent: int = 0  # PUBLISH packets written to subscribers
    messages_dropped: int = 0  # no subscriber, denied, dropped by a plugin
    deliveries_dropped: int = 0  # queue overflow, slow consumer, QoS 0 to an offline session
    flow_pauses: int = 0  # a session went over its high-water mark (its publishers paused)
    stalls: int = 0  # a session stuck over its mark for max_stall fell back to drop policy
    memory_alarms: int = 0  # the memory watermark was passed (every publisher blocked)
    rate_limited: int = 0  # reads paused because a client was over its rate limit
    dropped_no_subscribers: int = 0  # of messages_dropped: kept apart, it is the common one
    dropped_by_reason: dict[str, int] = field(default_factory=dict)  # every other drop
    # Deliveries dropped from the sessions with a queue bound of their own (the bridges'
    # `$bridge/<name>`: `BrokerContext.queue_bounds`), by client id: the admin API's
    # "dropped" of each bridge.
    dropped_by_bounded_session: dict[str, int] = field(default_factory=dict)
    bytes_received: int = 0  # MQTT bytes read (after TLS/WebSocket)
    bytes_sent: int = 0  # MQTT bytes written by client and session actors
    topics: dict[str, int] = field(default_factory=dict)  # sampled messages per topic
    publish_batches: int = 0  # batches routed: one in TOPIC_SAMPLE has its topics counted

    def count_drops(self, reason: str, count: int) -> None:
        self.dropped_by_reason[reason] = self.dropped_by_reason.get(reason, 0) + count

    def count_session_drops(self, client_id: str, count: int) -> None:
        by_session = self.dropped_by_bounded_session
        by_session[client_id] = by_session.get(client_id, 0) + count

    def count_topics(self, messages: list[Message]) -> None:
        """Count the topics of one batch in TOPIC_SAMPLE for the "top topics" view (bounded
        in memory)."""
        self.publish_batches += 1
        if self.publish_batches % TOPIC_SAMPLE:
            return
        counts = self.topics
        for message in messages:
            topic = message.topic
            counts[topic] = counts.get(topic, 0) + 1
        if len(counts) > TOP_TOPICS_LIMIT:
            self.topics = {t: n // 2 for t, n in counts.items() if n > 1}

    def top_topics(self, limit: int) -> list[tuple[str, int]]:
        return sorted(self.topics.items(), key=lambda item: -item[1])[:limit]
