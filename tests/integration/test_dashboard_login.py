"""The dashboard's login for a new user, against a running broker without configured admin
credentials: the first start makes an admin password and logs it once; headless Chromium
(Debian's package, driven by Playwright) opens the login page, not a Basic prompt, logs
in with the password read from the log, kicks a real paho client and logs out. A session's
state-changing request without its CSRF token is refused; a restart reuses the stored
hash; a changed password replaces the first one; wrong passwords are refused, and too
many from one address make it wait. In a pool, worker 0 alone serves the listener and
makes the password.
"""

from __future__ import annotations

import http.client
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from admin.admin_account import ACCOUNT_FILE
from admin.login import COOKIE
from admin.login_limiter import MAX_FAILURES
from tests.support.admin import API_KEY, Admin, basic, http_config
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, connect_raw, unique
from tests.support.ports import free_port

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = next(
    (p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium")) if p and Path(p).exists()),
    None,
)
MADE = "no admin credentials were configured, so a password was made"
PASSWORD = re.compile(r"password '([^']+)'")
NEW_PASSWORD = "a much better password"


def first_password(broker: BrokerProcess) -> str:
    """The password the broker logged at its first start (there must be one line only)."""
    line = wait_for_log(broker, MADE, timeout=15)
    assert broker.log().count(MADE) == 1, broker.log()
    match = PASSWORD.search(line)
    assert match is not None, line
    return match.group(1)


@dataclass
class Login:
    """An HTTP client of the admin listener that logs in and keeps the session cookie."""

    port: int
    cookie: str = ""
    csrf_token: str = ""

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        all_headers = {"Content-Type": "application/json"} if method != "GET" else {}
        if self.cookie:
            all_headers["Cookie"] = f"{COOKIE}={self.cookie}"
        all_headers.update(headers or {})
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = orjson.dumps(body) if body is not None else None
            connection.request(method, path, body=data, headers=all_headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def log_in(self, password: str, user: str = "admin") -> int:
        status, headers, body = self.request(
            "POST", "/api/v1/login", {"username": user, "password": password}
        )
        if status == 200:
            cookie = headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
            self.cookie = cookie.split(";")[0].split("=", 1)[1]
            self.csrf_token = orjson.loads(body)["csrf_token"]
        return status

    def change_password(self, current: str, new: str) -> int:
        return self.request(
            "POST",
            "/api/v1/password",
            {"current": current, "new": new},
            {"X-CSRF-Token": self.csrf_token},
        )[0]


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Admin]:
    """A broker started for the first time, with an `[http]` listener and no credentials."""
    port = free_port()
    with running_broker(tmp_path, f"[http]\nport = {port}\n") as broker:
        yield Admin(broker, port)


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (make system-deps installs it)"
)


@needs_chromium
def test_a_new_user_logs_in_kicks_a_client_and_logs_out(fresh: Admin, workers: int) -> None:
    password = first_password(fresh.broker)
    log = fresh.broker.log()
    assert f"Log in at http://127.0.0.1:{fresh.port}/" in log
    victim = PahoCollector(fresh.broker, "login-victim")
    try:
        with playwright_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            context = browser.new_context()  # no Basic credentials: the page must do
            page = context.new_page()
            expect = playwright_api.expect
            opened = page.goto(fresh.url + "/")
            assert opened is not None and opened.status == 401
            assert "www-authenticate" not in opened.headers  # no browser prompt
            expect(page.locator("form#login")).to_be_visible()
            # A wrong password is refused on the page.
            page.fill("#password", "not the password")
            page.click("form#login button[type=submit]")
            expect(page.locator("#login-error")).to_have_text("wrong user name or password")
            page.fill("#password", password)
            page.click("form#login button[type=submit]")
            expect(page.locator("#status")).to_have_text(re.compile("^live"), timeout=15_000)
            expect(page.locator("#user")).to_have_text("admin")
            cookie = next(c for c in context.cookies() if c["name"] == COOKIE)
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            # Without the session's CSRF token a state-changing request is refused; with
            # it, the same request is served.
            publish = """async (token) => (await fetch("/api/v1/publish", {
                method: "POST",
                headers: token ? {"Content-Type": "application/json", "X-CSRF-Token": token}
                               : {"Content-Type": "application/json"},
                body: JSON.stringify({topic: "login/test", payload: "x"}),
            })).status"""
            assert page.evaluate(publish, None) == 403
            token = page.evaluate(
                'async () => (await (await fetch("/api/v1/session")).json()).csrf_token'
            )
            assert page.evaluate(publish, token) == 200
            # Kick the paho client from the page.
            page.click("button.kick[data-clientid='login-victim']")
            expect(page.locator("#clients")).not_to_contain_text("login-victim", timeout=10_000)
            assert victim.disconnected.wait(10), "the kicked paho client is still connected"
            # Log out: back to the login page, and the old cookie opens nothing.
            page.click("#logout")
            expect(page.locator("form#login")).to_be_visible(timeout=10_000)
            assert page.evaluate('async () => (await fetch("/api/v1/stats")).status') == 401
            browser.close()
    finally:
        victim.client.loop_stop()
    log_line = wait_for_log(fresh.broker, "refused POST /api/v1/publish from 127.0.0.1")
    assert "no X-CSRF-Token header" in log_line
    wait_for_log(fresh.broker, "admin HTTP: refused a login as 'admin' from 127.0.0.1")
    wait_for_log(fresh.broker, "admin HTTP: 'admin' logged out from 127.0.0.1")


