"""plugins.password_hash: EMQX's stored hashes (known vectors), round trips under hypothesis,
a wrong password refused, bcrypt's 72 bytes, and stored hashes no password can match."""

from __future__ import annotations

import hashlib

import bcrypt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.password_hash import HashSpec, StoredHashError, check_password, hash_password

PBKDF2 = HashSpec("pbkdf2", pbkdf2_iterations=16)
BCRYPT_SALT = bcrypt.gensalt(4).decode()  # cost 4: the minimum, fast enough for hypothesis

passwords = st.binary(max_size=100)
salts = st.text(max_size=24)


def test_salted_sha256_is_emqx_s_hex_of_salt_then_password() -> None:
    stored = hashlib.sha256(b"salt" + b"pw").hexdigest()
    assert check_password(HashSpec(), b"pw", stored, "salt")
    assert check_password(HashSpec(), b"pw", stored.upper(), "salt")  # hex in either case
    suffix = HashSpec(salt_position="suffix")
    assert check_password(suffix, b"pw", hashlib.sha256(b"pwsalt").hexdigest(), "salt")
    unsalted = HashSpec(salt_position="disable")
    assert check_password(unsalted, b"pw", hashlib.sha256(b"pw").hexdigest(), "ignored")
    assert not check_password(HashSpec(), b"pw", stored, "other salt")


def test_pbkdf2_is_the_hex_derived_key_with_the_configured_mac_and_length() -> None:
    spec = HashSpec("pbkdf2", pbkdf2_mac="sha512", pbkdf2_iterations=1000, pbkdf2_dk_length=20)
    stored = hashlib.pbkdf2_hmac("sha512", b"pw", b"salt", 1000, 20).hex()
    assert len(stored) == 40
    assert check_password(spec, b"pw", stored, "salt")
    assert not check_password(spec, b"pw", stored, "salt2")
    assert not check_password(HashSpec("pbkdf2", pbkdf2_iterations=999), b"pw", stored, "salt")


def test_bcrypt_uses_the_salt_and_cost_in_the_hash_and_the_first_72_bytes() -> None:
    spec = HashSpec("bcrypt")
    stored = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    assert check_password(spec, b"pw", stored, "")
    assert check_password(spec, b"pw", stored, "a salt column is not used")
    assert not check_password(spec, b"pW", stored, "")
    long = b"x" * 72
    stored_long = hash_password(spec, long + b"ignored", BCRYPT_SALT)
    assert check_password(spec, long + b"anything", stored_long, "")
    assert not check_password(spec, long[:71], stored_long, "")


@pytest.mark.parametrize(
    ("spec", "stored", "problem"),
    [
        (HashSpec(), "not hex", "is not hexadecimal"),
        (PBKDF2, "abc", "is not hexadecimal"),  # odd length
        (HashSpec("bcrypt"), "5e88489", "is not a bcrypt hash"),
        (HashSpec("bcrypt"), "$2b$04$é", "is not a bcrypt hash"),
        (HashSpec("md5"), "00", "'md5' is not one of"),
        (HashSpec(salt_position="middle"), "00", "salt_position 'middle'"),
        (HashSpec("pbkdf2", pbkdf2_mac="md5"), "00", "pbkdf2_mac 'md5'"),
        (HashSpec("pbkdf2", pbkdf2_iterations=0), "00", "pbkdf2_iterations must be"),
        (HashSpec("pbkdf2", pbkdf2_dk_length=-1), "00", "pbkdf2_dk_length must be"),
    ],
)
def test_a_hash_no_password_can_match_says_why(spec: HashSpec, stored: str, problem: str) -> None:
    with pytest.raises(StoredHashError, match=problem):
        check_password(spec, b"pw", stored, "salt")


@pytest.mark.parametrize("spec", [HashSpec(), HashSpec(salt_position="suffix"), PBKDF2])
@given(password=passwords, other=passwords, salt=salts)
@settings(max_examples=60, deadline=None)
def test_a_hash_accepts_its_password_and_no_other(
    spec: HashSpec, password: bytes, other: bytes, salt: str
) -> None:
    stored = hash_password(spec, password, salt)
    assert check_password(spec, password, stored, salt)
    same = other == password or (spec is PBKDF2 and hmac_key(other) == hmac_key(password))
    assert check_password(spec, other, stored, salt) == same


def hmac_key(password: bytes) -> bytes:
    """The key HMAC-SHA256 (PBKDF2's PRF) really uses for `password` (RFC 2104): hashed if
    longer than the 64-byte block, then padded with zeros to it. Passwords with the same
    key, such as b"" and b"\0", are one password to PBKDF2, in EMQX as here."""
    key = hashlib.sha256(password).digest() if len(password) > 64 else password
    return key.ljust(64, b"\0")


def bcrypt_key(password: bytes) -> bytes:
    """The key bcrypt's setup really uses for `password`: its first 72 bytes and a zero byte,
    repeated to 72 bytes. Passwords with the same key, such as b"" and b"\0", or b"a" and
    b"a\0a", are one password to bcrypt, in every implementation."""
    return ((password[:72] + b"\0") * 72)[:72]


def test_bcrypt_takes_passwords_with_the_same_key_for_one() -> None:
    spec = HashSpec("bcrypt")
    stored = hash_password(spec, b"a", BCRYPT_SALT)
    assert check_password(spec, b"a\0a", stored, "")  # the key repeats "a\0"
    assert not check_password(spec, b"a\0", stored, "")


def test_pbkdf2_takes_passwords_that_differ_by_trailing_zero_bytes_for_one() -> None:
    stored = hash_password(PBKDF2, b"secret", "salt")
    assert check_password(PBKDF2, b"secret\0", stored, "salt")  # the PRF's key padding
    assert not check_password(PBKDF2, b"secret\1", stored, "salt")


@given(password=passwords, other=passwords)
@settings(max_examples=15, deadline=None)
def test_bcrypt_accepts_its_password_and_no_other(password: bytes, other: bytes) -> None:
    spec = HashSpec("bcrypt")
    stored = hash_password(spec, password, BCRYPT_SALT)
    assert check_password(spec, password, stored, "")
    assert check_password(spec, other, stored, "") == (bcrypt_key(other) == bcrypt_key(password))


@given(stored=st.text(max_size=80), password=passwords)
@settings(max_examples=100, deadline=None)
def test_any_stored_text_is_refused_or_named_unusable(stored: str, password: bytes) -> None:
    """Whatever a row holds, the check answers False or raises StoredHashError, never
    another exception (nor True: random text is no hash of a random password)."""
    for spec in (HashSpec(), PBKDF2, HashSpec("bcrypt")):
        try:
            answer = check_password(spec, password, stored, "salt")
        except StoredHashError:
            continue
        assert answer is False
