"""Password hashes as EMQX's database authenticators store them: salted SHA-256, PBKDF2, bcrypt.

Pure functions, shared by `plugins.auth_postgres` and `plugins.auth_redis`. A user's row
holds a hash and a salt (both text); `HashSpec` says how the hash was made, as EMQX's
`password_hash_algorithm` does:

- `sha256`: the lowercase hex SHA-256 of salt + password (`salt_position = "prefix"`,
  EMQX's default), password + salt (`"suffix"`), or the password alone (`"disable"`);
- `pbkdf2`: the lowercase hex PBKDF2-HMAC (`pbkdf2_mac`: sha256, sha512 or sha1) of the
  password with the salt, `pbkdf2_iterations` rounds, `pbkdf2_dk_length` bytes (0: the
  digest's size);
- `bcrypt`: a modular-crypt bcrypt hash (`$2b$12$...`), which carries its own salt and
  cost; the salt column is not used. Only the first 72 bytes of a password count, as in
  every bcrypt implementation (the `bcrypt` package asks callers to cut them).

`check_password` compares in constant time (`hmac.compare_digest`; bcrypt's own check is
constant-time too). A stored hash that cannot have been made by the algorithm (not hex, a
bcrypt string that is not one) raises `StoredHashError`, which names what is wrong, so the
caller can refuse the client and log the row to fix. PBKDF2 and bcrypt cost CPU on purpose:
call them off the event loop (`plugins.offload`).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import bcrypt

ALGORITHMS = ("sha256", "pbkdf2", "bcrypt")
SALT_POSITIONS = ("prefix", "suffix", "disable")
PBKDF2_MACS = ("sha256", "sha512", "sha1")
BCRYPT_MAX_BYTES = 72


class StoredHashError(ValueError):
    """A stored hash (or the algorithm named for it) that no password can match."""


@dataclass(frozen=True, slots=True)
class HashSpec:
    """How a stored hash was made (the module docstring has each algorithm)."""

    algorithm: str = "sha256"
    salt_position: str = "prefix"
    pbkdf2_mac: str = "sha256"
    pbkdf2_iterations: int = 4096
    pbkdf2_dk_length: int = 0

    def problem(self) -> str | None:
        """What is wrong with this spec (an option to fix), or None."""
        if self.algorithm not in ALGORITHMS:
            return f"password hash algorithm {self.algorithm!r} is not one of {ALGORITHMS}"
        if self.salt_position not in SALT_POSITIONS:
            return f"salt_position {self.salt_position!r} is not one of {SALT_POSITIONS}"
        if self.pbkdf2_mac not in PBKDF2_MACS:
            return f"pbkdf2_mac {self.pbkdf2_mac!r} is not one of {PBKDF2_MACS}"
        if self.pbkdf2_iterations < 1:
            return "pbkdf2_iterations must be at least 1"
        if self.pbkdf2_dk_length < 0:
            return "pbkdf2_dk_length must be >= 0 (0: the digest's size)"
        return None


def hash_password(spec: HashSpec, password: bytes, salt: str) -> str:
    """The hash of `password` as it is stored for `spec` (bcrypt: `salt` is a bcrypt salt
    from `bcrypt.gensalt()`, decoded; the result carries it)."""
    if spec.algorithm == "bcrypt":
        return bcrypt.hashpw(password[:BCRYPT_MAX_BYTES], salt.encode("ascii")).decode("ascii")
    return _digest(spec, password, salt.encode("utf-8")).hex()


def check_password(spec: HashSpec, password: bytes, stored: str, salt: str) -> bool:
    """True if `password` hashes to `stored` under `spec` with `salt`; StoredHashError if
    `stored` is no hash of that algorithm (or `spec` is not valid)."""
    problem = spec.problem()
    if problem is not None:
        raise StoredHashError(problem)
    if spec.algorithm == "bcrypt":
        try:
            return bcrypt.checkpw(password[:BCRYPT_MAX_BYTES], stored.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise StoredHashError("the stored hash is not a bcrypt hash ($2b$<cost>$...)") from None
    try:
        expected = bytes.fromhex(stored)
    except ValueError:
        raise StoredHashError(f"the stored {spec.algorithm} hash is not hexadecimal") from None
    return hmac.compare_digest(_digest(spec, password, salt.encode("utf-8")), expected)


def _digest(spec: HashSpec, password: bytes, salt: bytes) -> bytes:
    if spec.algorithm == "pbkdf2":
        length = spec.pbkdf2_dk_length or None
        return hashlib.pbkdf2_hmac(spec.pbkdf2_mac, password, salt, spec.pbkdf2_iterations, length)
    if spec.salt_position == "prefix":
        return hashlib.sha256(salt + password).digest()
    if spec.salt_position == "suffix":
        return hashlib.sha256(password + salt).digest()
    return hashlib.sha256(password).digest()
