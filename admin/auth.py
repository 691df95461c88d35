"""Who may use the admin API: API keys (stored as SHA-256 hashes), Basic auth against a
Mosquitto password file, or the dashboard's `admin` account (`admin.admin_account`).

A request is accepted with `Authorization: Bearer <key>` (or `X-API-Key: <key>`) for a key
whose hash is configured, or `Authorization: Basic` with a user and password from
`[http] password_file`, or with any user name and an API key as the password (so that a
browser's login prompt works with keys too). The keys are random strings made by
`python -m admin.ctl new-key`: high in entropy, so one SHA-256 is enough to keep the
configuration from holding them in clear. Password-file checks are PBKDF2, slow on purpose;
a successful check is remembered (by a SHA-256 of user and password) until the file is
reloaded, so a dashboard polling every second does not pay it each time. The `admin`
account's password is checked like a password-file user's (a password file's own `admin`
wins); after it changes, every remembered check is forgotten.

The same user-and-password check opens a login session (`admin.login`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path

from actors.config import ConfigError, HttpConfig
from admin.admin_account import ADMIN_USER, AdminAccount
from plugins.auth_file import PasswordFileError, PasswordHash, load_password_file

logger = logging.getLogger(__name__)

KEY_PREFIX = "sha256:"


class AuthSetupError(ConfigError):
    """The configured keys or password file are unusable; the message says which."""


def hash_key(key: str) -> str:
    """What `[http] api_keys` holds for `key`."""
    return KEY_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A random API key (256 bits, URL-safe). Never one that starts with "-": a shell
    command line would take it for an option (`actor-mqtt-broker-ctl hash-key KEY`,
    `--api-key KEY`), which a key drawn from the URL-safe alphabet did once in 64."""
    while True:
        key = secrets.token_urlsafe(32)
        if not key.startswith("-"):
            return key


@dataclass(frozen=True, slots=True)
class Presented:
    """The credentials a request presents: an API key (`user` None) or a user and password."""

    user: str | None
    secret: str


def presented(authorization: str | None, api_key: str | None) -> Presented | None:
    """What the `Authorization` or `X-API-Key` header presents; None: nothing usable."""
    if api_key:
        return Presented(None, api_key)
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return Presented(None, credentials.strip())
    if scheme != "basic":
        return None
    try:
        user, colon, password = (
            base64.b64decode(credentials.strip(), validate=True).decode().partition(":")
        )
    except (binascii.Error, UnicodeDecodeError):
        return None
    return Presented(user, password) if colon else None


class Authenticator:
    def __init__(self, config: HttpConfig, account: AdminAccount | None = None) -> None:
        self._account = account
        self._key_hashes = {self._checked(entry, "[http] api_keys") for entry in config.api_keys}
        if config.api_key_file:
            self._key_hashes |= _read_key_file(Path(config.api_key_file))
        self._users: dict[str, PasswordHash] = {}
        if config.password_file:
            try:
                self._users = load_password_file(Path(config.password_file))
            except PasswordFileError as error:
                raise AuthSetupError(f"[http] password_file: {error}") from error
        self._verified: set[bytes] = set()
        if not self._key_hashes and not self._users and account is None:
            logger.warning(
                "admin HTTP: no [http] api_keys, api_key_file or password_file and no admin "
                "password: every API request is refused (make a key with `python -m "
                "admin.ctl new-key`)"
            )
        if account is not None and ADMIN_USER in self._users:
            logger.warning(
                "admin HTTP: [http] password_file has a user %r: its password is the one "
                "that counts, not the one in %s",
                ADMIN_USER,
                account.path or "memory",
            )

    @property
    def challenges(self) -> bool:
        """Whether a refusal asks for Basic credentials (`WWW-Authenticate`): only with keys
        or a password file, which a browser's prompt can carry. The `admin` account alone
        logs in through the dashboard's page, which a prompt would hide."""
        return bool(self._key_hashes or self._users)

    @staticmethod
    def _checked(entry: str, where: str) -> str:
        entry = entry.strip()
        digest = entry.removeprefix(KEY_PREFIX)
        if not entry.startswith(KEY_PREFIX) or len(digest) != 64:
            raise AuthSetupError(
                f"{where}: {entry[:12]!r}... is not 'sha256:<64 hex digits>' (make one with "
                "`python -m admin.ctl hash-key KEY`)"
            )
        return entry.lower()

    def allowed(self, authorization: str | None, api_key: str | None) -> bool:
        """Whether the request's `Authorization` or `X-API-Key` header admits it."""
        credentials = presented(authorization, api_key)
        return credentials is not None and self.check(credentials)

    def check(self, credentials: Presented) -> bool:
        if credentials.user is None:
            return self._key_ok(credentials.secret)
        return self._key_ok(credentials.secret) or self.password_ok(
            credentials.user, credentials.secret
        )

    def in_password_file(self, user: str) -> bool:
        return user in self._users

    def forget_verified(self) -> None:
        """Check every password afresh (one has changed)."""
        self._verified.clear()

    def _key_ok(self, key: str) -> bool:
        candidate = hash_key(key)
        return any(hmac.compare_digest(candidate, known) for known in self._key_hashes)

    def password_ok(self, user: str, password: str) -> bool:
        stored = self._users.get(user)
        if stored is None and user == ADMIN_USER and self._account is not None:
            stored = self._account.password
        if stored is None:
            return False
        token = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        if token in self._verified:
            return True
        if stored.verify(password.encode()):
            self._verified.add(token)
            return True
        return False


def _read_key_file(path: Path) -> set[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise AuthSetupError(f"[http] api_key_file {path}: {error}") from error
    return {
        Authenticator._checked(line, f"{path} line {number}")
        for number, line in enumerate(lines, 1)
        if line.strip() and not line.startswith("#")
    }
