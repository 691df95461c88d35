"""How many wrong passwords the admin listener takes from one peer (pure: the clock is
passed in).

Every password check counts: a login from the dashboard's page and `Authorization: Basic`.
After `MAX_FAILURES` wrong ones from one address within `WINDOW` seconds, that address's
password checks are refused (429) until the oldest of them is `WINDOW` seconds old, right
password or not: guessing the admin password then takes at most `MAX_FAILURES` tries a
`WINDOW` per address. A right password forgets the address's failures. At most
`MAX_PEERS` addresses are tracked; beyond, the one whose last failure is oldest is
forgotten.
"""

from __future__ import annotations

from collections import deque

MAX_FAILURES = 10
WINDOW = 60.0  # seconds
MAX_PEERS = 10_000


class LoginLimiter:
    def __init__(self) -> None:
        # peer -> times of its recent failures; the peer failing least recently first
        self._failures: dict[str, deque[float]] = {}

    def wait(self, peer: str, now: float) -> float:
        """Seconds before `peer` may try a password again; 0: it may now."""
        times = self._recent(peer, now)
        if times is None or len(times) < MAX_FAILURES:
            return 0.0
        return times[0] + WINDOW - now

    def failed(self, peer: str, now: float) -> int:
        """Count a wrong password from `peer`; how many it has made within the window."""
        times = self._recent(peer, now)
        if times is None:
            while len(self._failures) >= MAX_PEERS:
                del self._failures[next(iter(self._failures))]
            times = deque(maxlen=MAX_FAILURES)
        else:
            del self._failures[peer]  # re-inserted last: the latest to fail
        times.append(now)
        self._failures[peer] = times
        return len(times)

    def succeeded(self, peer: str) -> None:
        self._failures.pop(peer, None)

    def _recent(self, peer: str, now: float) -> deque[float] | None:
        times = self._failures.get(peer)
        if times is None:
            return None
        while times and now - times[0] >= WINDOW:
            times.popleft()
        return times
