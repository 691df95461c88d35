"""The frames that let a CONNECT be judged pool-wide: its count for flapping detection at the
client id's home, refused CONNECTs counted at the address's home, and each worker's open
connections per listener (docs/pool.md "Flapping detection", "Refused-CONNECT delays",
"Limits in a pool")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Connecting:
    """To the client id's home: a CONNECT of `client_id` reached admission on the sender;
    the home's flapping detection counts it (`pool.admission`)."""

    client_id: str


@dataclass(frozen=True, slots=True)
class AuthFailed:
    """To the home of `address` (`pool.ownership.home_of` of the IP address): a CONNECT
    from it was refused on the sender; answer `AuthFailures(token, count)`."""

    token: int
    address: str


@dataclass(frozen=True, slots=True)
class AuthFailures:
    """The home's answer to `AuthFailed(token, ...)`: the address's refusals counted so far,
    this one included (the sender's CONNACK waits the delay of that count)."""

    token: int
    count: int


@dataclass(frozen=True, slots=True)
class AuthFailing:
    """From the home of `address`, to every worker: its first refusal was counted; an
    accepted CONNECT from it on any worker is told to the home (`AuthSucceeded`)."""

    address: str


@dataclass(frozen=True, slots=True)
class AuthSucceeded:
    """To the home of `address`: a CONNECT from it was accepted; its count starts over."""

    address: str


@dataclass(frozen=True, slots=True)
class ListenerCounts:
    """The sender's open connections on each listener, in configuration order: sent when
    they change (coalesced, `pool.connection_counts`) and to a worker whose link comes up.
    A worker refuses a connection when its own and the others' last counts reach the
    listener's `max_connections`."""

    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if any(count < 0 for count in self.counts):
            raise ValueError(f"negative connection counts {self.counts!r}")
