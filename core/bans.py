"""The banned table and flapping detection: pure state, every method takes the time `now`.

A `Ban` refuses CONNECTs by client id, user name or peer address (one IP or a CIDR block),
until it expires (`until`, seconds since the epoch; None: until removed). The broker checks
every CONNECT against the `BanTable` before authentication and answers a match with CONNACK
0x8A Banned (3.1.1: 0x05 not authorised), as EMQX does.

`FlappingDetector` counts the CONNECTs of each client id within a sliding window: the
`max_connects`-th one inside `window` seconds makes it answer True, and the broker then bans
that client id for `ban_time` seconds (EMQX's flapping detection; a client stuck in a
reconnect loop costs the broker a session set-up per attempt).
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Any

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class BanKind(Enum):
    CLIENT_ID = "clientid"
    USERNAME = "username"
    PEER = "peerhost"  # an IP address or a CIDR block


class BanError(ValueError):
    """A ban that cannot be: an unknown kind, an address that is not one, an empty value."""


@dataclass(frozen=True, slots=True)
class Ban:
    kind: BanKind
    value: str  # for PEER the normalised network, e.g. "10.0.0.0/8" or "192.0.2.7/32"
    until: float | None  # seconds since the epoch; None: never expires
    reason: str = ""
    created_at: float = 0.0

    def expired(self, now: float) -> bool:
        return self.until is not None and now >= self.until

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "value": self.value,
            "until": self.until,
            "reason": self.reason,
            "created_at": self.created_at,
        }


def ban_from_dict(data: dict[str, Any]) -> Ban:
    """The ban `Ban.as_dict` wrote (or an API request holds); BanError if it is malformed."""
    try:
        kind = BanKind(data["kind"])
    except (KeyError, ValueError) as error:
        kinds = ", ".join(k.value for k in BanKind)
        raise BanError(f"kind must be one of {kinds}, got {data.get('kind')!r}") from error
    value = data.get("value")
    if not isinstance(value, str) or not value:
        raise BanError("value must be a non-empty string")
    until = data.get("until")
    if until is not None and not isinstance(until, int | float):
        raise BanError(f"until must be a number (seconds since the epoch) or null, got {until!r}")
    reason = data.get("reason", "")
    created_at = data.get("created_at", 0.0)
    if not isinstance(reason, str) or not isinstance(created_at, int | float):
        raise BanError("reason must be a string and created_at a number")
    if kind is BanKind.PEER:
        value = str(parse_network(value))
    return Ban(kind, value, None if until is None else float(until), reason, float(created_at))


def parse_network(text: str) -> IpNetwork:
    """ "192.0.2.7" -> 192.0.2.7/32, "10.0.0.0/8" -> itself; BanError if it is no address."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError as error:
        raise BanError(f"{text!r} is not an IP address or CIDR block") from error


def peer_ip(peer: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP of a "host:port" peer ("[::1]:5000" and "::1:5000" too); None for unix peers."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class BanTable:
    """The bans in force; expired ones are dropped when met (`match`, `bans`)."""

    __slots__ = ("_by_key", "_networks")

    def __init__(self) -> None:
        self._by_key: dict[tuple[BanKind, str], Ban] = {}
        self._networks: dict[str, tuple[IpNetwork, Ban]] = {}  # PEER bans, parsed once

    def __len__(self) -> int:
        return len(self._by_key)

    def add(self, ban: Ban) -> None:
        """Add `ban`, replacing a ban of the same kind and value."""
        self._by_key[(ban.kind, ban.value)] = ban
        if ban.kind is BanKind.PEER:
            self._networks[ban.value] = (parse_network(ban.value), ban)

    def get(self, kind: BanKind, value: str) -> Ban | None:
        """The ban of `kind` on `value` (expired or not), or None."""
        if kind is BanKind.PEER:
            value = str(parse_network(value))
        return self._by_key.get((kind, value))

    def remove(self, kind: BanKind, value: str) -> bool:
        """Lift the ban of `kind` on `value`; False if there was none."""
        if kind is BanKind.PEER:
            value = str(parse_network(value))
            self._networks.pop(value, None)
        return self._by_key.pop((kind, value), None) is not None

    def bans(self, now: float) -> list[Ban]:
        """The bans in force at `now`, oldest first."""
        self._drop_expired(now)
        return sorted(self._by_key.values(), key=lambda ban: (ban.created_at, ban.value))

    def match(self, client_id: str, username: str | None, peer: str, now: float) -> Ban | None:
        """The ban that refuses this CONNECT at `now`, or None."""
        if not self._by_key:
            return None
        candidates = [self._by_key.get((BanKind.CLIENT_ID, client_id))]
        if username is not None:
            candidates.append(self._by_key.get((BanKind.USERNAME, username)))
        if self._networks:
            ip = peer_ip(peer)
            if ip is not None:
                candidates += [
                    ban
                    for network, ban in self._networks.values()
                    if ip.version == network.version and ip in network
                ]
        for ban in candidates:
            if ban is None:
                continue
            if ban.expired(now):
                self.remove(ban.kind, ban.value)
                continue
            return ban
        return None

    def _drop_expired(self, now: float) -> None:
        for ban in [b for b in self._by_key.values() if b.expired(now)]:
            self.remove(ban.kind, ban.value)


class FlappingDetector:
    """Counts CONNECTs per client id in a sliding window of `window` seconds.

    A client id's history is the time of its one CONNECT in the window (a float: what almost
    every client id has), or a deque once it has more (a deque per client id would cost
    ~0.6 KB per connection).
    """

    __slots__ = ("_connects", "max_connects", "window")

    def __init__(self, max_connects: int, window: float) -> None:
        self.max_connects = max_connects  # 0: detection off
        self.window = window
        self._connects: dict[str, float | deque[float]] = {}

    def connect(self, client_id: str, now: float) -> bool:
        """Record a CONNECT; True when it is the `max_connects`-th within the window (the
        client id's history is then cleared, so the next offence counts from zero)."""
        if self.max_connects <= 0:
            return False
        horizon = now - self.window
        history = self._connects.get(client_id)
        if isinstance(history, deque):
            times = history
            while times and times[0] <= horizon:
                times.popleft()
        elif history is not None and history > horizon:
            times = deque((history,))
        elif self.max_connects > 1:
            self._connects[client_id] = now  # its first CONNECT in the window
            return False
        else:
            times = deque()
        times.append(now)
        if len(times) >= self.max_connects:
            self._connects.pop(client_id, None)
            return True
        self._connects[client_id] = times
        return False

    def forget_idle(self, now: float) -> None:
        """Drop the histories whose connects all left the window (bounds the memory)."""
        horizon = now - self.window
        idle = [
            client_id
            for client_id, history in self._connects.items()
            if (history[-1] if isinstance(history, deque) else history) <= horizon
        ]
        for client_id in idle:
            del self._connects[client_id]
