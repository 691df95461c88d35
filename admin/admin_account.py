"""The dashboard's `admin` account: its password's hash, kept in the data directory.

On a start with neither `[http] api_keys`, `api_key_file` nor `password_file`, and no
`admin.passwd` in the data directory yet, the broker makes a random password, writes only
its hash there (Mosquitto's password-file format, `admin:$7$...`: PBKDF2-HMAC-SHA512 with
`ITERATIONS` rounds, mode 0600) and hands the password back once, for the log. A later
start reads the file and makes nothing. The file is created by linking a finished
temporary file to its name, so two processes starting at once cannot both make one: the
second reads the first's. A changed password replaces the file atomically.

With `[store] kind = "none"` there is no data directory: the password is made at every
start and its hash held in memory only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from actors.config import ConfigError
from plugins.account_files import write_atomically
from plugins.auth_file import PasswordFileError, PasswordHash, hash_password, load_password_file

logger = logging.getLogger(__name__)

ACCOUNT_FILE = "admin.passwd"
ADMIN_USER = "admin"
# PBKDF2 rounds of the admin password: ~20 ms a check on a 2019 core, in the event loop of
# the worker that serves the admin listener; wrong tries are limited per address
# (`admin.login_limiter`) and right ones remembered (`admin.auth`).
ITERATIONS = 50_000
MIN_LENGTH = 10  # characters of a password set from the dashboard
MAX_LENGTH = 1024


class AccountError(ConfigError):
    """The stored admin password cannot be read, or a new one is refused; says why."""


@dataclass(slots=True)
class AdminAccount:
    path: Path | None  # None: held in memory only
    password: PasswordHash

    def verify(self, password: str) -> bool:
        return self.password.verify(password.encode("utf-8"))

    def change(self, password: str) -> None:
        """Set a new password (AccountError if it is too short or too long; OSError if its
        file cannot be written, the old one then stays)."""
        if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
            raise AccountError(
                f"the new password must be {MIN_LENGTH} to {MAX_LENGTH} characters long, "
                f"not {len(password)}"
            )
        hashed = hash_password(password.encode("utf-8"), ITERATIONS)
        if self.path is not None:
            write_atomically(self.path, f"{ADMIN_USER}:{hashed.encode()}\n")
        self.password = hashed


def new_password() -> str:
    """A first-run password: 24 characters, 144 random bits, never starting with "-"."""
    while True:
        password = secrets.token_urlsafe(18)
        if not password.startswith("-"):
            return password


def open_account(data_dir: Path | None, make: bool) -> tuple[AdminAccount | None, str | None]:
    """The stored admin account, if any; else, if `make`, a new one. Returns (account, its
    password if made now: to be shown once). `data_dir` None: nothing is stored."""
    path = data_dir / ACCOUNT_FILE if data_dir is not None else None
    if path is not None and path.exists():
        return _read(path), None
    if not make:
        return None, None
    password = new_password()
    hashed = hash_password(password.encode("utf-8"), ITERATIONS)
    if path is None:
        return AdminAccount(None, hashed), password
    try:
        made = _create(path, f"{ADMIN_USER}:{hashed.encode()}\n")
    except OSError as error:
        raise AccountError(
            f"cannot store the admin password's hash in {path}: {error} (make the data "
            "directory writable, or configure [http] api_keys or password_file)"
        ) from error
    if not made:  # another process made it first
        return _read(path), None
    return AdminAccount(path, hashed), password


def _read(path: Path) -> AdminAccount:
    try:
        users = load_password_file(path)
    except PasswordFileError as error:
        raise AccountError(f"{error} (delete the file to make a new admin password)") from error
    stored = users.get(ADMIN_USER)
    if stored is None or len(users) != 1:
        raise AccountError(
            f"{path} must hold one line 'admin:<hash>' (delete it to make a new admin password)"
        )
    if path.stat().st_mode & 0o077:
        logger.warning(
            "admin HTTP: %s can be read by other users than the broker's: chmod 600 it", path
        )
    return AdminAccount(path, stored)


def _create(path: Path, text: str) -> bool:
    """Write `text` to `path` (mode 0600) unless it exists; whether this call made it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
