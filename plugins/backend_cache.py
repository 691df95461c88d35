"""The decision cache of a plugin whose backend is a service: its options, keys and invalidation.

A backend plugin (`plugins.auth_http`, a database plugin) asks its service once per client
and credentials, and once per client, action, topic and QoS, and keeps the answer in a
`hooks.decision_cache.DecisionCache`:

- authentication answers by (client id, user name, peer host, a hash of the password): a
  keyed BLAKE2b digest whose key is random per process, so the cache holds nothing a
  password could be recovered or guessed from offline; never the password itself;
- authorisation answers by (client id, user name, action, topic, QoS): a rule may name
  the QoS it allows;
- an allowing answer is kept `cache_ttl` seconds, any other (deny, ignore, a refused
  CONNECT) `cache_negative_ttl` seconds; a backend that could not answer is never cached;
- forgotten all at once by `clear()` (the plugin calls it from `reload()`, on SIGHUP), and
  for one client when an operator kicks it (`register` watches client.disconnected for
  `DisconnectReason.ADMINISTRATIVE_ACTION`: the admin API's and `ctl`'s kick).

Hits and misses are counted in the backend's `core.backend_figures`, shown by `/metrics`.
`cache_ttl = 0` turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from core.backend_figures import figures_for
from hooks.decision_cache import DecisionCache
from hooks.events import (
    AuthenticateRequest,
    AuthorizeAction,
    AuthorizeRequest,
    ClientDisconnected,
    DisconnectReason,
)
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginConfigError

A = TypeVar("A")  # what the plugin keeps for an authentication
Z = TypeVar("Z")  # what the plugin keeps for an authorisation

_PUBLISH = AuthorizeAction.PUBLISH
_CREDENTIALS_KEY = os.urandom(32)  # per process: the digests mean nothing elsewhere


@dataclass(frozen=True, kw_only=True)  # no slots: a Config may subclass several
class CacheOptions:
    """The cache options of a backend plugin; its `Config` subclasses it."""

    cache_ttl: float = 60.0  # seconds an allowing answer is kept; 0: no cache
    cache_negative_ttl: float = 5.0  # seconds any other answer is kept; 0: not kept
    cache_max_entries: int = 100_000  # per cache (authentication, authorisation)


def credentials_digest(username: str | None, password: bytes | None) -> bytes:
    """A keyed digest of the credentials: equal for equal credentials in this process."""
    digest = hashlib.blake2b(key=_CREDENTIALS_KEY, digest_size=32)
    for part in (username, password):
        if part is None:
            digest.update(b"\x00")
        else:
            data = part.encode() if isinstance(part, str) else part
            digest.update(b"\x01" + len(data).to_bytes(4, "big") + data)
    return digest.digest()


def peer_host(peer: str) -> str:
    """The host of a peer address "host:port" ("[v6]:port"), without the port."""
    host, _, port = peer.rpartition(":")
    return host.strip("[]") if host and port.isdigit() else peer


AuthKey = tuple[str, str | None, str, bytes]
AclKey = tuple[str, str | None, bool, str, int]  # bool: PUBLISH (else SUBSCRIBE)


class BackendCache(Generic[A, Z]):
    """One backend plugin's authentication and authorisation caches."""

    def __init__(
        self, name: str, options: CacheOptions, clock: Callable[[], float] | None = None
    ) -> None:
        for option in ("cache_ttl", "cache_negative_ttl"):
            if getattr(options, option) < 0:
                raise PluginConfigError(f"plugin {name}: option {option!r} must be >= 0 seconds")
        if options.cache_max_entries < 1:
            raise PluginConfigError(f"plugin {name}: option 'cache_max_entries' must be >= 1")
        self.name = name
        self._authentications: DecisionCache[AuthKey, A] = _cache(name, options, clock)
        self._authorisations: DecisionCache[AclKey, Z] = _cache(name, options, clock)

    def register(self, bus: HookBus) -> None:
        """Forget a client's answers when an operator kicks it."""
        bus.register(HookPoint.CLIENT_DISCONNECTED, self._disconnected, owner=self.name)

    def authentication(self, request: AuthenticateRequest) -> A | None:
        return self._authentications.get(_auth_key(request))

    def keep_authentication(self, request: AuthenticateRequest, answer: A, allowed: bool) -> None:
        client = request.client
        self._authentications.put(
            _auth_key(request), answer, positive=allowed, client_id=client.client_id
        )

    def authorisation(self, request: AuthorizeRequest) -> Z | None:
        return self._authorisations.get(_acl_key(request))

    def keep_authorisation(self, request: AuthorizeRequest, answer: Z, allowed: bool) -> None:
        self._authorisations.put(
            _acl_key(request), answer, positive=allowed, client_id=request.client.client_id
        )

    def forget_client(self, client_id: str) -> None:
        self._authentications.forget_client(client_id)
        self._authorisations.forget_client(client_id)

    def clear(self) -> None:
        self._authentications.clear()
        self._authorisations.clear()

    def _disconnected(self, event: ClientDisconnected) -> None:
        if event.reason is DisconnectReason.ADMINISTRATIVE_ACTION:
            self.forget_client(event.client.client_id)


def _cache(
    name: str, options: CacheOptions, clock: Callable[[], float] | None
) -> DecisionCache[Any, Any]:
    return DecisionCache(
        max_entries=options.cache_max_entries,
        ttl=options.cache_ttl,
        negative_ttl=options.cache_negative_ttl,
        clock=time.monotonic if clock is None else clock,
        figures=figures_for(name),
    )


def _auth_key(request: AuthenticateRequest) -> AuthKey:
    client = request.client
    digest = credentials_digest(client.username, request.password)
    return client.client_id, client.username, peer_host(client.peer), digest


def _acl_key(request: AuthorizeRequest) -> AclKey:
    client = request.client
    # The action as a bool: an enum's `.value` and its hash are Python-level calls, and this
    # runs for every PUBLISH of a client whose plugin asks a backend.
    publish = request.action is _PUBLISH
    return client.client_id, client.username, publish, request.topic, request.qos
