"""A bridge's topic lines: which filters to subscribe to on each side, and how a topic is
renamed as it crosses (pure).

Mosquitto's `topic pattern direction qos local-prefix remote-prefix`: locally the line
stands for the filter `local_prefix + pattern`, at the remote broker for `remote_prefix +
pattern`; a topic that crosses keeps what follows its prefix and takes the other side's
prefix. An empty pattern makes each prefix a whole topic (`topic "" out 1 a/b c/d`
forwards `a/b` as `c/d`). A topic is mapped by the first line of its direction whose filter
matches it and that it starts with (`site/#` also matches `site`, which does not start
with `site/`), in the order of the configuration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bridge.config import TopicConfig
from mqtt.topics import matches


@dataclass(frozen=True, slots=True)
class Subscription:
    """A filter to subscribe to on one side, at a QoS."""

    topic_filter: str
    qos: int


class TopicMap:
    """The topic lines of one bridge, split by direction."""

    __slots__ = ("_in", "_out")

    def __init__(self, topics: tuple[TopicConfig, ...]) -> None:
        self._out = [t for t in topics if t.direction in ("out", "both")]
        self._in = [t for t in topics if t.direction in ("in", "both")]

    def local_subscriptions(self) -> list[Subscription]:
        """What the bridge's local session subscribes to: the outgoing lines."""
        return _unique(Subscription(t.local_prefix + t.pattern, t.qos) for t in self._out)

    def remote_subscriptions(self) -> list[Subscription]:
        """What the bridge subscribes to at the remote broker: the incoming lines."""
        return _unique(Subscription(t.remote_prefix + t.pattern, t.qos) for t in self._in)

    def to_remote(self, local_topic: str) -> str | None:
        """The remote name of a local topic going out; None: no outgoing line has it."""
        for line in self._out:
            if local_topic.startswith(line.local_prefix) and matches(
                line.local_prefix + line.pattern, local_topic
            ):
                return line.remote_prefix + local_topic[len(line.local_prefix) :]
        return None

    def to_local(self, remote_topic: str) -> str | None:
        """The local name of a remote topic coming in; None: no incoming line has it."""
        for line in self._in:
            if remote_topic.startswith(line.remote_prefix) and matches(
                line.remote_prefix + line.pattern, remote_topic
            ):
                return line.local_prefix + remote_topic[len(line.remote_prefix) :]
        return None


def _unique(subscriptions: Iterable[Subscription]) -> list[Subscription]:
    """One subscription per filter (the highest QoS of the lines that share it), in order."""
    best: dict[str, int] = {}
    for subscription in subscriptions:
        best[subscription.topic_filter] = max(
            subscription.qos, best.get(subscription.topic_filter, 0)
        )
    return [Subscription(topic_filter, qos) for topic_filter, qos in best.items()]
