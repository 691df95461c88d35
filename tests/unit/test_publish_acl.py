"""A connection's publish decisions kept for a while (channel.publish_acl): asked once per
topic and QoS within the TTL, again after it, after a reload, and always with a TTL of 0."""

from __future__ import annotations

from channel.publish_acl import MAX_ENTRIES, PublishAcl
from core.client import ClientInfo
from hooks.decisions import Decision
from hooks.events import AuthorizeRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint

CLIENT = ClientInfo(
    client_id="c1",
    username="u",
    peer="127.0.0.1:1",
    protocol_version=4,
    clean_start=True,
    keepalive=60,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Plugin:
    """Denies topics in `denied`; records every request."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []
        self.denied: set[str] = set()

    def __call__(self, request: AuthorizeRequest) -> Decision:
        self.asked.append((request.topic, request.qos))
        return Decision.DENY if request.topic in self.denied else Decision.ALLOW


def acl(ttl: float) -> tuple[PublishAcl, Plugin, HookBus, Clock]:
    bus = HookBus()
    plugin = Plugin()
    bus.register(HookPoint.CLIENT_AUTHORIZE, plugin, owner="p")
    clock = Clock()
    return PublishAcl(bus, ttl, clock), plugin, bus, clock


def test_an_answer_is_kept_per_topic_and_qos_until_its_ttl_ends() -> None:
    cache, plugin, _bus, clock = acl(60)
    plugin.denied = {"no"}
    answers = [cache.allows(CLIENT, t, q) for t, q in [("a", 1), ("a", 1), ("a", 0), ("no", 1)]]
    assert answers == [True, True, True, False]
    assert plugin.asked == [("a", 1), ("a", 0), ("no", 1)]
    assert not cache.allows(CLIENT, "no", 1)  # a denial is kept too
    plugin.denied = set()
    clock.now += 59.9
    assert not cache.allows(CLIENT, "no", 1)  # still the kept answer
    clock.now += 0.2
    assert cache.allows(CLIENT, "no", 1)  # past the TTL: asked again
    assert plugin.asked[-1] == ("no", 1) and len(plugin.asked) == 4


def test_a_reload_forgets_every_answer() -> None:
    cache, plugin, bus, _clock = acl(60)
    assert cache.allows(CLIENT, "a", 1)
    plugin.denied = {"a"}
    bus.decisions_changed()  # SIGHUP: the plugins re-read their rules
    assert not cache.allows(CLIENT, "a", 1)
    assert plugin.asked == [("a", 1), ("a", 1)]


def test_at_most_max_entries_are_kept_the_oldest_going_first() -> None:
    cache, plugin, _bus, _clock = acl(60)
    for index in range(MAX_ENTRIES + 1):
        cache.allows(CLIENT, f"t/{index}", 0)
    cache.allows(CLIENT, f"t/{MAX_ENTRIES}", 0)  # the newest: kept
    cache.allows(CLIENT, "t/1", 0)  # kept
    cache.allows(CLIENT, "t/0", 0)  # the oldest: went when the 33rd came
    assert len(plugin.asked) == MAX_ENTRIES + 2
    assert plugin.asked[-1] == ("t/0", 0)


def test_a_ttl_of_zero_asks_every_time() -> None:
    cache, plugin, _bus, _clock = acl(0)
    for _ in range(3):
        assert cache.allows(CLIENT, "a", 1)
    assert len(plugin.asked) == 3


def test_sys_topics_are_refused_whatever_is_kept() -> None:
    cache, plugin, _bus, _clock = acl(60)
    assert not cache.allows(CLIENT, "$SYS/broker/x", 0)
    assert plugin.asked == []  # the broker's own rule, not the plugins'
