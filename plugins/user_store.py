"""Authentication and ACL from a store of users and rules: what auth_postgres and auth_redis share.

A plugin built on this module supplies a `UserStore`, the blocking client of its database:

- `find_user(identity)`: the user's `UserRecord` (password hash, salt, superuser flag, and
  optionally the user's own hash algorithm), or None for an unknown user;
- `find_rules(identity)`: the user's ACL rules as dicts in EMQX's shape
  (`plugins.acl_rules`), in the order they apply;
- `close()`.

`UserStorePlugin` does the rest, as `plugins.auth_http` does for a service: each call runs in
the plugin's `Offload` threads (the password check too: PBKDF2 and bcrypt cost CPU on
purpose), answers are kept in a `BackendCache`, and a store that cannot answer is handled by
`on_failure`. Authentication: a user the store does not find (with the default queries,
any client without a user name) is IGNOREd (the next plugin, or `[auth] allow_anonymous`,
decides, as EMQX's "not found"), a password that matches is allowed (a superuser is then
allowed every PUBLISH and SUBSCRIBE without asking), any other is refused as bad
credentials; a stored hash no password can match is refused the same way and logged with
the user to fix. Authorisation: the first rule that matches decides; none: IGNORE; a rule
that cannot be read denies, logged with the rule to fix.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hooks.decisions import AUTH_BAD_CREDENTIALS, AuthResult, Decision
from hooks.events import AuthenticateRequest, AuthorizeRequest, ClientConnect, ClientInfo
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.acl_rules import Rule, parse_rule
from plugins.backend_cache import BackendCache, CacheOptions, peer_host
from plugins.base import PluginConfigError
from plugins.offload import BackendUnavailableError, Offload, OffloadOptions
from plugins.password_hash import HashSpec, StoredHashError, check_password

logger = logging.getLogger(__name__)

PLACEHOLDERS = ("username", "clientid", "peerhost")  # what a query or key may name: ${...}


@dataclass(frozen=True, kw_only=True)  # no slots: a Config subclasses it
class UserStoreOptions(OffloadOptions, CacheOptions):
    """The options of a user store plugin: EMQX's `password_hash_algorithm`, flattened."""

    password_hash_algorithm: str = "sha256"  # "sha256", "pbkdf2" or "bcrypt"
    salt_position: str = "prefix"  # sha256: "prefix", "suffix" or "disable"
    pbkdf2_mac: str = "sha256"  # pbkdf2: "sha256", "sha512" or "sha1"
    pbkdf2_iterations: int = 4096
    pbkdf2_dk_length: int = 0  # pbkdf2: bytes of the derived key; 0: the digest's size


@dataclass(frozen=True, slots=True)
class Identity:
    """What a query or key may name: `${username}`, `${clientid}`, `${peerhost}`."""

    username: str | None
    clientid: str
    peerhost: str


@dataclass(frozen=True, slots=True)
class UserRecord:
    password_hash: str | None
    salt: str
    superuser: bool
    algorithm: str | None  # this user's hash algorithm; None: the plugin's


class UserStore(Protocol):
    """The blocking client of a store, called only in `Offload` threads."""

    def find_user(self, identity: Identity) -> UserRecord | None: ...

    def find_rules(self, identity: Identity) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Authenticated:
    """What the cache keeps for a CONNECT: the answer, and whether it made a superuser."""

    answer: Decision
    superuser: bool
    problem: str | None = None  # a stored hash no password can match


