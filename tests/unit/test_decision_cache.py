"""hooks.decision_cache and plugins.backend_cache: TTLs, negative entries, bounds, forgetting
a kicked client, credentials kept only as a keyed digest, and the hit/miss counters."""

from __future__ import annotations

import pytest

from core.backend_figures import BackendFigures, figures_for
from core.client import ClientInfo
from hooks.decision_cache import DecisionCache
from hooks.decisions import Decision
from hooks.events import (
    AuthenticateRequest,
    AuthorizeAction,
    AuthorizeRequest,
    ClientDisconnected,
    DisconnectReason,
)
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.backend_cache import BackendCache, CacheOptions, credentials_digest, peer_host
from plugins.base import PluginConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_positive_and_negative_answers_expire_after_their_own_ttl() -> None:
    clock = Clock()
    figures = BackendFigures()
    cache: DecisionCache[str, str] = DecisionCache(
        max_entries=10, ttl=60, negative_ttl=5, clock=clock, figures=figures
    )
    cache.put("allowed", "yes")
    cache.put("denied", "no", positive=False)
    clock.now += 4.9
    assert (cache.get("allowed"), cache.get("denied")) == ("yes", "no")
    clock.now += 0.2
    assert (cache.get("allowed"), cache.get("denied")) == ("yes", None)
    clock.now += 60
    assert cache.get("allowed") is None and len(cache) == 0
    assert (figures.cache_hits, figures.cache_misses) == (3, 2)


def test_a_zero_ttl_keeps_nothing_and_none_keeps_until_cleared() -> None:
    clock = Clock()
    off: DecisionCache[str, int] = DecisionCache(max_entries=10, ttl=0, clock=clock)
    off.put("a", 1)
    assert off.get("a") is None
    forever: DecisionCache[str, int] = DecisionCache(max_entries=10, clock=clock)
    forever.put("a", 1)
    clock.now += 1e9
    assert forever.get("a") == 1
    forever.clear()
    assert forever.get("a") is None


def test_the_oldest_entry_goes_when_full() -> None:
    cache: DecisionCache[int, int] = DecisionCache(max_entries=3)
    for number in range(5):
        cache.put(number, number)
    assert [cache.get(number) for number in range(5)] == [None, None, 2, 3, 4]
    cache.put(2, 20)  # replacing an entry makes no room
    assert len(cache) == 3 and cache.get(2) == 20


def test_forgetting_a_client_drops_only_its_answers() -> None:
    cache: DecisionCache[tuple[str, str], bool] = DecisionCache(max_entries=10)
    cache.put(("alice", "a"), True, client_id="alice")
    cache.put(("alice", "b"), False, client_id="alice")
    cache.put(("bob", "a"), True, client_id="bob")
    assert cache.forget_client("alice") == 2
    assert cache.get(("alice", "a")) is None and cache.get(("bob", "a")) is True
    assert cache.forget_client("alice") == 0


def client(client_id: str = "c1", username: str | None = "alice") -> ClientInfo:
    return ClientInfo(
        client_id=client_id,
        username=username,
        peer="10.0.0.7:51234",
        protocol_version=4,
        clean_start=True,
        keepalive=60,
    )


def login(password: bytes | None, client_id: str = "c1") -> AuthenticateRequest:
    return AuthenticateRequest(client=client(client_id), password=password)


def test_credentials_are_kept_as_a_keyed_digest_never_the_password() -> None:
    name = "test.backend_cache.digest"
    cache: BackendCache[Decision, Decision] = BackendCache(name, CacheOptions())
    cache.keep_authentication(login(b"s3cret"), Decision.ALLOW, allowed=True)
    assert cache.authentication(login(b"s3cret")) is Decision.ALLOW
    assert cache.authentication(login(b"wrong")) is None
    assert cache.authentication(login(b"s3cret", client_id="c2")) is None
    keys = list(cache._authentications._entries)
    assert keys == [("c1", "alice", "10.0.0.7", credentials_digest("alice", b"s3cret"))]
    assert b"s3cret" not in repr(keys).encode()
    # No separator ambiguity: ("ab", "c") and ("a", "bc") differ.
    assert credentials_digest("ab", b"c") != credentials_digest("a", b"bc")
    assert credentials_digest(None, None) != credentials_digest("", b"")
    figures = figures_for(name)
    assert (figures.cache_hits, figures.cache_misses) == (1, 2)


def test_acl_answers_are_kept_per_client_action_topic_and_qos() -> None:
    cache: BackendCache[Decision, Decision] = BackendCache(
        "test.backend_cache.acl", CacheOptions(cache_negative_ttl=30)
    )
    publish = AuthorizeRequest(client=client(), action=AuthorizeAction.PUBLISH, topic="t", qos=1)
    cache.keep_authorisation(publish, Decision.DENY, allowed=False)
    assert cache.authorisation(publish) is Decision.DENY
    subscribe = AuthorizeRequest(
        client=client(), action=AuthorizeAction.SUBSCRIBE, topic="t", qos=1
    )
    assert cache.authorisation(subscribe) is None
    # A rule may allow one QoS and not another (EMQX's qos column): QoS is part of the key.
    qos0 = AuthorizeRequest(client=client(), action=AuthorizeAction.PUBLISH, topic="t", qos=0)
    assert cache.authorisation(qos0) is None


def test_a_kick_forgets_the_clients_answers_and_other_disconnects_do_not() -> None:
    cache: BackendCache[Decision, Decision] = BackendCache(
        "test.backend_cache.kick", CacheOptions()
    )
    bus = HookBus()
    cache.register(bus)
    request = AuthorizeRequest(client=client(), action=AuthorizeAction.PUBLISH, topic="t", qos=0)
    cache.keep_authorisation(request, Decision.ALLOW, allowed=True)
    cache.keep_authentication(login(b"pw"), Decision.ALLOW, allowed=True)
    gone = ClientDisconnected(client=client(), reason=DisconnectReason.CLIENT_DISCONNECT)
    bus.run(HookPoint.CLIENT_DISCONNECTED, gone)
    assert cache.authorisation(request) is Decision.ALLOW
    kicked = ClientDisconnected(client=client(), reason=DisconnectReason.ADMINISTRATIVE_ACTION)
    bus.run(HookPoint.CLIENT_DISCONNECTED, kicked)
    assert cache.authorisation(request) is None
    assert cache.authentication(login(b"pw")) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cache_ttl": -1.0}, "'cache_ttl' must be >= 0"),
        ({"cache_negative_ttl": -1.0}, "'cache_negative_ttl' must be >= 0"),
        ({"cache_max_entries": 0}, "'cache_max_entries' must be >= 1"),
    ],
)
def test_bad_cache_options_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        BackendCache("test.backend_cache.options", CacheOptions(**options))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("peer", "host"),
    [("10.0.0.7:51234", "10.0.0.7"), ("[::1]:1883", "::1"), ("unix", "unix")],
)
def test_the_peer_host_leaves_the_port_out(peer: str, host: str) -> None:
    assert peer_host(peer) == host
