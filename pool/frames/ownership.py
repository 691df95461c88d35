"""The frames of client-id ownership: a claim to the id's home and its answers, the owner's
settling or release (or the claimant's declining), the previous owner's hand-over, and the
ids each worker owns, told to a worker whose link comes up (docs/pool.md "One owner per
client id")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Claim:
    """To the client id's home: `claimant` wants to own `client_id`."""

    client_id: str
    claimant: int


@dataclass(frozen=True, slots=True)
class Granted:
    """From the home: the claim is granted; `previous` owned the id (None: nobody)."""

    client_id: str
    claimant: int
    previous: int | None


@dataclass(frozen=True, slots=True)
class ClaimRefused:
    """From the home, instead of `Granted`: `client_id` is banned (flapping detection there
    counted this CONNECT, or a ban the claimant had not heard of yet). The claimant refuses
    the CONNECT with CONNACK 0x8A; `reason` is its Reason String."""

    client_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Settled:
    """To the home: `owner`, granted the id, now holds its session; the next claim may go."""

    client_id: str
    owner: int


@dataclass(frozen=True, slots=True)
class Release:
    """To the home: `owner` no longer owns `client_id` (its session ended or moved on)."""

    client_id: str
    owner: int


@dataclass(frozen=True, slots=True)
class Declined:
    """To the home: `claimant`, granted `client_id`, refused its CONNECT before taking the
    session from the previous owner (a later claim on another node of the cluster fenced
    it): the id goes back to the previous owner, whose session is still there."""

    client_id: str
    claimant: int


@dataclass(frozen=True, slots=True)
class HandOver:
    """To the previous owner: `claimant` was granted `client_id`; close its connection and
    give the session up (clean = 1: discard it [MQTT-3.1.2-4]), then answer `HandedOver`."""

    client_id: str
    claimant: int
    clean: int


@dataclass(frozen=True, slots=True)
class HandedOver:
    """To the claimant: the sender holds no session for `client_id` any more, and what it had
    is committed to the store (a discarded one is deleted there)."""

    client_id: str


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Cluster: to each worker of the node that held `client_id`, from a node that claimed it
    in the cluster's registry at `revision`: a session held under an older claim is given up
    (its connection closed as taken over). With `clean` = 1 it is discarded and the answer is
    `HandedOver`; else the answer is `SessionHandedOver` with the session, if it had one."""

    client_id: str
    revision: int
    clean: int


@dataclass(frozen=True, slots=True)
class SessionHandedOver:
    """Cluster: the answer to a `GiveUp` from the worker that held the session: its stored
    form (`store.op_codec.encode_ops` of its `PutSession` and `PutMessage` ops, base64). The
    claimant answers `HandedOver` once it has stored it; the sender then deletes its copy."""

    client_id: str
    revision: int
    ops: str


@dataclass(frozen=True, slots=True)
class Owned:
    """To a worker whose link just came up: the ids homed at it that `owner` owns, so that a
    restarted home knows its ids' owners again (and does not restore their sessions)."""

    owner: int
    client_ids: tuple[str, ...]
