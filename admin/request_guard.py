"""Which requests the admin listener refuses before routing them: cross-site ones,
state-changing ones whose body is not declared JSON, and state-changing ones of a login
session without its CSRF token (pure functions over header values).

A page on another site can make the operator's browser send a request to the broker with
the credentials the browser holds (CSRF). HTML forms can only send GET and POST, with an
`application/x-www-form-urlencoded`, `multipart/form-data` or `text/plain` body; anything
else (`application/json`, DELETE, a custom header) needs a CORS preflight, which this
listener never grants. So a state-changing request (POST, PUT, PATCH, DELETE) must say
`Content-Type: application/json`, and it must come from the listener's own origin: a
browser says where a request comes from with `Origin` and `Sec-Fetch-Site`, and a request
with neither is not from a browser's page (curl, scripts, `admin.ctl`).

A request that a login session's cookie authenticates must also carry the session's CSRF
token in `X-CSRF-Token` when it changes state: the dashboard's page has it (it asked
`/api/v1/session` for it), another site's page cannot read it, so even a browser that
sends neither `Origin` nor `Sec-Fetch-Site` cannot be made to act for the operator.
Requests with `Authorization` or `X-API-Key` carry their credentials themselves and need
no token.
"""

from __future__ import annotations

import hmac

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})  # "none": typed by the user
DEFAULT_PORTS = {"http": "80", "https": "443"}


def _origin_of(scheme: str, host: str) -> str:
    """`scheme://host[:port]`, lower case, without the scheme's default port."""
    host = host.strip().lower()
    default = ":" + DEFAULT_PORTS.get(scheme, "")
    if host.endswith(default):
        host = host[: -len(default)]
    return f"{scheme}://{host}"


def cross_site_reason(
    origin: str | None, fetch_site: str | None, host: str | None, scheme: str
) -> str | None:
    """Why a request with these `Origin`, `Sec-Fetch-Site` and `Host` headers, to a listener
    speaking `scheme`, comes from another site; None if it does not (or says nothing)."""
    if fetch_site is not None and fetch_site.strip().lower() not in SAME_SITE_FETCHES:
        return f"Sec-Fetch-Site is {fetch_site!r}, not same-origin"
    if origin is not None:
        own = _origin_of(scheme, host) if host else "(no Host header)"
        origin_scheme, _, origin_host = origin.strip().lower().partition("://")
        if _origin_of(origin_scheme, origin_host) != own:
            return f"Origin {origin!r} is not this listener's ({own})"
    return None


def json_body_reason(content_type: str | None) -> str | None:
    """Why a state-changing request with this `Content-Type` is refused; None for JSON."""
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if media_type == "application/json":
        return None
    shown = repr(content_type) if content_type else "none"
    return f"Content-Type is {shown}: a state-changing request must send application/json"


def csrf_token_reason(sent: str | None, expected: str) -> str | None:
    """Why a state-changing request of a login session whose CSRF token is `expected`,
    sending `sent` in `X-CSRF-Token`, is refused; None if the tokens match."""
    if not sent:
        return "no X-CSRF-Token header: a session's state-changing request must carry its token"
    if not hmac.compare_digest(sent.strip().encode(), expected.encode()):
        return "the X-CSRF-Token header is not this session's token"
    return None
