"""auth_jwt: a JSON Web Token as the password (or user name), with its ACL in a claim (EMQX's).

A CONNECT whose password (`from_field = "username"`: user name) has the shape of a JWT
(three dot-separated parts) is authenticated by the token: its signature is checked with
PyJWT against the configured keys, HS256 with `secret`, RS256 or ES256 with `public_key`
(a PEM file) or the keys of a JWKS (`jwks_file`, or `jwks_url` fetched off the event loop and
refreshed every `jwks_refresh` seconds, and sooner for a key id it does not know); `exp` and
`nbf` are checked when present. The algorithm comes from the key, never from the token
alone: an HS256 token is only checked with `secret`, so a public key cannot be used as an
HMAC secret. A valid token is allowed and, with `exp`, the connection is closed when it
expires (5.0: DISCONNECT 0x87; `AuthResult.expires_at`). Anything else that looks like a JWT
is refused (bad credentials); a password that does not is IGNOREd, so another plugin (a
password file) can serve those clients.

The token's `acl` claim (`acl_claim`) gives the connection's rules, in EMQX 5's shape

    "acl": [{"permission": "allow" | "deny", "action": "publish" | "subscribe" | "all",
             "topic": "devices/${clientid}/#", "qos": [0, 1]}, ...]

(the first rule that matches decides; `qos` optional; a topic `eq t/#` is that filter
literally; `${clientid}` and `${username}` are replaced) or EMQX 4's
`{"pub": [...], "sub": [...], "all": [...]}` (all allow). A SUBSCRIBE is matched when the
rule's filter covers the whole requested filter (as `plugins.acl_file`). Nothing matching,
or no claim: IGNORE. A claim this plugin cannot read refuses the token (logged).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import urllib3
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from hooks.decisions import AUTH_BAD_CREDENTIALS, AuthResult, Decision
from hooks.events import (
    AuthenticateRequest,
    AuthorizeRequest,
    ClientDisconnected,
    ClientInfo,
)
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.acl_rules import Rule, parse_rule
from plugins.base import PluginConfigError, PluginContext, parse_options
from plugins.offload import BackendUnavailableError, Offload, OffloadOptions

logger = logging.getLogger(__name__)

_ASYMMETRIC = ("RS256", "ES256")
_UNKNOWN_KID_REFETCH = 10.0  # seconds between JWKS fetches made for an unknown key id
_LEGACY = {"pub": "publish", "sub": "subscribe", "all": "all"}


@dataclass(frozen=True, kw_only=True)
class Config(OffloadOptions):
    secret: str | None = None  # HS256 shared secret
    public_key: Path | None = None  # PEM public key: RS256 (RSA) or ES256 (EC P-256)
    jwks_file: Path | None = None  # a JSON Web Key Set (RFC 7517) in a file
    jwks_url: str | None = None  # ... or at a URL (fetched off the loop, cached)
    jwks_refresh: float = 300.0  # seconds a fetched JWKS is used before fetching it again
    from_field: str = "password"  # "password" or "username": where the token is
    acl_claim: str = "acl"  # the claim holding the connection's ACL rules
    disconnect_on_expiry: bool = True  # close the connection at the token's exp


class Keys:
    """The verification keys, by algorithm and key id (None: the key without an id)."""

    def __init__(self, secret: str | None, public_key: Any | None, jwks: dict[str, Any] | None):
        self.secret = secret
        self.public_key = public_key
        self.jwks = _jwks_keys(jwks) if jwks is not None else {}

    def key_for(self, algorithm: str, kid: str | None) -> Any | None:
        if algorithm == "HS256":
            return self.secret
        if algorithm not in _ASYMMETRIC:
            return None
        found = _jwks_key(self.jwks, algorithm, kid)
        public_key = self.public_key
        if found is None and kid is None and _algorithm_of(public_key) == algorithm:
            found = public_key
        return found


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = name = context.plugin_name
        config = parse_options(Config, options, name)
        if config.from_field not in ("password", "username"):
            raise PluginConfigError(
                f'plugin {name}: option \'from_field\' must be "password" or "username", '
                f"got {config.from_field!r}"
            )
        sources = (config.secret, config.public_key, config.jwks_file, config.jwks_url)
        if all(source is None for source in sources):
            raise PluginConfigError(
                f"plugin {name}: set a key: 'secret', 'public_key', 'jwks_file' or 'jwks_url'"
            )
        if config.jwks_url is not None and not config.jwks_url.startswith(("http://", "https://")):
            raise PluginConfigError(f"plugin {name}: option 'jwks_url' must be an http(s) URL")
        self._config = config
        self._context = context
        self._keys = self._load_keys()
        self._offload = Offload(name, config)
        self._http = urllib3.PoolManager(
            maxsize=1, retries=False, timeout=urllib3.Timeout(config.timeout)
        )
        self._fetched_at = -float("inf")  # when jwks_url was last fetched (monotonic)
        self._remote: dict[tuple[str, str | None], Any] = {}  # jwks_url's keys
        self._grants: dict[tuple[str, str], tuple[Rule, ...]] = {}  # (client id, peer)

    def _load_keys(self) -> Keys:
        config, name = self._config, self._name
        public_key = None
        if config.public_key is not None:
            path = self._context.resolve(config.public_key)
            try:
                public_key = _load_pem(path.read_bytes())
            except (OSError, ValueError) as error:
                raise PluginConfigError(
                    f"plugin {name}: public_key {path}: {error}; give a PEM RSA or EC P-256 "
                    "public key"
                ) from error
        jwks = None
        if config.jwks_file is not None:
            path = self._context.resolve(config.jwks_file)
            try:
                jwks = json.loads(path.read_text(encoding="utf-8"))
                _jwks_keys(jwks)
            except (OSError, ValueError, jwt.PyJWTError) as error:
                raise PluginConfigError(f"plugin {name}: jwks_file {path}: {error}") from error
        return Keys(config.secret, public_key, jwks)

    def register(self, bus: HookBus) -> None:
        bus.register(HookPoint.CLIENT_AUTHENTICATE, self.authenticate, owner=self._name)
        bus.register(HookPoint.CLIENT_AUTHORIZE, self.authorize, owner=self._name)
        bus.register(HookPoint.CLIENT_DISCONNECTED, self.disconnected, owner=self._name)

    # ----- authentication -----------------------------------------------------------------

    def authenticate(self, request: AuthenticateRequest) -> Decision | AuthResult:
        if request.method is not None:
            return Decision.IGNORE
        client = request.client
        self._grants.pop(_connection(client), None)
        token = _token(request, self._config.from_field)
        if token is None:
            return Decision.IGNORE
        try:
            header = jwt.get_unverified_header(token)
            algorithm, kid = header.get("alg"), header.get("kid")
            key = self._key(algorithm, kid)
            if key is None or not isinstance(algorithm, str):
                raise jwt.InvalidKeyError(f"no key for alg {algorithm!r}, kid {kid!r}")
            claims = jwt.decode(token, key, algorithms=[algorithm])
            rules = self._rules(claims, client)
        except BackendUnavailableError as failure:
            return self._offload.auth_failure(failure)
        except (jwt.PyJWTError, ValueError, TypeError) as error:
            logger.info(
                "plugin %s: client %s: token refused: %s", self._name, client.client_id, error
            )
            return AUTH_BAD_CREDENTIALS
        self._grants[_connection(client)] = rules
        expires = claims.get("exp")
        if self._config.disconnect_on_expiry and isinstance(expires, int | float):
            return AuthResult(allowed=True, expires_at=float(expires))
        return Decision.ALLOW

    def _key(self, algorithm: Any, kid: Any) -> Any | None:
        if not isinstance(algorithm, str) or not (kid is None or isinstance(kid, str)):
            return None
        key = self._keys.key_for(algorithm, kid)
        if key is not None or self._config.jwks_url is None or algorithm not in _ASYMMETRIC:
            return key
        age = time.monotonic() - self._fetched_at
        unknown = (algorithm, kid) not in self._remote
        if age > self._config.jwks_refresh or (unknown and age > _UNKNOWN_KID_REFETCH):
            self._refresh()
        return _jwks_key(self._remote, algorithm, kid)

    def _refresh(self) -> None:
        """Fetch jwks_url in an offload thread; on failure keep the keys fetched before
        (raise only when there are none)."""
        url = self._config.jwks_url
        assert url is not None
        try:
            keys = self._offload.call(_fetch_jwks, self._http, url)
        except BackendUnavailableError:
            if not self._remote:
                raise
            logger.warning(
                "plugin %s: %s could not be fetched: keeping its last keys", self._name, url
            )
            return
        self._remote, self._fetched_at = keys, time.monotonic()

    def _rules(self, claims: dict[str, Any], client: ClientInfo) -> tuple[Rule, ...]:
        acl = claims.get(self._config.acl_claim)
        if acl is None:
            return ()
        return parse_acl_claim(acl, client.client_id, client.username)

    # ----- authorisation ------------------------------------------------------------------

    def authorize(self, request: AuthorizeRequest) -> Decision:
        rules = self._grants.get(_connection(request.client))
        if not rules:
            return Decision.IGNORE
        for rule in rules:
            if rule.decides(request):
                return Decision.ALLOW if rule.allow else Decision.DENY
        return Decision.IGNORE

    def disconnected(self, event: ClientDisconnected) -> None:
        self._grants.pop(_connection(event.client), None)

    def reload(self) -> None:
        """SIGHUP: read the key files again (a bad one keeps the keys in force); a JWKS
        URL is fetched again at the next token."""
        self._keys = self._load_keys()
        self._fetched_at = -float("inf")

    def close(self) -> None:
        self._offload.close()
        self._http.clear()


def parse_acl_claim(acl: Any, client_id: str, username: str | None) -> tuple[Rule, ...]:
    """The rules of an `acl` claim; ValueError naming what is wrong with it."""
    if isinstance(acl, dict):  # EMQX 4: {"pub": [...], "sub": [...], "all": [...]}
        entries = []
        for key, topics in acl.items():
            if key not in _LEGACY or not isinstance(topics, list):
                raise ValueError(f"acl claim: {key!r} is not pub, sub or all with a list")
            entries += [{"permission": "allow", "action": _LEGACY[key], "topic": t} for t in topics]
        acl = entries
    if not isinstance(acl, list):
        raise ValueError("acl claim: expected a list of rules (or EMQX 4's pub/sub/all object)")
    rules = []
    for entry in acl:
        rule = parse_rule(entry, client_id, username, "acl claim")
        if rule is not None:
            rules.append(rule)
    return tuple(rules)


def _connection(client: ClientInfo) -> tuple[str, str]:
    """A connection's key: its client id and peer address (a takeover's differs)."""
    return client.client_id, client.peer


def _token(request: AuthenticateRequest, field: str) -> str | None:
    """The token if the field holds something shaped like a JWT, else None."""
    if field == "username":
        value = request.client.username
    else:
        try:
            value = None if request.password is None else request.password.decode("ascii")
        except UnicodeDecodeError:
            return None
    if value is None or value.count(".") != 2:
        return None
    return value


def _load_pem(data: bytes) -> Any:
    key = load_pem_public_key(data)
    if _algorithm_of(key) is None:
        raise ValueError("not an RSA or EC P-256 public key")
    return key


def _algorithm_of(key: Any) -> str | None:
    if isinstance(key, rsa.RSAPublicKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1":
        return "ES256"
    return None


def _jwks_keys(jwks: Any) -> dict[tuple[str, str | None], Any]:
    """The RS256 / ES256 keys of a JWKS, by (algorithm, key id); ValueError if malformed."""
    if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
        raise ValueError('a JWKS is an object with a "keys" list (RFC 7517 section 5)')
    keys: dict[tuple[str, str | None], Any] = {}
    for entry in jwks["keys"]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        key = jwt.PyJWK.from_dict(entry)
        algorithm = key.algorithm_name
        if algorithm in _ASYMMETRIC and _algorithm_of(key.key) == algorithm:
            keys[algorithm, key.key_id] = key.key
    return keys


def _jwks_key(keys: dict[tuple[str, str | None], Any], algorithm: str, kid: str | None) -> Any:
    found = keys.get((algorithm, kid))
    if found is None and kid is None:
        only = [key for (alg, _kid), key in keys.items() if alg == algorithm]
        found = only[0] if len(only) == 1 else None
    return found


def _fetch_jwks(http: urllib3.PoolManager, url: str) -> dict[tuple[str, str | None], Any]:
    """GET the JWKS at `url` (in an offload thread)."""
    response = http.request("GET", url)
    if response.status != 200:
        raise ValueError(f"{url} answered HTTP {response.status}, expected 200")
    return _jwks_keys(json.loads(response.data))
