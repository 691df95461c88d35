"""Refused-CONNECT delays on a pool worker: an address's refusals are counted at its home.

In one process `core.auth_failures.AuthFailureDelays` counts every refused CONNECT of an
address (docs/overload.md). In a pool the kernel spreads one address's connections over the
workers, so each worker would see only its share of the refusals. Here each address has a
home worker, `pool.ownership.home_of(address)` (a stable hash of the IP address over the
workers, as a client id's home), and the home counts:

- a refusal on the home itself is counted there, at once, as in one process;
- one on another worker is told to the home in an `AuthFailed(token, address)` frame, and
  the home answers `AuthFailures(token, count)`: the CONNACK waits the delay of that count
  (the refused connection has stopped reading meanwhile, so the round trip only adds a
  millisecond or so to a refusal, never to an accepted CONNECT);
- an accepted CONNECT must start the count over. So that it costs nothing when the address
  never failed, the home broadcasts `AuthFailing(address)` on an address's first refusal,
  and each worker remembers those addresses (as many as the home remembers, for as long);
  an accepted CONNECT from one of them sends `AuthSucceeded(address)` to the home, one way.
  Any other accepted CONNECT costs a dict lookup.

If the home is not linked (down, restarting), or does not answer within `ANSWER_TIMEOUT`,
the refusal is counted here instead (logged once per home until it is linked again).
Pure but for the injected `send`, `broadcast` and `later` (a timer): tested in-process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from core.auth_failures import AuthFailureDelays
from pool.frames.admission import AuthFailed, AuthFailing, AuthFailures, AuthSucceeded
from pool.frames.codec import Frame
from pool.ownership import home_of

logger = logging.getLogger(__name__)

ANSWER_TIMEOUT = 1.0  # seconds a refusal waits for its home's count before counting here

Answer = Callable[[float], object]
AuthFrame = AuthFailed | AuthFailures | AuthFailing | AuthSucceeded


class PoolAuthFailures:
    """This worker's part of the pool's refused-CONNECT counting (module docstring)."""

    def __init__(
        self,
        delays: AuthFailureDelays,
        worker: int,
        workers: int,
        later: Callable[[float, Callable[[], object]], Any],
    ) -> None:
        self.delays = delays  # the addresses homed here (and others while their home is away)
        self.worker = worker
        self.workers = workers
        self._later = later  # call a function after some seconds
        # Set by the pool worker once its fabric is up (send: False when not linked).
        self.send: Callable[[int, Frame], bool] | None = None
        self.broadcast: Callable[[Frame], object] | None = None
        # Addresses some worker refused lately (told by their homes): address -> when.
        self._failing = AuthFailureDelays(delays.base, delays.maximum, delays.forget_after)
        self._token = 0
        self._waiting: dict[int, tuple[int, str, Answer]] = {}  # token -> home, address, answer
        self._away: set[int] = set()  # homes not linked, already logged

    # ----- the client actor's side (core.auth_failures.AuthFailureDelays' interface) -------

    def refused(self, address: str, now: float, answer: Answer) -> None:
        """A CONNECT from `address` was refused: call `answer` with its CONNACK's delay."""
        home = home_of(address, self.workers)
        if home == self.worker:
            answer(self.delays.delay_for(self._count(address, now)))
            return
        self._token += 1
        token = self._token
        send = self.send
        if send is None or not send(home, AuthFailed(token, address)):
            self._home_away(home)
            answer(self.delays.failed(address, now))
            return
        self._waiting[token] = (home, address, answer)
        self._later(ANSWER_TIMEOUT, lambda: self._timed_out(token, now))

    def succeeded(self, address: str) -> None:
        """A CONNECT from `address` was accepted: its home's count starts over."""
        self.delays.succeeded(address)  # counted here while its home was away, or homed here
        if address not in self._failing:
            return
        self._failing.succeeded(address)
        home = home_of(address, self.workers)
        if home != self.worker and self.send is not None:
            self.send(home, AuthSucceeded(address))

    # ----- frames -------------------------------------------------------------------------

    def frame_received(self, worker: int, frame: AuthFrame, now: float) -> None:
        if isinstance(frame, AuthFailed):
            if self.send is not None:
                self.send(worker, AuthFailures(frame.token, self._count(frame.address, now)))
        elif isinstance(frame, AuthFailures):
            waiting = self._waiting.pop(frame.token, None)
            if waiting is not None:
                waiting[2](self.delays.delay_for(frame.count))
        elif isinstance(frame, AuthFailing):
            self._failing.count(frame.address, now)
        else:
            self.delays.succeeded(frame.address)
            self._failing.succeeded(frame.address)

    def peer_up(self, worker: int) -> None:
        self._away.discard(worker)

    def peer_down(self, worker: int, now: float) -> None:
        """`worker` is gone: the refusals waiting for its count are counted here."""
        for token, (home, address, answer) in list(self._waiting.items()):
            if home == worker:
                del self._waiting[token]
                self._home_away(home)
                answer(self.delays.failed(address, now))

    # ----- inside -------------------------------------------------------------------------

    def _count(self, address: str, now: float) -> int:
        """Count a refusal of an address homed here; tell the pool of its first one."""
        count = self.delays.count(address, now)
        self._failing.count(address, now)
        if count == 1 and self.broadcast is not None:
            self.broadcast(AuthFailing(address))
        return count

    def _timed_out(self, token: int, now: float) -> None:
        waiting = self._waiting.pop(token, None)
        if waiting is None:
            return
        home, address, answer = waiting
        logger.warning(
            "the home worker %d of address %s did not count its refused CONNECT within "
            "%.0f s: counted here",
            home,
            address,
            ANSWER_TIMEOUT,
        )
        answer(self.delays.failed(address, now + ANSWER_TIMEOUT))

    def _home_away(self, home: int) -> None:
        if home in self._away:
            return
        self._away.add(home)
        logger.warning(
            "worker %d is not linked: this worker counts the refused CONNECTs of the "
            "addresses homed there until it is back ([overload] auth_failure_delay)",
            home,
        )
