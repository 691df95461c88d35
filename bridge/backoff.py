"""When and where a bridge tries to connect next (pure: the caller sleeps).

As Paho's client does with several server URIs: every attempt of a round goes to the next
address, the first one first, without waiting between them; once a whole round failed the
bridge waits before the next round, `first` seconds after the first failed round, doubling
after each further one up to `cap`, each wait scaled by a random factor in [0.5, 1.0]
(jitter, so that many bridges cut off together do not come back in step). A connection
that was made starts the schedule over: once it is lost, the bridge waits `first` seconds
(with jitter: a remote that accepts and then drops the bridge is not hammered) and tries
the first address again, or with `round_robin` (all addresses equals, Mosquitto's
`round_robin true`) the one after the address it had.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """The attempt schedule of one bridge over its `addresses`."""

    __slots__ = (
        "_addresses",
        "_cap",
        "_first",
        "_index",
        "_random",
        "_round_robin",
        "_rounds",
        "_tried",
    )

    def __init__(
        self,
        addresses: tuple[str, ...],
        first: float,
        cap: float,
        rng: Callable[[], float] = random.random,
        *,
        round_robin: bool = False,
    ) -> None:
        self._addresses = addresses
        self._round_robin = round_robin
        self._first = first
        self._cap = cap
        self._random = rng  # a number in [0, 1)
        self._index = 0  # the address of the next attempt
        self._rounds = 0  # whole rounds failed in a row
        self._tried = 0  # attempts failed in this round

    @property
    def address(self) -> str:
        """Where the next attempt goes."""
        return self._addresses[self._index]

    @property
    def at_first(self) -> bool:
        """Whether the next attempt (or the connection made) is to the first address."""
        return self._index == 0

    def failed(self) -> float:
        """The attempt to `address` failed: the seconds to wait before the next one (0
        within a round: until every address was tried once)."""
        self._index = (self._index + 1) % len(self._addresses)
        self._tried += 1
        if self._tried < len(self._addresses):
            return 0.0
        self._tried = 0
        self._rounds += 1
        return self._jittered(min(self._cap, self._first * 2 ** (self._rounds - 1)))

    def connected(self) -> None:
        """A connection was made (to `address`): the schedule starts over."""
        self._rounds = self._tried = 0

    def lost(self) -> float:
        """The connection made was lost: the seconds to wait before trying the first
        address again (with `round_robin`, the next one)."""
        self._index = (self._index + 1) % len(self._addresses) if self._round_robin else 0
        self._tried = 0
        return self._jittered(self._first)

    def _jittered(self, seconds: float) -> float:
        return seconds * (0.5 + self._random() / 2)
