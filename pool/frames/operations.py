"""The frames of the operations surface: a worker's part of an admin API table or figure,
asked and answered, and bans replicated to every worker (docs/pool.md "The operations
surface")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class OpsRequest:
    """From the worker serving the admin API: answer `OpsReply(token, rows)` with this
    worker's part of `op` ("clients", "sessions", "kick", "figures", ...; `args` are its
    string arguments, the request's filters)."""

    token: int
    op: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OpsReply:
    """The answer to `OpsRequest(token)`: the sender's rows (JSON objects)."""

    token: int
    rows: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class BanSet:
    """A ban was added on the sender (`Ban.as_dict`): every worker applies it."""

    ban: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BanLifted:
    """The ban of `kind` on `value` was lifted on the sender: every worker lifts it."""

    kind: str
    value: str


@dataclass(frozen=True, slots=True)
class BansSnapshot:
    """After `Hello`: every ban the sender holds; the peer adds those it lacks."""

    bans: tuple[dict[str, Any], ...]
