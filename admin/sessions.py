"""The dashboard's login sessions: random tokens held server-side, each with its CSRF token
and its expiry (pure: the clock is passed in).

A session ends after `IDLE_TIMEOUT` seconds without a request, `MAX_AGE` seconds after its
login whatever its use, at log-out, or when the admin password changes (every session but
the one that changed it). The browser holds only the session token, in an HttpOnly cookie;
the CSRF token is handed to the page in JSON and must come back in the `X-CSRF-Token`
header of every state-changing request (`admin.request_guard.csrf_token_reason`). At most
`MAX_SESSIONS` are held: a new login beyond that ends the least recently used one.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

IDLE_TIMEOUT = 3600.0  # seconds without a request
MAX_AGE = 12 * 3600.0  # seconds after the login
MAX_SESSIONS = 100


@dataclass(slots=True)
class Session:
    user: str
    csrf_token: str
    started: float
    last_used: float


class SessionTable:
    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}  # token -> session, least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def start(self, user: str, now: float) -> tuple[str, Session]:
        """A new session for `user`: (its token, the session)."""
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        token = secrets.token_urlsafe(32)
        session = Session(user, secrets.token_urlsafe(32), now, now)
        self._sessions[token] = session
        return token, session

    def get(self, token: str, now: float) -> Session | None:
        """The live session of `token` (its idle time restarts), or None: unknown or expired
        (an expired one is forgotten)."""
        session = self._sessions.pop(token, None)
        if session is None:
            return None
        if now - session.last_used > IDLE_TIMEOUT or now - session.started > MAX_AGE:
            return None
        session.last_used = now
        self._sessions[token] = session  # most recently used last
        return session

    def end(self, token: str) -> None:
        self._sessions.pop(token, None)

    def end_all_but(self, token: str | None) -> int:
        """End every session except `token`'s; how many ended."""
        kept = {t: s for t, s in self._sessions.items() if t == token}
        ended = len(self._sessions) - len(kept)
        self._sessions = kept
        return ended