@needs_chromium
def test_the_password_changed_in_the_browser_replaces_the_first_one(
    tmp_path: Path, workers: int
) -> None:
    port = free_port()
    config = f"[http]\nport = {port}\n"
    with running_broker(tmp_path, config) as broker:
        first = first_password(broker)
        other = Login(port)
        assert other.log_in(first) == 200
        with playwright_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.fill("#password", first)
            page.click("form#login button[type=submit]")
            expect = playwright_api.expect
            expect(page.locator("#status")).to_have_text(re.compile("^live"), timeout=15_000)
            page.click("#change-password")
            page.fill("#password-current", first)
            page.fill("#password-new", NEW_PASSWORD)
            page.fill("#password-repeat", NEW_PASSWORD)
            page.click("#password-form button[type=submit]")
            expect(page.locator("#password-message")).to_have_text("password changed")
            # The page's own session goes on; the other one has ended.
            expect(page.locator("#status")).to_have_text(re.compile("^live"), timeout=5_000)
            browser.close()
        assert other.request("GET", "/api/v1/stats")[0] == 401
        assert Login(port).log_in(first) == 401
        assert Login(port).log_in(NEW_PASSWORD) == 200
        # Basic with the first password no longer works either.
        assert (
            Admin(broker, port)
            .request("GET", "/api/v1/stats", key=None, headers=basic("admin", first))
            .status
            == 401
        )
        wait_for_log(broker, "admin HTTP: the admin password was changed from 127.0.0.1")
    text = (tmp_path / "data" / ACCOUNT_FILE).read_text()
    assert first not in text and NEW_PASSWORD not in text
    # A restart keeps the changed password and makes none.
    with running_broker(tmp_path, config) as broker:
        wait_for_log(broker, "admin HTTP: listening on", timeout=15)
        assert MADE not in broker.log()
        assert Login(port).log_in(NEW_PASSWORD) == 200
        assert Login(port).log_in(first) == 401


def test_a_restart_reuses_the_stored_password(tmp_path: Path, workers: int) -> None:
    port = free_port()
    config = f"[http]\nport = {port}\n"
    with running_broker(tmp_path, config) as broker:
        password = first_password(broker)
    stored = tmp_path / "data" / ACCOUNT_FILE
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stored.read_text().startswith("admin:$7$") and password not in stored.read_text()
    before = stored.read_text()
    with running_broker(tmp_path, config) as broker:
        wait_for_log(broker, "admin HTTP: listening on", timeout=15)
        assert MADE not in broker.log()
        assert Login(port).log_in(password) == 200
        assert Login(port).log_in("wrong " + password) == 401
    assert stored.read_text() == before


def test_wrong_passwords_make_the_address_wait(fresh: Admin) -> None:
    """Login and Basic count together; past the limit even the right password waits."""
    password = first_password(fresh.broker)
    client = Login(fresh.port)
    for _ in range(MAX_FAILURES - 1):
        assert client.log_in("guess") == 401
    refused = fresh.request("GET", "/api/v1/stats", key=None, headers=basic("admin", "guess"))
    assert refused.status == 401
    assert "WWW-Authenticate" not in refused.headers  # no key or password file: no prompt
    status, headers, body = client.request(
        "POST", "/api/v1/login", {"username": "admin", "password": password}
    )
    assert status == 429, body
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert b"too many wrong passwords" in body
    wait_for_log(fresh.broker, "refused a login as 'admin' from 127.0.0.1: 10 wrong passwords")
    log = fresh.broker.log()
    wrong = "admin HTTP: refused a login as 'admin' from 127.0.0.1: wrong user name or password"
    assert log.count(wrong) == MAX_FAILURES - 1  # one line per wrong password
    assert f"{MAX_FAILURES} of {MAX_FAILURES} wrong passwords allowed" in log
    # Bad input gets a clear answer.
    client2 = Login(fresh.port)
    assert client2.request("POST", "/api/v1/login", {"user": "admin"})[0] == 400
    assert client2.request("POST", "/api/v1/login", body=None)[0] == 400


def test_without_a_data_directory_the_password_lasts_one_run(tmp_path: Path) -> None:
    port = free_port()
    broker_config = f'[http]\nport = {port}\n[store]\nkind = "none"\n'
    with running_broker(tmp_path, broker_config) as broker:
        password = first_password(broker)
        assert "for this run only" in wait_for_log(broker, MADE)
        assert Login(port).log_in(password) == 200
    assert not (tmp_path / "data" / ACCOUNT_FILE).exists()


def test_configured_keys_make_no_password_and_the_login_page_takes_a_key(
    tmp_path: Path,
) -> None:
    port = free_port()
    with running_broker(tmp_path, http_config(port)) as broker:
        admin = Admin(broker, port)
        wait_for_log(broker, "admin HTTP: listening on", timeout=15)
        page = admin.request("GET", "/", key=None)
        assert page.status == 401
        assert page.headers["WWW-Authenticate"].startswith("Basic")  # as before
        assert page.headers["Content-Type"].startswith("text/html")
        assert b'<form id="login"' in page.body
        assert admin.request("GET", "/static/login.js", key=None).status == 200
        assert admin.request("GET", "/static/app.js", key=None).status == 401
        session = Login(port)
        assert session.log_in(API_KEY, user="operator") == 200
        status, _, body = session.request("GET", "/api/v1/session")
        assert status == 200
        answer = orjson.loads(body)
        assert answer["user"] == "operator" and not answer["can_change_password"]
        assert session.change_password(API_KEY, NEW_PASSWORD) == 403
        # Logged out, the cookie opens nothing.
        assert (
            session.request("POST", "/api/v1/logout", headers={"X-CSRF-Token": session.csrf_token})[
                0
            ]
            == 204
        )
        assert session.request("GET", "/api/v1/session")[0] == 401
        connect_raw(broker, unique("still-serving")).close()
    assert MADE not in broker.log()
    assert not (tmp_path / "data" / ACCOUNT_FILE).exists()
