"""The admin HTTP listener: gevent's pywsgi with a small router, inside the broker worker.

Why pywsgi: gevent is already the broker's loop, so the listener is a few more greenlets on
it (no thread, no second event loop, no new dependency); a request handler reads the
broker's tables in place between two yields, and whatever waits (a plugin reload asking the
sessions) waits with pykka futures and timeouts in its own greenlet while MQTT traffic goes
on. A framework (Flask, Bottle) would bring routing we need a dozen lines for. HTTPS with
`[http] certfile`.

Routes: `/metrics` (Prometheus), `/api/v1/...` (JSON, `admin.api`), `/` and `/static/...`
(the dashboard; without credentials, `GET /` answers 401 with the login page), the login
routes (`admin.login`). Before a request is routed: a state-changing one from another site
is refused (403, `admin.request_guard`), credentials or a login session are checked
(`admin.login`: 401 for any path, known or not, except `GET /api/v1/health`, `GET
/api/v1/ready`, `POST /api/v1/login`, the login page's files and, unless `[http]
metrics_auth`, `GET /metrics`), and a state-changing one must declare a JSON body (415).
Connections, timeouts and malformed requests are `admin.http_handler`'s.

Without configured credentials the first start makes the `admin` password
(`admin.admin_account`) and logs it once, when the listener is up.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import gevent
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from admin.admin_account import ADMIN_USER, open_account
from admin.api import add_api_routes
from admin.auth import Authenticator
from admin.figures_cache import FiguresCache
from admin.http_handler import AdminWSGIServer
from admin.login import Logins, UnauthenticatedError
from admin.metrics import new_registry
from admin.request_guard import STATE_CHANGING, cross_site_reason, json_body_reason
from admin.routing import STATUS_TEXT, ApiError, Request, Response, Router

if TYPE_CHECKING:
    from actors.view import BrokerView

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
MAX_BODY = 1_048_576  # bytes of a request body
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
REALM = 'Basic realm="actor-mqtt-broker", charset="UTF-8"'
LOGIN_FILES = ("login.js", "style.css")  # open: the login page needs them


class AdminServer:
    def __init__(self, broker: BrokerView) -> None:
        self._broker = broker
        self._config = config = broker.config.http
        configured = bool(config.api_keys or config.api_key_file or config.password_file)
        store = broker.config.store
        data_dir = None if store.kind == "none" else Path(store.data_dir)
        account, self._new_password = open_account(data_dir, make=not configured)
        self._account_path = account.path if account is not None else None
        self._logins = Logins(Authenticator(config, account), account, bool(config.certfile))
        figures = FiguresCache(broker)
        self._figures = figures
        self._rendered: tuple[object, bytes] | None = None  # (reading, /metrics text of it)
        self.router = Router()
        self.router.add("GET", "/metrics", self._metrics, public=not self._config.metrics_auth)
        self.router.add("GET", "/", self._dashboard)
        for name in LOGIN_FILES:
            self.router.add("GET", f"/static/{name}", self._static, public=True)
        self.router.add("GET", "/static/{name}", self._static)
        self._logins.add_routes(self.router)
        api = add_api_routes(self.router, broker, figures)
        cluster = broker.config.cluster
        self._registry = new_registry(
            figures,
            api.bridge_rows if broker.config.bridges else None,
            node=None if cluster is None else cluster.node,
        )
        self._server: AdminWSGIServer | None = None
        self.port = 0

    def start(self, listener: Any = None) -> None:
        """Bind and serve; raises OSError if the address is taken. `listener`: a socket
        already listening to serve on instead (a pool's worker 0 gets the supervisor's)."""
        config = self._config
        error_log = logging.getLogger("admin.http")
        address = (config.host, config.port) if listener is None else listener
        # SERVER_NAME given, so pywsgi does not look the host up with socket.getfqdn: gevent
        # resolves through its thread pool, and the idle thread it leaves behind cost MQTT
        # connection storms a tenth of their rate (docs/loadtest.md, "Where the cost of a
        # connection goes").
        environ = {"SERVER_NAME": config.host}
        # Connections open at once (one greenlet each; `admin.http_handler`): more wait in
        # the accept backlog, so a flood of HTTP clients cannot fill the event loop the MQTT
        # connections share.
        limits: dict[str, Any] = {
            "max_connections": config.max_connections,
            "idle_timeout": config.idle_timeout,
            "header_timeout": config.header_timeout,
        }
        if config.certfile:
            limits["certfile"] = config.certfile
            limits["keyfile"] = config.keyfile or config.certfile
            # The handshake then happens on the first read, under the idle timeout and in
            # the connection table, not before it (where a silent client held a slot).
            limits["do_handshake_on_connect"] = False
        server = AdminWSGIServer(
            address, self.application, log=None, error_log=error_log, environ=environ, **limits
        )
        server.start()
        self._server = server
        self.port = server.server_port or 0
        scheme = "https" if config.certfile else "http"
        logger.info(
            "admin HTTP: listening on %s://%s:%d (API, /metrics, dashboard)",
            scheme,
            config.host,
            self.port,
        )
        if self._new_password is not None:
            self._log_new_password(f"{scheme}://{config.host}:{self.port}/")
            self._new_password = None

    def _log_new_password(self, url: str) -> None:
        """The one line that shows a password made at this start."""
        if self._account_path is not None:
            kept = (
                f"only its hash is kept, in {self._account_path} (mode 0600), and later starts "
                f"use it; to make a new one, stop the broker and delete that file"
            )
        else:
            kept = (
                'for this run only: [store] kind = "none" keeps no data directory, so the next '
                "start makes another ([http] api_keys or password_file give lasting credentials)"
            )
        logger.warning(
            "admin HTTP: no admin credentials were configured, so a password was made: user "
            "%r, password '%s' (shown this once; %s). Log in at %s and change it there "
            '("password" in the page\'s header)',
            ADMIN_USER,
            self._new_password,
            kept,
            url,
        )

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(timeout=1)
            self._server = None

    # ----- WSGI ---------------------------------------------------------------------------

    def application(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        path = environ.get("PATH_INFO") or "/"
        try:
            response = self._respond(method, path, environ)
        except ApiError as error:
            response = Response(
                error.status, orjson.dumps({"error": error.message}), headers=error.headers
            )
        except Exception:
            logger.exception("admin HTTP: %s %s failed (a broker bug)", method, path)
            response = Response(500, orjson.dumps({"error": "internal error, see the log"}))
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            ("Cache-Control", "no-store"),
            # No page of another site may frame the dashboard (and have its buttons clicked
            # through a decoy), nor have a browser guess another type than the one said.
            ("Content-Security-Policy", "frame-ancestors 'none'"),
            ("X-Frame-Options", "DENY"),
            ("X-Content-Type-Options", "nosniff"),
            *response.headers,
        ]
        start_response(STATUS_TEXT.get(response.status, str(response.status)), headers)
        return [response.body]

    def _respond(self, method: str, path: str, environ: dict[str, Any]) -> Response:
        peer = environ.get("REMOTE_ADDR")
        changing = method in STATE_CHANGING
        if changing:
            scheme = "https" if self._config.certfile else "http"
            reason = cross_site_reason(
                environ.get("HTTP_ORIGIN"),
                environ.get("HTTP_SEC_FETCH_SITE"),
                environ.get("HTTP_HOST"),
                scheme,
            )
            if reason is not None:
                logger.warning(
                    "admin HTTP: refused %s %s from %s: a cross-site request (%s); the API "
                    "takes state-changing requests from its own pages and from clients "
                    "that are not browsers (curl, ctl) only",
                    method,
                    path,
                    peer,
                    reason,
                )
                raise ApiError(403, f"cross-site request refused: {reason}")
        caller = None
        if not self.router.is_public(method, path):
            try:
                caller = self._logins.caller(method, path, environ)
            except UnauthenticatedError as refusal:
                return self._unauthenticated(method, path, peer, refusal)
        if changing:
            reason = json_body_reason(environ.get("CONTENT_TYPE"))
            if reason is not None:
                logger.info("admin HTTP: refused %s %s from %s: %s", method, path, peer, reason)
                raise ApiError(415, reason)
        handler, params = self.router.find(method, path)
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError as error:
            raise ApiError(400, "Content-Length is not a number") from error
        if length > MAX_BODY:
            raise ApiError(413, f"the body is over {MAX_BODY} bytes")
        body = self._read_body(environ, length)
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        result = handler(Request(method, path, query, body, params, peer or "?", caller))
        if isinstance(result, Response):
            return result
        if result is None:
            return Response(204, b"")
        return Response(200, orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS))

    def _unauthenticated(
        self, method: str, path: str, peer: str | None, refusal: UnauthenticatedError
    ) -> Response:
        """401, with the login page for `GET /`, asking for Basic credentials only if
        `refusal.challenge`."""
        logger.info("admin HTTP: refused %s %s from %s: %s", method, path, peer, refusal.detail)
        headers = (("WWW-Authenticate", REALM),) if refusal.challenge else ()
        if method == "GET" and path == "/":
            return Response(401, self._file("login.html").body, CONTENT_TYPES[".html"], headers)
        message = "credentials needed: an API key, a password-file user or a login session"
        return Response(401, orjson.dumps({"error": message}), headers=headers)

    def _read_body(self, environ: dict[str, Any], length: int) -> bytes:
        """The request's body, which must arrive within `[http] header_timeout` seconds
        (408 if not; the connection is then closed, `admin.http_handler`)."""
        if not length:
            return b""
        seconds = self._config.header_timeout
        body = b""
        with contextlib.suppress(gevent.Timeout), gevent.Timeout(seconds):
            body = environ["wsgi.input"].read(length)
        if len(body) < length:
            logger.info(
                "admin HTTP: refused %s %s from %s: its body did not arrive within %g s "
                "([http] header_timeout)",
                environ["REQUEST_METHOD"],
                environ.get("PATH_INFO"),
                environ.get("REMOTE_ADDR"),
                seconds,
            )
            raise ApiError(408, f"the body did not arrive within {seconds:g} s")
        return body

    # ----- metrics and static files ------------------------------------------------------

    def _metrics(self, _request: Request) -> Response:
        """The text of the latest figures' reading, rendered once per reading."""
        reading = self._figures.read()
        if self._rendered is None or self._rendered[0] is not reading:
            self._rendered = (reading, generate_latest(self._registry))
        return Response(200, self._rendered[1], CONTENT_TYPE_LATEST)

    def _dashboard(self, _request: Request) -> Response:
        return self._file("index.html")

    def _static(self, request: Request) -> Response:
        return self._file(request.path.removeprefix("/static/"))

    @staticmethod
    def _file(name: str) -> Response:
        path = STATIC_DIR / name
        if path.parent != STATIC_DIR or path.suffix not in CONTENT_TYPES or not path.is_file():
            raise ApiError(404, f"no file {name!r}")
        return Response(200, path.read_bytes(), CONTENT_TYPES[path.suffix])
