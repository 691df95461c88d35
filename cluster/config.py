"""The `[cluster]` table of the configuration, checked (pure: no I/O).

Brokers with the same `name` that reach the same NATS servers form one cluster; `node` names
this broker within it (docs/cluster.md). Both end up in NATS subject tokens, so they are
letters, digits, `_` and `-` only. `parse_cluster` raises `ClusterConfigError` naming the key;
`actors.config` turns it into its `ConfigError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_URL = re.compile(r"(nats|tls)://[^\s/]+")
_FILES = ("cafile", "certfile", "keyfile", "credentials")
DEFAULT_HEARTBEAT = 1.0
DEFAULT_PEER_TIMEOUT = 5.0
DEFAULT_DOWN_QUEUE = 10_000


class ClusterConfigError(ValueError):
    """The `[cluster]` table is wrong; the message names the key."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The `[cluster]` table (docs/cluster.md)."""

    name: str = ""  # brokers with the same name form one cluster
    node: str = ""  # this broker, unique within the cluster
    nats: tuple[str, ...] = ()  # the NATS servers' URLs, nats://host:port or tls://host:port
    heartbeat: float = DEFAULT_HEARTBEAT  # seconds between this broker's "alive" messages
    # seconds of silence after which a peer is taken for gone and its routes dropped
    peer_timeout: float = DEFAULT_PEER_TIMEOUT
    connect_timeout: float = 2.0  # seconds for each attempt to reach a NATS server
    # seconds a CONNECT waits to claim its client id (and for the previous node to give it
    # up); past that it is refused with Server unavailable
    claim_timeout: float = 3.0
    replicas: int = 1  # copies JetStream keeps of the client-id records (3 in production)
    # QoS 1/2 messages each worker keeps in memory, per worker of a node that is down, for
    # that node's persistent sessions, to give it when it is back (0: none)
    down_queue: int = DEFAULT_DOWN_QUEUE
    user: str = ""  # NATS user and password, or a token, or a credentials file
    password: str = ""
    token: str = ""
    credentials: str = ""
    cafile: str = ""  # TLS to NATS: the CA that signed its certificate (tls:// URLs)
    certfile: str = ""  # a client certificate, if NATS asks for one
    keyfile: str = ""

    @property
    def uses_tls(self) -> bool:
        return bool(self.cafile) or any(url.startswith("tls://") for url in self.nats)


def parse_cluster(table: Any, config_dir: Path) -> ClusterConfig:
    """The `[cluster]` table, its file names made relative to `config_dir`."""
    if not isinstance(table, dict):
        raise ClusterConfigError("[cluster] must be a table")
    known = {field.name for field in fields(ClusterConfig)}
    unknown = set(table) - known
    if unknown:
        raise ClusterConfigError(
            f"[cluster] has unknown keys {sorted(unknown)}; known: {', '.join(sorted(known))}"
        )
    values: dict[str, Any] = {key: _token(table, key) for key in ("name", "node")}
    values["nats"] = _servers(table.get("nats"))
    values.update(_timings(table))
    replicas = table.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 5:
        raise ClusterConfigError("[cluster] replicas must be a whole number from 1 to 5")
    values["replicas"] = replicas
    down_queue = table.get("down_queue", DEFAULT_DOWN_QUEUE)
    if isinstance(down_queue, bool) or not isinstance(down_queue, int) or down_queue < 0:
        raise ClusterConfigError("[cluster] down_queue must be a whole number, 0 or more")
    values["down_queue"] = down_queue
    values.update(_credentials(table, config_dir))
    return ClusterConfig(**values)


def _token(table: dict[str, Any], key: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise ClusterConfigError(
            f"[cluster] {key} must be 1 to 64 letters, digits, '_' or '-', got {value!r}"
        )
    return value


def _servers(servers: Any) -> tuple[str, ...]:
    if isinstance(servers, str):
        servers = [servers]
    if (
        not isinstance(servers, list)
        or not servers
        or not all(isinstance(url, str) and _URL.fullmatch(url) for url in servers)
    ):
        raise ClusterConfigError(
            '[cluster] nats must list NATS servers as "nats://host:port" (or "tls://host:port"), '
            f"got {servers!r}"
        )
    return tuple(servers)


def _timings(table: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, float] = {}
    for key in ("heartbeat", "peer_timeout", "connect_timeout", "claim_timeout"):
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ClusterConfigError(f"[cluster] {key} must be a positive number of seconds")
            values[key] = float(value)
    heartbeat = values.get("heartbeat", DEFAULT_HEARTBEAT)
    if values.get("peer_timeout", DEFAULT_PEER_TIMEOUT) < 2 * heartbeat:
        raise ClusterConfigError(
            "[cluster] peer_timeout must be at least twice heartbeat, or a peer that is alive "
            "would be taken for gone between two of its heartbeats"
        )
    return values


def _credentials(table: dict[str, Any], config_dir: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for key in ("user", "password", "token", *_FILES):
        if key in table:
            value = table[key]
            if not isinstance(value, str):
                raise ClusterConfigError(f"[cluster] {key} must be a string")
            values[key] = str(config_dir / value) if key in _FILES and value else value
    if bool(values.get("user")) != bool(values.get("password")):
        raise ClusterConfigError("[cluster] user and password go together")
    if values.get("keyfile") and not values.get("certfile"):
        raise ClusterConfigError("[cluster] keyfile needs certfile")
    return values
