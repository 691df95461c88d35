"""Authentication plugin reading a Mosquitto `password_file`.

Each line is `user:hash`, as written by `mosquitto_passwd` or by `python -m plugins.auth_file
add FILE USER`; blank lines and lines starting with `#` are skipped. Two hash formats (the
ones Mosquitto 2 reads, checked against Debian's mosquitto_passwd):

- `$7$<iterations>$<base64 salt>$<base64 hash>`: PBKDF2-HMAC-SHA512 (mosquitto_passwd's
  default since 2.0, 101 iterations, 12-byte salt);
- `$6$<base64 salt>$<base64 hash>`: SHA-512 of the password followed by the salt (1.6 and
  earlier).

The hash must decode to 64 bytes. Unlike Mosquitto, which drops a bad entry with a log line,
a malformed line makes the whole file invalid and the error names the line: at start-up the
broker refuses to start, on `reload()` (SIGHUP) the previous table stays in force.

Answers on client.authenticate:
- a request with an MQTT 5.0 Authentication Method (enhanced authentication): IGNORE, the
  method's plugin decides (no password is checked against this file);
- a client with a user name: ALLOW if the file has the user and the password hashes to the
  stored value (compared in constant time), else BAD_CREDENTIALS (CONNACK 0x04 / 0x86);
  an unknown user costs the same hashing as a known one;
- a client without a user name: option `allow_anonymous` = true -> ALLOW, false ->
  NOT_AUTHORIZED (0x05 / 0x87), not set -> IGNORE (the broker's `[auth] allow_anonymous`).

Hashing runs in the client's actor: PBKDF2 with many iterations (e.g. 100,000, ~50 ms) would
hold the worker's gevent loop that long per CONNECT; mosquitto_passwd's 101 cost ~0.1 ms.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hooks.decisions import AUTH_BAD_CREDENTIALS, AUTH_NOT_AUTHORIZED, AuthResult, Decision
from hooks.events import AuthenticateRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginConfigError, PluginContext, parse_options

logger = logging.getLogger(__name__)

DEFAULT_ITERATIONS = 101  # mosquitto_passwd's default
SALT_LENGTH = 12  # bytes, as mosquitto_passwd makes them
DIGEST_LENGTH = 64  # SHA-512


class PasswordFileError(ValueError):
    """The password file cannot be used; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """One stored hash; `iterations` is None for the `$6$` (plain salted SHA-512) format."""

    salt: bytes
    digest: bytes
    iterations: int | None = DEFAULT_ITERATIONS

    def digest_of(self, password: bytes) -> bytes:
        if self.iterations is None:
            return hashlib.sha512(password + self.salt).digest()
        return hashlib.pbkdf2_hmac("sha512", password, self.salt, self.iterations)

    def verify(self, password: bytes) -> bool:
        return hmac.compare_digest(self.digest_of(password), self.digest)

    def encode(self) -> str:
        salt = base64.b64encode(self.salt).decode("ascii")
        digest = base64.b64encode(self.digest).decode("ascii")
        if self.iterations is None:
            return f"$6${salt}${digest}"
        return f"$7${self.iterations}${salt}${digest}"


def hash_password(password: bytes, iterations: int = DEFAULT_ITERATIONS) -> PasswordHash:
    """A new `$7$` hash of `password` with a random salt."""
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    salt = os.urandom(SALT_LENGTH)
    return PasswordHash(salt, hashlib.pbkdf2_hmac("sha512", password, salt, iterations), iterations)


def parse_hash(text: str) -> PasswordHash:
    """Decode `$7$...` or `$6$...`; ValueError says what is wrong."""
    parts = text.split("$")
    if len(parts) == 5 and parts[:2] == ["", "7"]:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise ValueError(f"iteration count {parts[2]!r} is not a positive integer")
        iterations: int | None = int(parts[2])
        salt_text, digest_text = parts[3], parts[4]
    elif len(parts) == 4 and parts[:2] == ["", "6"]:
        iterations, salt_text, digest_text = None, parts[2], parts[3]
    else:
        raise ValueError("hash must be $7$<iterations>$<salt>$<hash> or $6$<salt>$<hash>")
    try:
        salt = base64.b64decode(salt_text, validate=True)
        digest = base64.b64decode(digest_text, validate=True)
    except binascii.Error as error:
        raise ValueError(f"salt or hash is not valid base64 ({error})") from error
    if not salt or len(digest) != DIGEST_LENGTH:
        raise ValueError(f"salt is empty or hash is {len(digest)} bytes, not {DIGEST_LENGTH}")
    return PasswordHash(salt, digest, iterations)


def parse_password_file(text: str, source: str) -> dict[str, PasswordHash]:
    """user name -> hash for every entry of a password file's text."""
    users: dict[str, PasswordHash] = {}
    lines: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        username, colon, hashed = line.partition(":")
        username = username.strip()
        where = f"{source} line {number}"
        if not colon or not username:
            raise PasswordFileError(f"{where}: expected 'user:hash'")
        if username in users:
            raise PasswordFileError(
                f"{where}: user {username!r} is already defined on line {lines[username]}"
            )
        try:
            users[username] = parse_hash(hashed.strip())
        except ValueError as error:
            raise PasswordFileError(f"{where} (user {username!r}): {error}") from error
        lines[username] = number
    return users


def load_password_file(path: Path) -> dict[str, PasswordHash]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PasswordFileError(f"cannot read password file {path}: {error}") from error
    return parse_password_file(text, str(path))


# Verified against when the user is unknown, so that the answer takes as long as for a
# known user and the timing does not tell which user names exist.
_UNKNOWN_USER = PasswordHash(bytes(SALT_LENGTH), bytes(DIGEST_LENGTH))


@dataclass(frozen=True, slots=True)
class Config:
    password_file: Path  # relative paths are resolved against the configuration directory
    allow_anonymous: bool | None = None  # None: the broker's [auth] allow_anonymous decides


class Plugin:
    """Registers on client.authenticate and checks user names and passwords."""

    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name or __name__
        self._config = parse_options(Config, options, self._name)
        self._path = context.resolve(self._config.password_file)
        try:
            self._users = load_password_file(self._path)
        except PasswordFileError as error:
            raise PluginConfigError(
                f"plugin {self._name}: option 'password_file': {error}"
            ) from error

    def register(self, bus: HookBus) -> None:
        bus.register(HookPoint.CLIENT_AUTHENTICATE, self.authenticate, owner=self._name)

    def authenticate(self, request: AuthenticateRequest) -> Decision | AuthResult:
        if request.method is not None:
            return Decision.IGNORE  # enhanced authentication: its method's plugin decides
        username = request.client.username
        if username is None:
            if self._config.allow_anonymous is None:
                return Decision.IGNORE
            return Decision.ALLOW if self._config.allow_anonymous else AUTH_NOT_AUTHORIZED
        stored = self._users.get(username)
        password = request.password
        if stored is None:
            _UNKNOWN_USER.verify(password or b"")
            return AUTH_BAD_CREDENTIALS
        if password is None or not stored.verify(password):
            return AUTH_BAD_CREDENTIALS
        return Decision.ALLOW

    def reload(self) -> None:
        """Re-read the file; a bad file leaves the previous users in force and logs why."""
        try:
            users = load_password_file(self._path)
        except PasswordFileError as error:
            logger.error("plugin %s: reload failed, previous users kept: %s", self._name, error)
            return
        self._users = users
        logger.info("plugin %s: reloaded %s (%d users)", self._name, self._path, len(users))

    def close(self) -> None:
        """Nothing to release: the file is read whole at load and reload."""
