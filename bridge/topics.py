"""A bridge's topic lines: which filters to subscribe to on each side, and how a topic is
renamed as it crosses (pure).

Mosquitto's `topic pattern direction qos local-prefix remote-prefix`: locally the line
stands for the filter `local_prefix + pattern`, at the remote broker for `remote_prefix +
pattern`; a topic that crosses keeps what follows its prefix and takes the other side's
prefix. An empty pattern makes each prefix a whole topic (`topic "" out 1 a/b c/d`
forwards `a/b` as `c/d`). A topic is mapped by the first line of its direction whose filter
matches it and that it starts with (`site/#` also matches `site`, which does not start
with `site/`), in the order of the configuration.

Every message that crosses is renamed, so the answers are kept per topic (`CACHED` topics
each way, then started afresh): a publisher's topics repeat, and matching the lines again
was a third of the relay's time per message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bridge.config import TopicConfig
from mqtt.topics import matches

CACHED = 4096  # renamed topics remembered per direction


@dataclass(frozen=True, slots=True)
class Subscription:
    """A filter to subscribe to on one side, at a QoS."""

    topic_filter: str
    qos: int


class TopicMap:
    """The topic lines of one bridge, split by direction."""

    __slots__ = ("_in", "_out", "_to_local", "_to_remote")

    def __init__(self, topics: tuple[TopicConfig, ...]) -> None:
        self._out = [t for t in topics if t.direction in ("out", "both")]
        self._in = [t for t in topics if t.direction in ("in", "both")]
        self._to_remote: dict[str, str | None] = {}
        self._to_local: dict[str, str | None] = {}

    def local_subscriptions(self) -> list[Subscription]:
        """What the bridge's local session subscribes to: the outgoing lines."""
        return _unique(Subscription(t.local_prefix + t.pattern, t.qos) for t in self._out)

    def remote_subscriptions(self) -> list[Subscription]:
        """What the bridge subscribes to at the remote broker: the incoming lines."""
        return _unique(Subscription(t.remote_prefix + t.pattern, t.qos) for t in self._in)

    def remote_unsubscriptions(self) -> list[str]:
        """The remote filters of the outgoing-only lines that no incoming line subscribes
        to: a remote session kept from a configuration where they came in may still hold
        them (Mosquitto's `bridge_attempt_unsubscribe`)."""
        subscribed = {s.topic_filter for s in self.remote_subscriptions()}
        stale = (t.remote_prefix + t.pattern for t in self._out if t.direction == "out")
        return [f for f in dict.fromkeys(stale) if f not in subscribed]

    def to_remote(self, local_topic: str) -> str | None:
        """The remote name of a local topic going out; None: no outgoing line has it."""
        cache = self._to_remote
        try:
            return cache[local_topic]
        except KeyError:
            pass
        if len(cache) >= CACHED:
            cache.clear()
        name = cache[local_topic] = _rename(self._out, local_topic, True)
        return name

    def to_local(self, remote_topic: str) -> str | None:
        """The local name of a remote topic coming in; None: no incoming line has it."""
        cache = self._to_local
        try:
            return cache[remote_topic]
        except KeyError:
            pass
        if len(cache) >= CACHED:
            cache.clear()
        name = cache[remote_topic] = _rename(self._in, remote_topic, False)
        return name


def _rename(lines: list[TopicConfig], topic: str, out: bool) -> str | None:
    """`topic` renamed by the first of `lines` that has it (going out: from the local prefix
    to the remote one; coming in: the other way); None if none has it."""
    for line in lines:
        if out:
            mine, other = line.local_prefix, line.remote_prefix
        else:
            mine, other = line.remote_prefix, line.local_prefix
        if topic.startswith(mine) and matches(mine + line.pattern, topic):
            return other + topic[len(mine) :]
    return None


def _unique(subscriptions: Iterable[Subscription]) -> list[Subscription]:
    """One subscription per filter (the highest QoS of the lines that share it), in order."""
    best: dict[str, int] = {}
    for subscription in subscriptions:
        best[subscription.topic_filter] = max(
            subscription.qos, best.get(subscription.topic_filter, 0)
        )
    return [Subscription(topic_filter, qos) for topic_filter, qos in best.items()]
