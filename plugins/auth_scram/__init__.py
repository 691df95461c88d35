"""Authentication plugin: SCRAM-SHA-256 over MQTT 5.0 enhanced authentication (RFC 7804 style).

A client that sends CONNECT with Authentication Method "SCRAM-SHA-256" and its client-first
message as Authentication Data is answered with AUTH 0x18 (server-first); its AUTH 0x18
(client-final) is verified against the credentials file, and CONNACK 0x00 carries the
server-final message (`v=...`) so the client can check the broker too. A wrong password or
unknown user gets CONNACK 0x86 (a failed re-authentication: DISCONNECT 0x87). The exchange
itself is `plugins.auth_scram.scram`; the channel runs the AUTH packets
(`channel.enhanced_auth`). paho-mqtt applications log in with the client-side adapter
`plugins.auth_scram.paho_client` (not imported by the broker).

The credentials file has one `user:SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
line per user (PostgreSQL's format; blank lines and `#` comments skipped), written by
`python -m plugins.auth_scram add FILE USER`. It holds no password and nothing a client
could log in with. A malformed line makes the file invalid, naming the line: the broker
refuses to start, and on `reload()` (SIGHUP) the previous users stay in force.

The authenticated user name: if the CONNECT has a User Name it must be the SCRAM user
(otherwise refused); if it has none, the SCRAM user becomes the client's user name (for
the ACL and the hooks). A re-authentication must prove the same user.

Requests with another method, or none, are IGNOREd (the password plugins decide them).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hooks.decisions import (
    AUTH_BAD_CREDENTIALS,
    AUTH_NOT_AUTHORIZED,
    AuthContinue,
    AuthResult,
    Decision,
)
from hooks.events import AuthenticateRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.auth_scram.scram import (
    DEFAULT_ITERATIONS,
    METHOD,
    ScramCredential,
    ScramError,
    ServerExchange,
    new_nonce,
    parse_client_first,
    parse_credential,
    server_final,
    server_first,
)
from plugins.base import PluginConfigError, PluginContext, parse_options

logger = logging.getLogger(__name__)


class CredentialsFileError(ValueError):
    """The credentials file cannot be used; the message names the file and the line."""


def parse_credentials_file(text: str, source: str) -> dict[str, ScramCredential]:
    """user name -> credential for every entry of a credentials file's text."""
    users: dict[str, ScramCredential] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        username, colon, encoded = line.partition(":")
        where = f"{source} line {number}"
        if not colon or not username:
            raise CredentialsFileError(f"{where}: expected 'user:{METHOD}$...'")
        if username in users:
            raise CredentialsFileError(f"{where}: user {username!r} is defined twice")
        try:
            users[username] = parse_credential(encoded.strip())
        except ValueError as error:
            raise CredentialsFileError(f"{where} (user {username!r}): {error}") from error
    return users


def load_credentials_file(path: Path) -> dict[str, ScramCredential]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CredentialsFileError(f"cannot read credentials file {path}: {error}") from error
    return parse_credentials_file(text, str(path))


@dataclass(frozen=True, slots=True)
class Config:
    credentials_file: Path  # relative paths are resolved against the configuration directory


class Plugin:
    """Registers on client.authenticate for the SCRAM-SHA-256 method."""

    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name or __name__
        config = parse_options(Config, options, self._name)
        self._path = context.resolve(config.credentials_file)
        try:
            self._users = load_credentials_file(self._path)
        except CredentialsFileError as error:
            raise PluginConfigError(
                f"plugin {self._name}: option 'credentials_file': {error}"
            ) from error
        self._secret = os.urandom(32)  # derives the decoy salts of unknown users

    def register(self, bus: HookBus) -> None:
        bus.register(HookPoint.CLIENT_AUTHENTICATE, self.authenticate, owner=self._name)

    def authenticate(self, request: AuthenticateRequest) -> Decision | AuthResult | AuthContinue:
        if request.method != METHOD:
            return Decision.IGNORE
        client = request.client
        try:
            if isinstance(request.state, ServerExchange):
                return self._final(request.state, request.data or b"", client.client_id)
            return self._first(request)
        except ScramError as error:
            logger.info(
                "plugin %s: SCRAM authentication of client %r failed: %s",
                self._name,
                client.client_id,
                error,
            )
            return AUTH_BAD_CREDENTIALS

    def _first(self, request: AuthenticateRequest) -> AuthResult | AuthContinue:
        client_first = parse_client_first(request.data or b"")
        username = request.client.username
        if username is not None and username != client_first.username:
            logger.info(
                "plugin %s: client %r: User Name %r is not the SCRAM user %r",
                self._name,
                request.client.client_id,
                username,
                client_first.username,
            )
            return AUTH_NOT_AUTHORIZED
        credential = self._users.get(client_first.username)
        exchange = server_first(
            client_first, credential, new_nonce(), self._decoy(client_first.username)
        )
        return AuthContinue(data=exchange.server_first.encode(), state=exchange)

    def _final(self, exchange: ServerExchange, data: bytes, client_id: str) -> AuthResult:
        server_final_message = server_final(exchange, data)
        username = exchange.client_first.username
        logger.info(
            "plugin %s: client %r authenticated as %r (SCRAM-SHA-256)",
            self._name,
            client_id,
            username,
        )
        return AuthResult(allowed=True, data=server_final_message, username=username)

    def _decoy(self, username: str) -> ScramCredential:
        """The same salt for the same unknown name, as if the user existed."""
        salt = hmac.new(self._secret, username.encode(), hashlib.sha256).digest()[:16]
        return ScramCredential(salt, DEFAULT_ITERATIONS, b"", b"")

    def reload(self) -> None:
        """Re-read the file; a bad file leaves the previous users in force and logs why."""
        try:
            users = load_credentials_file(self._path)
        except CredentialsFileError as error:
            logger.error("plugin %s: reload failed, previous users kept: %s", self._name, error)
            return
        self._users = users
        logger.info("plugin %s: reloaded %s (%d users)", self._name, self._path, len(users))

    def close(self) -> None:
        """Nothing to release: the file is read whole at load and reload."""