def flag(value: object) -> bool:
    """A superuser column or field as a bool: true, 1, "1", "true", "t", "yes" are set."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "t", "yes")
    return bool(value) if isinstance(value, bool | int) else False


def identity_of(client: ClientInfo) -> Identity:
    return Identity(client.username, client.client_id, peer_host(client.peer))


class UserStorePlugin:
    """The hook side of a user store plugin; the plugin's `Plugin` builds it and its store."""

    def __init__(
        self,
        name: str,
        config: UserStoreOptions,
        store: UserStore,
        *,
        authenticates: bool,
        authorises: bool,
    ) -> None:
        spec = HashSpec(
            config.password_hash_algorithm,
            config.salt_position,
            config.pbkdf2_mac,
            config.pbkdf2_iterations,
            config.pbkdf2_dk_length,
        )
        problem = spec.problem()
        if problem is not None:
            raise PluginConfigError(f"plugin {name}: {problem}")
        self._name = name
        self._spec = spec
        self._store = store
        self._authenticates = authenticates
        self._authorises = authorises
        self._offload = Offload(name, config)
        self._cache: BackendCache[_Authenticated, Decision] = BackendCache(name, config)
        self._superusers: set[str] = set()  # client ids the store named superusers

    def register(self, bus: HookBus) -> None:
        if self._authenticates:
            bus.register(HookPoint.CLIENT_CONNECT, self.connect, owner=self._name)
            bus.register(HookPoint.CLIENT_AUTHENTICATE, self.authenticate, owner=self._name)
        if self._authorises:
            bus.register(HookPoint.CLIENT_AUTHORIZE, self.authorize, owner=self._name)
        self._cache.register(bus)

    def connect(self, event: ClientConnect) -> None:
        """A new CONNECT of this client id: it is nobody's superuser until authenticated."""
        self._superusers.discard(event.client.client_id)

    def authenticate(self, request: AuthenticateRequest) -> Decision | AuthResult:
        client = request.client
        if request.method is not None:
            return Decision.IGNORE
        cached = self._cache.authentication(request)
        if cached is None:
            identity = identity_of(client)
            try:
                cached = self._offload.call(self._check, identity, request.password or b"")
            except BackendUnavailableError as failure:
                return self._offload.auth_failure(failure)
            self._cache.keep_authentication(request, cached, cached.answer is Decision.ALLOW)
        if cached.problem is not None:
            logger.warning(
                "plugin %s: user %r cannot log in: %s; fix the user's row (or the plugin's "
                "password_hash_algorithm)",
                self._name,
                client.username,
                cached.problem,
            )
            return AUTH_BAD_CREDENTIALS
        if cached.superuser:
            self._superusers.add(client.client_id)
        return cached.answer

    def _check(self, identity: Identity, password: bytes) -> _Authenticated:
        """In an offload thread: find the user and check the password."""
        record = self._store.find_user(identity)
        if record is None:
            return _Authenticated(Decision.IGNORE, False)
        spec = (
            self._spec
            if record.algorithm is None
            else replace(self._spec, algorithm=record.algorithm)
        )
        try:
            if record.password_hash is None:
                raise StoredHashError("the user has no password hash")
            valid = check_password(spec, password, record.password_hash, record.salt)
        except StoredHashError as error:
            return _Authenticated(Decision.DENY, False, str(error))
        if not valid:
            return _Authenticated(Decision.DENY, False)
        return _Authenticated(Decision.ALLOW, record.superuser)

    def authorize(self, request: AuthorizeRequest) -> Decision:
        if request.client.client_id in self._superusers:
            return Decision.ALLOW
        cached = self._cache.authorisation(request)
        if cached is not None:
            return cached
        try:
            entries = self._offload.call(self._store.find_rules, identity_of(request.client))
        except BackendUnavailableError as failure:
            return self._offload.acl_failure(failure)
        decision = self._decide(request, entries)
        self._cache.keep_authorisation(request, decision, decision is Decision.ALLOW)
        return decision

    def _decide(self, request: AuthorizeRequest, entries: list[dict[str, Any]]) -> Decision:
        client = request.client
        for entry in entries:
            try:
                rule: Rule | None = parse_rule(
                    entry, client.client_id, client.username, f"plugin {self._name}"
                )
            except ValueError as error:
                logger.warning("%s; the request is denied: fix the rule", error)
                return Decision.DENY
            if rule is not None and rule.decides(request):
                return Decision.ALLOW if rule.allow else Decision.DENY
        return Decision.IGNORE

    def reload(self) -> None:
        """SIGHUP: forget the cached answers; the store is asked again."""
        self._cache.clear()

    def close(self) -> None:
        self._offload.close()
        self._store.close()


def substitute(template: str, identity: Identity) -> str | None:
    """`template` with its `${...}` placeholders filled in from `identity`; None if it names
    one the client does not have (`${username}` of a client without a user name)."""
    text = template
    for name in PLACEHOLDERS:
        placeholder = "${" + name + "}"
        if placeholder in text:
            value = getattr(identity, name)
            if value is None:
                return None
            text = text.replace(placeholder, value)
    return text


def check_placeholders(template: str, plugin: str, option: str) -> list[str]:
    """The placeholders `template` names, in order; PluginConfigError for an unknown one."""
    names = []
    rest = template
    while "${" in rest:
        start = rest.index("${")
        end = rest.find("}", start)
        if end < 0:
            raise PluginConfigError(f"plugin {plugin}: option {option!r}: unclosed '${{'")
        name = rest[start + 2 : end]
        if name not in PLACEHOLDERS:
            raise PluginConfigError(
                f"plugin {plugin}: option {option!r}: unknown placeholder ${{{name}}}; "
                f"known: {', '.join('${' + p + '}' for p in PLACEHOLDERS)}"
            )
        names.append(name)
        rest = rest[end + 1 :]
    return names
