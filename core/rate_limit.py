"""Token buckets for rate limits, pure: how long a client or a listener has to wait.

A bucket fills at `rate` tokens a second up to `burst` (one second's worth by default) and
may go into debt: a read of 500 PUBLISH packets when 10 tokens are left is let through, and
the reader then waits for the debt to be repaid (`take` answers that wait). Over a long run
the rate is therefore exact, whatever the size of the reads; the broker never disconnects
for rate, it only stops reading (docs/overload.md).

- `RateLimiter`: a client's messages/s and bytes/s (`[overload] messages_rate`,
  `bytes_rate`, or a client.rate_limit plugin's answer as `RateLimits`).
- `TokenBucket` alone: a listener's connections/s (`max_connection_rate`), where the
  listener asks `wait` before accepting and `take`s one token per accepted connection.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RateLimits:
    """A client's limits; 0 means unlimited. The client.rate_limit hook folds over these."""

    messages_rate: float = 0.0  # PUBLISH packets per second
    bytes_rate: float = 0.0  # bytes read per second

    @property
    def unlimited(self) -> bool:
        return self.messages_rate <= 0 and self.bytes_rate <= 0


class TokenBucket:
    __slots__ = ("burst", "rate", "tokens", "updated")

    def __init__(self, rate: float, now: float, burst: float | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be above 0, got {rate}")
        self.rate = rate
        self.burst = rate if burst is None else burst
        self.tokens = self.burst
        self.updated = now

    def _refill(self, now: float) -> None:
        tokens = self.tokens + (now - self.updated) * self.rate
        self.tokens = tokens if tokens < self.burst else self.burst
        self.updated = now

    def take(self, amount: float, now: float) -> float:
        """Spend `amount` tokens (possibly into debt); the seconds to wait before the next
        take would find the bucket out of debt (0.0: no wait)."""
        self._refill(now)
        self.tokens -= amount
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def wait(self, amount: float, now: float) -> float:
        """The seconds until `amount` tokens are there, without spending them."""
        self._refill(now)
        missing = amount - self.tokens
        return 0.0 if missing <= 0 else missing / self.rate


class RateLimiter:
    """A client's buckets: `take` after each read answers how long to stop reading."""

    __slots__ = ("_bytes", "_messages")

    def __init__(self, limits: RateLimits, now: float) -> None:
        self._messages = (
            TokenBucket(limits.messages_rate, now) if limits.messages_rate > 0 else None
        )
        self._bytes = TokenBucket(limits.bytes_rate, now) if limits.bytes_rate > 0 else None

    def take(self, messages: int, size: int, now: float) -> float:
        """A read of `size` bytes holding `messages` PUBLISH packets: seconds to pause."""
        delay = 0.0
        if self._messages is not None and messages:
            delay = self._messages.take(messages, now)
        if self._bytes is not None:
            waited = self._bytes.take(size, now)
            delay = max(delay, waited)
        return delay
