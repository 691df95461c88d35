"""Who sends each request to the admin listener, and the dashboard's login, log-out and
password change.

A request is someone's by its `Authorization` or `X-API-Key` header (`admin.auth`, as for
any API client), or else by its session cookie: `POST /api/v1/login` with a user name and
password opens a session (`admin.sessions`) and sets the cookie (HttpOnly, SameSite=Strict,
Secure with HTTPS); `GET /api/v1/session` gives the page its CSRF token, which every
state-changing request of the session must send back (`admin.request_guard`); `POST
/api/v1/logout` ends it; `POST /api/v1/password` changes the `admin` account's password
(the current one is asked again) and ends every other session.

Every password check, Basic or login, counts against the peer's address in
`admin.login_limiter`: a wrong one is one log line, and too many make the next ones 429.
"""

from __future__ import annotations

import http.cookies
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from admin.admin_account import ADMIN_USER, AccountError, AdminAccount
from admin.auth import Authenticator, Presented, presented
from admin.login_limiter import MAX_FAILURES, WINDOW, LoginLimiter
from admin.request_guard import STATE_CHANGING, csrf_token_reason
from admin.routing import ApiError, Caller, Request, Response, Router
from admin.sessions import SessionTable
from net.rate_limited_log import RateLimitedLog

logger = logging.getLogger(__name__)

COOKIE = "mqtt_admin_session"
MAX_USER_SHOWN = 64  # characters of a refused user name in the log


