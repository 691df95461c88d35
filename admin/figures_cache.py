"""The pool's figures as the admin listener reads them: at most one reading per second.

A reading walks every session of every worker (queue and in-flight totals) and, in a pool,
asks each worker over the fabric (`actors.figures.read_pool_figures`): worth doing once a
second for a dashboard, not once per request of a scrape flood. So `/metrics` and
`/api/v1/stats` share one reading for `max_age` seconds, and requests that arrive while a
reading is under way wait for it instead of starting their own: whatever the request rate,
the tables are walked at most about once per `max_age`. The figures are that much older.
`SharedReading` is that rule for any reading; the cluster part of `/api/v1/stats`, which
asks every other node too (`admin.cluster_figures`), is shared the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from gevent.event import AsyncResult

from actors.figures import Figures, read_pool_figures

if TYPE_CHECKING:
    from actors.view import BrokerView

MAX_AGE = 1.0  # seconds a reading is served for

Reading = tuple[Figures, list[int]]  # the figures, and the workers left out of them
R = TypeVar("R")


class SharedReading(Generic[R]):
    """What `read()` returns, served for `max_age` seconds and shared by the requests that
    ask while it is read."""

    def __init__(self, read: Callable[[], R], max_age: float = MAX_AGE) -> None:
        self._read = read
        self._max_age = max_age
        self._reading: R | None = None
        self._read_at = 0.0
        self._pending: AsyncResult[R] | None = None

    def read(self) -> R:
        """The latest reading if younger than `max_age`, else a new one (shared with the
        requests that ask meanwhile). Blocks the calling greenlet while it is read."""
        if self._reading is not None and time.monotonic() - self._read_at < self._max_age:
            return self._reading
        if self._pending is not None:
            shared = self._pending.get()
            assert shared is not None  # set, or raised
            return shared
        pending = self._pending = AsyncResult()
        try:
            reading = self._read()
        except BaseException as error:
            pending.set_exception(error)
            raise
        finally:
            self._pending = None
        self._reading, self._read_at = reading, time.monotonic()
        pending.set(reading)
        return reading


class FiguresCache(SharedReading[Reading]):
    """The pool's figures (`read_pool_figures`), shared by `/metrics` and `/api/v1/stats`."""

    def __init__(self, broker: BrokerView, max_age: float = MAX_AGE) -> None:
        super().__init__(lambda: read_pool_figures(broker), max_age)
