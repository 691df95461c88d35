"""RetainedClears: the topics whose retained message was cleared, and when, for a while.

On one broker a clear (a retained PUBLISH with an empty payload [MQTT-3.3.1-10/11]) simply
deletes the topic's message. In a cluster a node that was away while another cleared a
topic still holds the old message, and the two nodes' snapshots meet when it comes back
(docs/cluster.md): without a memory of the clear, the old message would win, since nothing
newer exists to beat it, and come back on every node. Each worker's retainer therefore
remembers the clears it applies here, by topic and the clear's timestamp; a snapshot carries
them as empty retained messages, and a message older than a remembered clear is refused.

A clear is remembered for `keep_for` seconds (the longest absence it covers) and at most
`capacity` topics, those learnt first forgotten first; a newer message on the topic forgets
it at once. Pure state, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

KEEP_FOR = 24 * 3600.0  # seconds a clear is remembered
CAPACITY = 100_000  # topics remembered at most


class RetainedClears:
    """Topic name -> the time of its last clear, in the order learnt; see the module
    docstring. Times are the messages' wall-clock timestamps (`Message.timestamp`)."""

    __slots__ = ("_capacity", "_cleared", "_keep_for")

    def __init__(self, keep_for: float = KEEP_FOR, capacity: int = CAPACITY) -> None:
        self._keep_for = keep_for
        self._capacity = capacity
        self._cleared: dict[str, float] = {}  # insertion order is clear order

    def __len__(self) -> int:
        return len(self._cleared)

    def cleared(self, topic: str, timestamp: float, now: float) -> None:
        """`topic`'s retained message was cleared at `timestamp`."""
        cleared = self._cleared
        earlier = cleared.pop(topic, None)
        cleared[topic] = timestamp if earlier is None else max(earlier, timestamp)
        self._forget(now)

    def retained(self, topic: str, timestamp: float) -> None:
        """A message retained at `timestamp` replaced whatever `topic` had: a clear older
        than it is forgotten."""
        when = self._cleared.get(topic)
        if when is not None and when < timestamp:
            del self._cleared[topic]

    def overrides(self, topic: str, timestamp: float) -> bool:
        """Whether a clear of `topic` at or after `timestamp` is remembered (a message of
        that time must not be kept)."""
        when = self._cleared.get(topic)
        return when is not None and when >= timestamp

    def items(self, now: float) -> Iterator[tuple[str, float]]:
        """Every remembered clear, (topic, timestamp), in the order learnt."""
        self._forget(now)
        return iter(list(self._cleared.items()))

    def _forget(self, now: float) -> None:
        cleared = self._cleared
        while len(cleared) > self._capacity:
            del cleared[next(iter(cleared))]
        horizon = now - self._keep_for
        while cleared:
            topic = next(iter(cleared))
            if cleared[topic] >= horizon:
                break
            del cleared[topic]
