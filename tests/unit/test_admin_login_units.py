"""The admin login's pure parts: sessions and their expiry, the per-address limit on wrong
passwords, the CSRF token check, the stored admin account and its place among the
Authenticator's credentials."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from actors.config import HttpConfig
from admin.admin_account import (
    ACCOUNT_FILE,
    ITERATIONS,
    AccountError,
    AdminAccount,
    open_account,
)
from admin.auth import Authenticator, Presented, hash_key, presented
from admin.login import COOKIE, session_cookie
from admin.login_limiter import MAX_FAILURES, MAX_PEERS, WINDOW, LoginLimiter
from admin.request_guard import csrf_token_reason
from admin.sessions import IDLE_TIMEOUT, MAX_AGE, MAX_SESSIONS, SessionTable
from plugins.auth_file import hash_password, load_password_file


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# ----- sessions ----------------------------------------------------------------------------


def test_a_session_lives_while_used_and_ends_when_idle() -> None:
    table = SessionTable()
    token, session = table.start("admin", now=0.0)
    assert len(token) >= 40 and len(session.csrf_token) >= 40 and token != session.csrf_token
    assert table.get(token, IDLE_TIMEOUT - 1) is session
    assert table.get(token, 2 * IDLE_TIMEOUT - 2) is session  # the last use restarted it
    assert table.get(token, 3 * IDLE_TIMEOUT) is None
    assert table.get(token, 3 * IDLE_TIMEOUT) is None  # forgotten
    assert len(table) == 0
    assert table.get("not-a-token", 0.0) is None


def test_a_session_ends_at_its_maximum_age_however_used() -> None:
    table = SessionTable()
    token, _ = table.start("admin", now=0.0)
    now = 0.0
    while now + IDLE_TIMEOUT / 2 <= MAX_AGE:
        now += IDLE_TIMEOUT / 2
        assert table.get(token, now) is not None
    assert table.get(token, MAX_AGE + 1) is None


def test_log_out_and_ending_the_others() -> None:
    table = SessionTable()
    mine, _ = table.start("admin", 0.0)
    others = [table.start("admin", 0.0)[0] for _ in range(3)]
    assert table.end_all_but(mine) == 3
    assert all(table.get(token, 1.0) is None for token in others)
    assert table.get(mine, 1.0) is not None
    table.end(mine)
    assert table.get(mine, 1.0) is None
    assert table.end_all_but(None) == 0


def test_the_least_recently_used_session_goes_beyond_the_cap() -> None:
    table = SessionTable()
    tokens = [table.start("admin", 0.0)[0] for _ in range(MAX_SESSIONS)]
    assert table.get(tokens[0], 1.0) is not None  # used: now the most recent
    table.start("admin", 2.0)
    assert len(table) == MAX_SESSIONS
    assert table.get(tokens[1], 3.0) is None
    assert table.get(tokens[0], 3.0) is not None


def test_the_session_cookie_is_read_from_the_cookie_header() -> None:
    assert session_cookie(f"theme=dark; {COOKIE}=abc-123_x") == "abc-123_x"
    assert session_cookie("theme=dark") is None
    assert session_cookie(None) is None
    assert session_cookie(f"{COOKIE}=") is None
    assert session_cookie('bad="unterminated; \x00') is None


# ----- wrong passwords per address --------------------------------------------------------


def test_an_address_waits_after_too_many_wrong_passwords() -> None:
    limiter = LoginLimiter()
    for count in range(1, MAX_FAILURES + 1):
        assert limiter.wait("10.0.0.1", float(count)) == 0
        assert limiter.failed("10.0.0.1", float(count)) == count
    assert limiter.wait("10.0.0.1", 20.0) == pytest.approx(1.0 + WINDOW - 20.0)
    assert limiter.wait("10.0.0.2", 20.0) == 0  # another address is not held back
    # The oldest failure leaves the window: one more try is allowed.
    assert limiter.wait("10.0.0.1", 1.0 + WINDOW) == 0
    assert limiter.failed("10.0.0.1", 1.0 + WINDOW) == MAX_FAILURES
    assert limiter.wait("10.0.0.1", 1.0 + WINDOW) > 0


def test_a_right_password_forgets_the_failures() -> None:
    limiter = LoginLimiter()
    for _ in range(MAX_FAILURES - 1):
        limiter.failed("p", 0.0)
    limiter.succeeded("p")
    assert limiter.failed("p", 0.0) == 1


def test_the_limiter_tracks_a_bounded_number_of_addresses() -> None:
    limiter = LoginLimiter()
    for number in range(MAX_PEERS + 5):
        limiter.failed(f"peer-{number}", 0.0)
    assert len(limiter._failures) == MAX_PEERS
    assert "peer-0" not in limiter._failures
    assert f"peer-{MAX_PEERS + 4}" in limiter._failures


# ----- CSRF token ---------------------------------------------------------------------------


def test_the_csrf_token_must_be_the_sessions() -> None:
    assert csrf_token_reason("tok-1", "tok-1") is None
    assert "no X-CSRF-Token" in (csrf_token_reason(None, "tok-1") or "")
    assert "no X-CSRF-Token" in (csrf_token_reason("", "tok-1") or "")
    assert "not this session's" in (csrf_token_reason("tok-2", "tok-1") or "")


# ----- the stored admin account ------------------------------------------------------------


def test_the_first_start_makes_a_password_and_stores_only_its_hash(tmp_path: Path) -> None:
    data = tmp_path / "data"
    account, password = open_account(data, make=True)
    assert account is not None and password is not None and len(password) >= 20
    path = data / ACCOUNT_FILE
    assert account.path == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert password not in text
    assert text.startswith(f"admin:$7${ITERATIONS}$")
    assert load_password_file(path)["admin"].verify(password.encode())
    assert [p.name for p in data.iterdir()] == [ACCOUNT_FILE]  # no temporary file left
    # A later start reads it and makes nothing.
    again, none = open_account(data, make=True)
    assert none is None and again is not None and again.verify(password)


def test_no_password_is_made_when_credentials_are_configured(tmp_path: Path) -> None:
    assert open_account(tmp_path, make=False) == (None, None)
    assert not (tmp_path / ACCOUNT_FILE).exists()


def test_without_a_data_directory_the_password_is_held_in_memory(tmp_path: Path) -> None:
    account, password = open_account(None, make=True)
    assert account is not None and account.path is None and password is not None
    assert account.verify(password)
    account.change("a new password")
    assert account.verify("a new password") and not account.verify(password)


def test_a_changed_password_replaces_the_old_one_in_the_file(tmp_path: Path) -> None:
    account, password = open_account(tmp_path, make=True)
    assert account is not None and password is not None
    with pytest.raises(AccountError, match="10 to 1024 characters"):
        account.change("short")
    assert account.verify(password)  # unchanged
    account.change("correct horse battery")
    reread, _ = open_account(tmp_path, make=True)
    assert reread is not None
    assert reread.verify("correct horse battery") and not reread.verify(password)
    assert stat.S_IMODE((tmp_path / ACCOUNT_FILE).stat().st_mode) == 0o600


def test_a_damaged_account_file_stops_the_start_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / ACCOUNT_FILE).write_text("admin:not-a-hash\n")
    with pytest.raises(AccountError, match="delete the file"):
        open_account(tmp_path, make=True)
    (tmp_path / ACCOUNT_FILE).write_text(f"root:{hash_password(b'x').encode()}\n")
    with pytest.raises(AccountError, match="one line 'admin:<hash>'"):
        open_account(tmp_path, make=True)


def test_a_data_directory_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the directory should be")
    with pytest.raises(AccountError, match="cannot store the admin password's hash"):
        open_account(tmp_path / "data", make=True)


# ----- the Authenticator with the account --------------------------------------------------


def test_the_admin_account_opens_basic_and_is_forgotten_when_changed() -> None:
    account = AdminAccount(None, hash_password(b"first-secret-1", 1000))
    auth = Authenticator(HttpConfig(), account)
    assert not auth.challenges  # no key or password file: no Basic prompt
    assert auth.allowed(basic("admin", "first-secret-1"), None)
    assert not auth.allowed(basic("root", "first-secret-1"), None)
    account.change("second-secret-2")
    assert auth.allowed(basic("admin", "first-secret-1"), None)  # remembered until told
    auth.forget_verified()
    assert not auth.allowed(basic("admin", "first-secret-1"), None)
    assert auth.allowed(basic("admin", "second-secret-2"), None)


def test_a_password_files_admin_wins_over_the_account(tmp_path: Path) -> None:
    passwords = tmp_path / "passwd"
    passwords.write_text(f"admin:{hash_password(b'from-the-file').encode()}\n")
    account = AdminAccount(None, hash_password(b"from-the-account", 1000))
    auth = Authenticator(HttpConfig(password_file=str(passwords)), account)
    assert auth.challenges
    assert auth.password_ok("admin", "from-the-file")
    assert not auth.password_ok("admin", "from-the-account")
    assert auth.in_password_file("admin")


def test_what_the_headers_present() -> None:
    assert presented(None, "k") == Presented(None, "k")
    assert presented("Bearer k ", None) == Presented(None, "k")
    assert presented(basic("u", "p:q"), None) == Presented("u", "p:q")
    assert presented("Basic !!!", None) is None
    assert presented("Digest abc", None) is None
    assert presented(None, None) is None
    auth = Authenticator(HttpConfig(api_keys=(hash_key("k1"),)))
    assert auth.check(Presented("anyone", "k1")) and auth.check(Presented(None, "k1"))
    assert not auth.check(Presented(None, "k2"))
