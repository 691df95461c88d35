"""Who is on the other end of a connection, as the broker and its plugins see it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientInfo:
    client_id: str
    username: str | None
    peer: str  # "host:port" of the remote end
    protocol_version: int  # 3, 4 or 5
    clean_start: bool
    keepalive: int
