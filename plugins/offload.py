"""Blocking calls off the event loop: how a plugin asks a database or a web service.

Hook callbacks run in the worker's one gevent loop (docs/plugins.md). A blocking call made
there (a C database driver, `urllib3`, `requests`, a CPU-heavy hash) stalls every client of
the worker. `Offload` runs such a call on a small pool of OS threads and makes the calling
greenlet wait for it cooperatively: only the connection (or session) that asked waits; every
other client goes on. One `Offload` per backend (per plugin):

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Config(OffloadOptions):          # adds timeout, pool_size, max_waiting, on_failure
        url: str

    class Plugin:
        def __init__(self, options, context):
            self._config = parse_options(Config, options, context.plugin_name)
            self._offload = Offload(context.plugin_name, self._config)   # checks the options

        def authenticate(self, request: AuthenticateRequest) -> Decision | AuthResult:
            try:
                allowed = self._offload.call(ask_the_service, request.client.username)
            except BackendUnavailableError as failure:
                return self._offload.auth_failure(failure)   # deny (0x88) or IGNORE
            return Decision.ALLOW if allowed else Decision.DENY

        def close(self) -> None:
            self._offload.close()

`call(function, *args)` returns what `function(*args)` returned in a pool thread, or raises a
`BackendUnavailableError`:

- `BackendBusyError`: `max_waiting` calls of this backend are already waiting or running (a call
  that timed out counts until its thread is done: a thread cannot be interrupted). A dead
  database therefore holds at most `max_waiting` clients, and later ones are answered at once.
- `BackendTimeoutError`: no answer within `timeout` seconds (waiting for a free thread included).
- `BackendFailedError`: `function` raised; the exception is its `__cause__`.

`auth_failure(failure)` and `acl_failure(failure)` apply the plugin's `on_failure` policy
and log the failure at most once per second per backend and kind (with counts):
`"deny"` refuses (a CONNECT gets CONNACK 0x88 Server unavailable, 3.1.1 return code 3, so
the client knows to retry rather than to fix its credentials; a PUBLISH or SUBSCRIBE is
denied), `"ignore"` answers IGNORE so the next plugin (or `[auth] allow_anonymous`) decides.

`call` must be made from a greenlet (every hook callback is), never from the loop itself.
The pool's threads are started on the first call, so a plugin built and closed unused (the
pool supervisor's configuration check) starts none. Every call is counted in the backend's
`core.backend_figures` (calls, busy, timeouts, errors, latency), which `/metrics` shows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from time import perf_counter
from typing import Any, TypeVar

import gevent
import gevent.threadpool

from core.backend_figures import BackendFigures, figures_for
from hooks.decisions import AUTH_SERVER_UNAVAILABLE, AuthResult, Decision
from net.rate_limited_log import RateLimitedLog
from plugins.base import PluginConfigError

logger = logging.getLogger(__name__)

T = TypeVar("T")


class FailurePolicy(Enum):
    """What a backend that cannot answer decides: refuse, or leave it to the next plugin."""

    DENY = "deny"
    IGNORE = "ignore"


@dataclass(frozen=True, kw_only=True)  # no slots: a Config may subclass several
class OffloadOptions:
    """The options every plugin with a blocking backend takes; a plugin's own `Config`
    subclasses it (keyword-only, so its required fields may follow these defaults)."""

    timeout: float = 5.0  # seconds a call may take, waiting for a thread included
    pool_size: int = 4  # threads calling the backend at once
    max_waiting: int = 64  # calls waiting or running at once; beyond: BackendBusyError
    on_failure: str = "deny"  # "deny" or "ignore": see FailurePolicy


class BackendUnavailableError(Exception):
    """The backend gave no usable answer; the message says which backend and why."""


class BackendBusyError(BackendUnavailableError):
    """`max_waiting` calls are already waiting or running."""


class BackendTimeoutError(BackendUnavailableError):
    """The call did not answer within the backend's `timeout`."""


class BackendFailedError(BackendUnavailableError):
    """The call raised; the exception it raised is `__cause__`."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a pool thread hands back: a value, or the exception the call raised (a raising
    task would make gevent print a traceback for every failed query)."""

    value: Any = None
    error: BaseException | None = None


def _run(function: Callable[..., Any], args: tuple[Any, ...]) -> _Outcome:
    try:
        return _Outcome(value=function(*args))
    except Exception as error:
        return _Outcome(error=error)


