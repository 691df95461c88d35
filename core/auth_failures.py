"""Slowing down password guessing: a growing delay before the CONNACK that refuses a CONNECT,
per client address, pure.

The first refusal from an address is answered at once (a mistyped password costs nothing);
the Nth within `forget_after` seconds of the previous one waits `base * 2^(N-2)` seconds,
at most `maximum` (`[overload] auth_failure_delay`, `max_auth_failure_delay`). An accepted
CONNECT from the address forgets its failures. At most `max_addresses` addresses are
remembered; beyond, the ones not seen for longest are forgotten first, so a scan from many
addresses cannot make the broker hold unbounded state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_MAX_ADDRESSES = 100_000


class RefusalDelays(Protocol):
    """What a connection asks: `AuthFailureDelays` in one process, a pool worker's
    `pool.auth_failures.PoolAuthFailures` (counting at the address's home)."""

    def refused(self, address: str, now: float, answer: Callable[[float], object]) -> None: ...

    def succeeded(self, address: str) -> None: ...


@dataclass(slots=True)
class AuthFailureDelays:
    base: float
    maximum: float
    forget_after: float = 300.0
    max_addresses: int = DEFAULT_MAX_ADDRESSES
    # address -> (failures, time of the last one); insertion order = least recently failed
    _failures: dict[str, tuple[int, float]] = field(default_factory=dict)

    def failed(self, address: str, now: float) -> float:
        """A CONNECT from `address` was refused: the seconds to wait before the CONNACK."""
        return self.delay_for(self.count(address, now))

    def refused(self, address: str, now: float, answer: Callable[[float], object]) -> None:
        """`failed`, answered by calling `answer` with the delay (a pool's counting answers
        later: `pool.auth_failures`)."""
        answer(self.failed(address, now))

    def count(self, address: str, now: float) -> int:
        """Count a refused CONNECT from `address`: its refusals so far, this one included."""
        known = self._failures.pop(address, None)
        count = 1 if known is None or now - known[1] > self.forget_after else known[0] + 1
        if len(self._failures) >= self.max_addresses:
            del self._failures[next(iter(self._failures))]
        self._failures[address] = (count, now)
        return count

    def delay_for(self, count: int) -> float:
        """The seconds the CONNACK of an address's `count`-th refusal waits."""
        if count < 2 or self.base <= 0:
            return 0.0
        delay: float = self.base * 2.0 ** min(count - 2, 60)
        return delay if delay < self.maximum else self.maximum

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)

    def __contains__(self, address: object) -> bool:
        """Whether `address` has refusals remembered (perhaps forgotten by now)."""
        return address in self._failures

    def __len__(self) -> int:
        return len(self._failures)
