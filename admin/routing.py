"""The admin listener's HTTP vocabulary: requests, responses, errors and the path router.

Plain objects, no I/O: `admin.server` turns WSGI calls into `Request`s and `Response`s into
WSGI answers; `admin.api` handlers take the one and return the other (or a JSON-able value).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson


class ApiError(Exception):
    """An answer other than success: `status` (404, 400, ...) and a message for the caller."""

    def __init__(
        self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers  # more headers of the answer (Retry-After, WWW-Authenticate)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: a user name ("api-key" for a key) and, for a request of a login
    session, that session's token."""

    user: str
    session: str | None = None


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)  # from the route's pattern
    peer: str = ""  # the client's address
    caller: Caller | None = None  # None on an open route

    def json(self) -> dict[str, Any]:
        try:
            value = orjson.loads(self.body or b"{}")
        except orjson.JSONDecodeError as error:
            raise ApiError(400, f"the body is not JSON: {error}") from error
        if not isinstance(value, dict):
            raise ApiError(400, "the body must be a JSON object")
        return value


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()  # more headers (Set-Cookie)


Handler = Callable[[Request], Any]  # returns a JSON-able value or a Response
STATUS_TEXT = {
    200: "200 OK",
    201: "201 Created",
    204: "204 No Content",
    400: "400 Bad Request",
    401: "401 Unauthorized",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    408: "408 Request Timeout",
    409: "409 Conflict",
    413: "413 Payload Too Large",
    415: "415 Unsupported Media Type",
    429: "429 Too Many Requests",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}


class Router:
    """Routes `METHOD /path/{name}` patterns to handlers; `{name...}` takes the rest of the
    path, slashes included (topics, CIDR blocks)."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler, bool]] = []

    def add(self, method: str, pattern: str, handler: Handler, public: bool = False) -> None:
        regex = re.sub(r"\{(\w+)\.\.\.\}", r"(?P<\1>.+)", pattern)
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", regex)
        self._routes.append((method, re.compile(f"^{regex}$"), handler, public))

    def is_public(self, method: str, path: str) -> bool:
        """Whether `method path` is a route open to requests without credentials (anything
        else, an unknown path included, is asked for them before it is routed)."""
        return any(
            public and route_method == method and regex.match(path) is not None
            for route_method, regex, _handler, public in self._routes
        )

    def find(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        allowed = False
        for route_method, regex, handler, _public in self._routes:
            match = regex.match(path)
            if match is None:
                continue
            if route_method != method:
                allowed = True
                continue
            # PATH_INFO is already percent-decoded (WSGI): "a%2Fb" arrives as "a/b".
            return handler, match.groupdict()
        raise ApiError(405 if allowed else 404, f"no route for {method} {path}")
