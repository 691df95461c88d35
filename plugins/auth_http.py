"""auth_http: authentication and authorisation by an HTTP service, as EMQX's HTTP backends do.

For each CONNECT (with `auth_url`) and each PUBLISH and SUBSCRIBE (with `acl_url`) the
broker POSTs a JSON object to the service:

    {"clientid": "...", "username": "..." | null, "password": "..." | null,
     "peerhost": "10.0.0.7", "proto_ver": 3 | 4 | 5}
    plus, to acl_url: "action": "publish" | "subscribe", "topic": "..." (a topic filter
    for a SUBSCRIBE)

A 200 answer `{"result": "allow" | "deny" | "ignore"}` decides (ignore: the next plugin, or
`[auth] allow_anonymous`, decides), and on authentication `"is_superuser": true` makes every
later authorisation of that connection by this plugin an allow without asking. Any other
status, a body that is not such an object, a refused connection or a timeout is a backend
failure, answered by the plugin's `on_failure` (`plugins.offload`: CONNACK 0x88 / 3.1.1
return code 3, or IGNORE). A password that is not UTF-8 cannot be put in JSON: the CONNECT
is refused as bad credentials. A 5.0 CONNECT with an Authentication Method is IGNOREd (its
method's plugin decides).

The requests run in the plugin's `Offload` threads with urllib3 (one keep-alive connection
pool per service, `pool_size` connections, no retries, TLS verified against `ca_file` or
the system's CAs), so a slow service holds only the clients waiting for it. Answers are
kept in a `plugins.backend_cache.BackendCache` (SIGHUP empties it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import urllib3

from hooks.decisions import AUTH_BAD_CREDENTIALS, AuthResult, Decision
from hooks.events import AuthenticateRequest, AuthorizeRequest, ClientConnect, ClientInfo
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.backend_cache import BackendCache, CacheOptions, peer_host
from plugins.base import PluginConfigError, PluginContext, parse_options
from plugins.offload import BackendUnavailableError, Offload, OffloadOptions

logger = logging.getLogger(__name__)

_RESULTS = {"allow": Decision.ALLOW, "deny": Decision.DENY, "ignore": Decision.IGNORE}
_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Config(OffloadOptions, CacheOptions):
    auth_url: str | None = None  # POSTed for each CONNECT; unset: no authentication
    acl_url: str | None = None  # POSTed for each PUBLISH and SUBSCRIBE; unset: no ACL
    ca_file: Path | None = None  # CA certificates (PEM) for https URLs; unset: the system's


@dataclass(frozen=True, slots=True)
class _Authenticated:
    """What the cache keeps for a CONNECT: the answer, and whether it made a superuser."""

    answer: Decision
    superuser: bool


class HttpService:
    """The HTTP side: POST a JSON body, get the answer's `result` (and `is_superuser`).

    Called in an `Offload` thread; urllib3's pool is safe to share between threads."""

    def __init__(self, config: Config, ca_file: Path | None) -> None:
        timeout = urllib3.Timeout(connect=config.timeout, read=config.timeout)
        tls: dict[str, Any] = {} if ca_file is None else {"ca_certs": str(ca_file)}
        self._pool = urllib3.PoolManager(
            num_pools=2, maxsize=config.pool_size, timeout=timeout, retries=False, **tls
        )

    def ask(self, url: str, body: dict[str, Any]) -> tuple[Decision, bool]:
        """The service's decision and superuser flag; raises ValueError for an answer that
        is not a 200 with `{"result": "allow" | "deny" | "ignore"}`, urllib3's errors for
        a connection that failed."""
        response = self._pool.request("POST", url, body=orjson.dumps(body), headers=_HEADERS)
        if response.status != 200:
            raise ValueError(f"{url} answered HTTP {response.status}, expected 200")
        try:
            answer = orjson.loads(response.data)
        except orjson.JSONDecodeError as error:
            raise ValueError(f"{url} answered a body that is not JSON: {error}") from None
        result = answer.get("result") if isinstance(answer, dict) else None
        decision = _RESULTS.get(result) if isinstance(result, str) else None
        if decision is None:
            raise ValueError(
                f'{url} answered {answer!r}; expected {{"result": "allow" | "deny" | "ignore"}}'
            )
        return decision, answer.get("is_superuser") is True

    def close(self) -> None:
        self._pool.clear()


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        config = parse_options(Config, options, self._name)
        if config.auth_url is None and config.acl_url is None:
            raise PluginConfigError(
                f"plugin {self._name}: set 'auth_url', 'acl_url' or both (nothing to ask)"
            )
        for option in ("auth_url", "acl_url"):
            url = getattr(config, option)
            if url is not None and not url.startswith(("http://", "https://")):
                raise PluginConfigError(
                    f"plugin {self._name}: option {option!r} must be an http:// or https:// "
                    f"URL, got {url!r}"
                )
        ca_file = None if config.ca_file is None else context.resolve(config.ca_file)
        if ca_file is not None and not ca_file.is_file():
            raise PluginConfigError(f"plugin {self._name}: ca_file {ca_file} is not a file")
        self._config = config
        self._offload = Offload(self._name, config)
        self._cache: BackendCache[_Authenticated, Decision] = BackendCache(self._name, config)
        self._service = HttpService(config, ca_file)
        self._superusers: set[str] = set()  # client ids the service named superusers

    def register(self, bus: HookBus) -> None:
        if self._config.auth_url is not None:
            bus.register(HookPoint.CLIENT_CONNECT, self.connect, owner=self._name)
            bus.register(HookPoint.CLIENT_AUTHENTICATE, self.authenticate, owner=self._name)
        if self._config.acl_url is not None:
            bus.register(HookPoint.CLIENT_AUTHORIZE, self.authorize, owner=self._name)
        self._cache.register(bus)

    def connect(self, event: ClientConnect) -> None:
        """A new CONNECT of this client id: it is nobody's superuser until authenticated."""
        self._superusers.discard(event.client.client_id)

    def authenticate(self, request: AuthenticateRequest) -> Decision | AuthResult:
        url = self._config.auth_url
        if url is None or request.method is not None:
            return Decision.IGNORE
        client = request.client
        cached = self._cache.authentication(request)
        if cached is None:
            password = _text(request.password)
            if password is False:
                logger.info(
                    "plugin %s: client %s sent a password that is not UTF-8: refused",
                    self._name,
                    client.client_id,
                )
                return AUTH_BAD_CREDENTIALS
            body = {**_identity(client), "password": password}
            try:
                decision, superuser = self._offload.call(self._service.ask, url, body)
            except BackendUnavailableError as failure:
                return self._offload.auth_failure(failure)
            cached = _Authenticated(decision, superuser and decision is Decision.ALLOW)
            self._cache.keep_authentication(request, cached, decision is Decision.ALLOW)
        if cached.superuser:
            self._superusers.add(client.client_id)
        return cached.answer

    def authorize(self, request: AuthorizeRequest) -> Decision:
        url = self._config.acl_url
        if url is None:
            return Decision.IGNORE
        if request.client.client_id in self._superusers:
            return Decision.ALLOW
        cached = self._cache.authorisation(request)
        if cached is not None:
            return cached
        body = {
            **_identity(request.client),
            "action": request.action.value,
            "topic": request.topic,
        }
        try:
            decision, _superuser = self._offload.call(self._service.ask, url, body)
        except BackendUnavailableError as failure:
            return self._offload.acl_failure(failure)
        self._cache.keep_authorisation(request, decision, decision is Decision.ALLOW)
        return decision

    def reload(self) -> None:
        """SIGHUP: forget the cached answers; the service is asked again."""
        self._cache.clear()

    def close(self) -> None:
        self._offload.close()
        self._service.close()


def _identity(client: ClientInfo) -> dict[str, Any]:
    return {
        "clientid": client.client_id,
        "username": client.username,
        "peerhost": peer_host(client.peer),
        "proto_ver": client.protocol_version,
    }


def _text(password: bytes | None) -> str | bool | None:
    """The password as text for JSON; None without one; False if it is not UTF-8."""
    if password is None:
        return None
    try:
        return password.decode("utf-8")
    except UnicodeDecodeError:
        return False