class UnauthenticatedError(Exception):
    """A request without valid credentials: `detail` for the log line, `challenge` whether
    the answer asks for Basic credentials."""

    def __init__(self, detail: str, challenge: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.challenge = challenge


def session_cookie(header: str | None) -> str | None:
    """The session token of a `Cookie` header, if it has one."""
    if not header:
        return None
    cookies: http.cookies.SimpleCookie = http.cookies.SimpleCookie()
    try:
        cookies.load(header)
    except http.cookies.CookieError:
        return None
    morsel = cookies.get(COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


class Logins:
    def __init__(
        self,
        auth: Authenticator,
        account: AdminAccount | None,
        secure: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._auth = auth
        self._account = account
        self._secure = "; Secure" if secure else ""
        self._clock = clock
        self.sessions = SessionTable()
        self._limiter = LoginLimiter()
        self._waits = RateLimitedLog(logger)

    def add_routes(self, router: Router) -> None:
        router.add("POST", "/api/v1/login", self._login, public=True)
        router.add("POST", "/api/v1/logout", self._logout)
        router.add("GET", "/api/v1/session", self._session)
        router.add("POST", "/api/v1/password", self._change_password)

    # ----- who sends a request -------------------------------------------------------------

    def caller(self, method: str, path: str, environ: dict[str, Any]) -> Caller:
        """Who sends this request to a route that needs credentials. Raises UnauthenticatedError,
        ApiError 403 (a session's state-changing request without its CSRF token) or 429 (a
        password from an address that has sent too many wrong ones)."""
        peer = environ.get("REMOTE_ADDR") or "?"
        credentials = presented(environ.get("HTTP_AUTHORIZATION"), environ.get("HTTP_X_API_KEY"))
        if credentials is not None:
            return self._by_header(credentials, peer)
        if environ.get("HTTP_AUTHORIZATION") or environ.get("HTTP_X_API_KEY"):
            raise UnauthenticatedError("no valid credentials", self._auth.challenges)
        token = session_cookie(environ.get("HTTP_COOKIE"))
        if token is None:
            raise UnauthenticatedError("no valid credentials", self._auth.challenges)
        session = self.sessions.get(token, self._clock())
        if session is None:
            # No prompt: the page goes back to its login form.
            raise UnauthenticatedError("its login session has ended or is unknown", challenge=False)
        if method in STATE_CHANGING:
            reason = csrf_token_reason(environ.get("HTTP_X_CSRF_TOKEN"), session.csrf_token)
            if reason is not None:
                logger.warning(
                    "admin HTTP: refused %s %s from %s (session of %r): %s; the dashboard's "
                    "page sends its token, another site's page cannot",
                    method,
                    path,
                    peer,
                    session.user,
                    reason,
                )
                raise ApiError(403, f"CSRF check failed: {reason}")
        return Caller(session.user, token)

    def _by_header(self, credentials: Presented, peer: str) -> Caller:
        if credentials.user is None:
            if not self._auth.check(credentials):
                raise UnauthenticatedError("no valid credentials", self._auth.challenges)
            return Caller("api-key")
        self._refuse_if_waiting(peer, f"Basic credentials of {_shown(credentials.user)}")
        if self._auth.check(credentials):
            self._limiter.succeeded(peer)
            return Caller(credentials.user)
        count = self._limiter.failed(peer, self._clock())
        raise UnauthenticatedError(
            f"no valid credentials (wrong password for user {_shown(credentials.user)}; "
            f"{_failures_text(count)})",
            self._auth.challenges,
        )

    def _refuse_if_waiting(self, peer: str, what: str) -> None:
        wait = self._limiter.wait(peer, self._clock())
        if wait <= 0:
            return
        seconds = max(1, round(wait))
        self._waits.note(
            f"wait {peer}",
            1,
            f"admin HTTP: refused {what} from {peer}: {MAX_FAILURES} wrong passwords within "
            f"{WINDOW:g} s; it may try again in {seconds} s",
        )
        raise ApiError(
            429,
            f"too many wrong passwords from {peer}: try again in {seconds} s",
            (("Retry-After", str(seconds)),),
        )

    # ----- routes --------------------------------------------------------------------------

    def _login(self, request: Request) -> Response:
        body = request.json()
        user, password = body.get("username"), body.get("password")
        if not isinstance(user, str) or not user or not isinstance(password, str):
            raise ApiError(400, 'the body must be {"username": "...", "password": "..."}')
        self._refuse_if_waiting(request.peer, f"a login as {_shown(user)}")
        if not self._auth.check(Presented(user, password)):
            count = self._limiter.failed(request.peer, self._clock())
            logger.warning(
                "admin HTTP: refused a login as %s from %s: wrong user name or password (%s)",
                _shown(user),
                request.peer,
                _failures_text(count),
            )
            raise ApiError(401, "wrong user name or password")
        self._limiter.succeeded(request.peer)
        token, session = self.sessions.start(user, self._clock())
        logger.info("admin HTTP: %s logged in from %s", _shown(user), request.peer)
        cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{self._secure}"
        return Response(
            200,
            orjson.dumps({"user": user, "csrf_token": session.csrf_token}),
            headers=(("Set-Cookie", cookie),),
        )

    def _logout(self, request: Request) -> Response:
        caller = _caller_of(request)
        if caller.session is not None:
            self.sessions.end(caller.session)
            logger.info("admin HTTP: %s logged out from %s", _shown(caller.user), request.peer)
        expired = f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{self._secure}"
        return Response(204, b"", headers=(("Set-Cookie", expired),))

    def _session(self, request: Request) -> dict[str, Any]:
        """Who the caller is, the session's CSRF token (None without a session), and whether
        the caller may change the `admin` password here."""
        caller = _caller_of(request)
        session = self.sessions.get(caller.session, self._clock()) if caller.session else None
        return {
            "user": caller.user,
            "csrf_token": session.csrf_token if session is not None else None,
            "can_change_password": self._owns_account(caller),
        }

    def _change_password(self, request: Request) -> None:
        caller = _caller_of(request)
        body = request.json()
        current, new = body.get("current"), body.get("new")
        if not isinstance(current, str) or not isinstance(new, str):
            raise ApiError(400, 'the body must be {"current": "...", "new": "..."}')
        if self._account is None or not self._owns_account(caller):
            raise ApiError(
                403,
                f"only the {ADMIN_USER!r} account's password is changed here (API keys and "
                "password-file users are managed in the configuration and their files)",
            )
        self._refuse_if_waiting(request.peer, "a password change")
        if not self._account.verify(current):
            count = self._limiter.failed(request.peer, self._clock())
            logger.warning(
                "admin HTTP: refused a password change from %s: the current password is wrong (%s)",
                request.peer,
                _failures_text(count),
            )
            raise ApiError(403, "the current password is wrong")
        self._limiter.succeeded(request.peer)
        try:
            self._account.change(new)
        except AccountError as error:
            raise ApiError(400, str(error)) from error
        except OSError as error:
            logger.error(
                "admin HTTP: cannot store the new admin password in %s: %s; the old one stays",
                self._account.path,
                error,
            )
            raise ApiError(500, "cannot store the new password: see the broker's log") from error
        self._auth.forget_verified()
        ended = self.sessions.end_all_but(caller.session)
        logger.warning(
            "admin HTTP: the %s password was changed from %s (stored in %s); %d other "
            "session(s) ended",
            ADMIN_USER,
            request.peer,
            self._account.path or "memory only",
            ended,
        )

    def _owns_account(self, caller: Caller) -> bool:
        """Whether `caller` is the `admin` account (not a password file's `admin`)."""
        return (
            self._account is not None
            and caller.user == ADMIN_USER
            and not self._auth.in_password_file(ADMIN_USER)
        )


def _caller_of(request: Request) -> Caller:
    if request.caller is None:  # only open routes have none; these routes are not open
        raise ApiError(401, "credentials needed")
    return request.caller


def _shown(user: str) -> str:
    """A user name as the log shows it: quoted, cut."""
    return repr(user[:MAX_USER_SHOWN])


def _failures_text(count: int) -> str:
    return f"{count} of {MAX_FAILURES} wrong passwords allowed from this address in {WINDOW:g} s"