class Offload:
    """One backend's thread pool, with its timeout, bound and failure policy."""

    def __init__(self, name: str, options: OffloadOptions) -> None:
        if not options.timeout > 0:
            raise PluginConfigError(f"plugin {name}: option 'timeout' must be > 0 seconds")
        if options.pool_size < 1:
            raise PluginConfigError(f"plugin {name}: option 'pool_size' must be at least 1")
        if options.max_waiting < options.pool_size:
            raise PluginConfigError(
                f"plugin {name}: option 'max_waiting' ({options.max_waiting}) must be at least "
                f"'pool_size' ({options.pool_size})"
            )
        try:
            self.policy = FailurePolicy(options.on_failure)
        except ValueError:
            raise PluginConfigError(
                f'plugin {name}: option \'on_failure\' must be "deny" or "ignore", '
                f"got {options.on_failure!r}"
            ) from None
        self.name = name
        self._options = options
        self._pool: gevent.threadpool.ThreadPool | None = None
        self._outstanding = 0  # calls waiting for a thread, running, or abandoned and running
        self.figures: BackendFigures = figures_for(name)
        self._log = RateLimitedLog(logger)

    @property
    def outstanding(self) -> int:
        """Calls waiting for a thread or running now (timed-out ones until they end)."""
        return self._outstanding

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` run in a pool thread; the calling greenlet waits for it.

        Raises BackendBusyError, BackendTimeoutError or BackendFailedError (module docstring)."""
        if gevent.getcurrent() is gevent.get_hub():
            raise RuntimeError(
                f"plugin {self.name}: Offload.call from the event loop itself; call it from "
                "a greenlet (a hook callback runs in one)"
            )
        figures = self.figures
        options = self._options
        if self._outstanding >= options.max_waiting:
            figures.busy += 1
            raise BackendBusyError(
                f"backend of plugin {self.name} is busy: {self._outstanding} calls already "
                f"waiting or running (max_waiting = {options.max_waiting})"
            )
        figures.calls += 1
        self._outstanding += 1
        started = perf_counter()
        pending: gevent.event.AsyncResult[_Outcome] | None = None
        timer = gevent.Timeout(options.timeout)
        try:
            with timer:
                pending = self._threads().spawn(_run, function, args)
                outcome = pending.get()
        except gevent.Timeout as error:
            if error is not timer:
                raise
            figures.timeouts += 1
            raise BackendTimeoutError(
                f"backend of plugin {self.name} did not answer within {options.timeout} s"
            ) from None
        finally:
            if pending is None or pending.ready():
                self._outstanding -= 1
            else:  # abandoned (timeout, or the greenlet was killed): it holds a thread yet
                pending.rawlink(self._thread_done)
        assert outcome is not None  # `_run` always answers an _Outcome
        figures.latency.observe(perf_counter() - started)
        if outcome.error is not None:
            figures.errors += 1
            raise BackendFailedError(
                f"backend of plugin {self.name} failed: {outcome.error}"
            ) from outcome.error
        result: T = outcome.value
        return result

    def auth_failure(self, failure: BackendUnavailableError) -> AuthResult | Decision:
        """The client.authenticate answer for `failure`: CONNACK 0x88 Server unavailable
        (3.1.1: 3) under `on_failure = "deny"`, IGNORE under "ignore"; logged."""
        self._note(failure, "authentication")
        return AUTH_SERVER_UNAVAILABLE if self.policy is FailurePolicy.DENY else Decision.IGNORE

    def acl_failure(self, failure: BackendUnavailableError) -> Decision:
        """The client.authorize answer for `failure`: DENY or IGNORE by `on_failure`; logged."""
        self._note(failure, "authorisation")
        return Decision.DENY if self.policy is FailurePolicy.DENY else Decision.IGNORE

    def close(self) -> None:
        """Stop the pool's idle threads; a thread inside a call ends when the call returns."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.kill()

    def _threads(self) -> gevent.threadpool.ThreadPool:
        pool = self._pool
        if pool is None:
            pool = self._pool = gevent.threadpool.ThreadPool(self._options.pool_size)
        return pool

    def _thread_done(self, _result: object) -> None:
        self._outstanding -= 1

    def _note(self, failure: BackendUnavailableError, what: str) -> None:
        treated = "refused" if self.policy is FailurePolicy.DENY else "left to the next plugin"
        self._log.note(
            f"plugin {self.name}: {type(failure).__name__}",
            1,
            f"{failure}; {what} {treated} (on_failure = {self.policy.value!r}); check the "
            "backend, or raise timeout / pool_size / max_waiting if it is only slow",
        )
