"""Broker configuration: frozen dataclasses read from a TOML file, overridden by the command line.

Every key is documented in docs/configuration.md. Unknown tables or keys, and values of the
wrong type, fail at start-up with a message naming the key (a typo must not be silently
ignored).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """The configuration file or a command-line value is wrong; the message says which key."""


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    host: str = "127.0.0.1"
    port: int = 1883
    max_connections: int = 100_000


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_packet_size: int = 1_048_576  # bytes, whole packet; up to 268,435,460
    max_inflight: int = 32  # outgoing QoS 1/2 messages awaiting acknowledgement, per session
    max_queued_messages: int = 1000  # per session; 0 = unbounded
    queue_qos0: bool = False  # queue QoS 0 messages for offline persistent sessions
    max_awaiting_rel: int = 100  # incoming QoS 2 packet ids awaiting PUBREL; beyond: close
    connect_timeout: float = 10.0  # seconds from accept to CONNECT
    max_client_id_length: int = 65535
    max_topic_levels: int = 128
    # bytes waiting for a slow socket before QoS 0 to it is dropped and reads from it pause
    max_write_buffer: int = 4_194_304
    # a connection's input the actors have not handled yet, beyond which its reads pause
    max_unprocessed_packets: int = 1000
    max_unprocessed_bytes: int = 1_048_576
    # seconds a persistent session is kept after its client went away; 0 = forever
    session_expiry: float = 7200.0


@dataclass(frozen=True, slots=True)
class StoreConfig:
    kind: str = "sqlite"  # "sqlite" (durable), "memory" (tests), "none" (no persistence)
    data_dir: str = "data"  # relative to the working directory
    synchronous: str = "normal"  # SQLite: "normal" survives a process kill, "full" power loss


@dataclass(frozen=True, slots=True)
class AuthConfig:
    allow_anonymous: bool = True  # used when no authentication plugin decides


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    listener: ListenerConfig = field(default_factory=ListenerConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    node_name: str = "broker@127.0.0.1"
    log_level: str = "info"
    plugins: tuple[dict[str, Any], ...] = ()
    config_dir: Path = Path()


_SECTIONS = {
    "listener": ListenerConfig,
    "limits": LimitsConfig,
    "auth": AuthConfig,
    "store": StoreConfig,
}
_MAX_PACKET_SIZE_LIMIT = 268_435_455 + 5


def _section(name: str, cls: type, values: Any) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"[{name}] must be a table")
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"[{name}] unknown key {key!r}; known keys: {', '.join(known)}")
        default = getattr(cls(), key)
        expected = float if isinstance(default, float) else type(default)
        ok = isinstance(value, int | float) if expected is float else type(value) is expected
        if not ok:
            raise ConfigError(
                f"[{name}] {key} must be {expected.__name__}, got {type(value).__name__} {value!r}"
            )
        kwargs[key] = float(value) if expected is float else value
    return cls(**kwargs)


def _check(config: BrokerConfig) -> BrokerConfig:
    size = config.limits.max_packet_size
    if not 2 <= size <= _MAX_PACKET_SIZE_LIMIT:
        raise ConfigError(
            f"[limits] max_packet_size must be 2..{_MAX_PACKET_SIZE_LIMIT}, got {size}"
        )
    if not 1 <= config.limits.max_inflight <= 65535:
        raise ConfigError("[limits] max_inflight must be 1..65535")
    if config.limits.max_unprocessed_packets < 1 or config.limits.max_unprocessed_bytes < 1:
        raise ConfigError(
            "[limits] max_unprocessed_packets and max_unprocessed_bytes must be at least 1"
        )
    if config.limits.max_awaiting_rel < 1:
        raise ConfigError("[limits] max_awaiting_rel must be at least 1 (0 would refuse QoS 2)")
    if config.store.kind not in ("sqlite", "memory", "none"):
        raise ConfigError(f"[store] kind must be sqlite, memory or none, got {config.store.kind!r}")
    if config.store.synchronous not in ("normal", "full"):
        raise ConfigError("[store] synchronous must be normal or full")
    if not 0 <= config.listener.port <= 65535:
        raise ConfigError(f"[listener] port must be 0..65535, got {config.listener.port}")
    return config


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> BrokerConfig:
    """Read `path` (TOML) if given, then apply command-line `overrides`.

    `overrides` keys: host, port, log_level, data_dir, store (None values are ignored).
    """
    raw: dict[str, Any] = {}
    config_dir = Path()
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as error:
            raise ConfigError(f"config file {path} not found") from error
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"config file {path} is not valid TOML: {error}") from error
        config_dir = path.parent
    kwargs: dict[str, Any] = {"config_dir": config_dir}
    for key, value in raw.items():
        if key in _SECTIONS:
            kwargs[key] = _section(key, _SECTIONS[key], value)
        elif key == "plugins":
            if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
                raise ConfigError("plugins must be an array of tables: [[plugins]] module = ...")
            kwargs["plugins"] = tuple(value)
        elif key in ("node_name", "log_level"):
            if not isinstance(value, str):
                raise ConfigError(f"{key} must be a string")
            kwargs[key] = value
        else:
            raise ConfigError(
                f"unknown top-level key {key!r}; known: listener, limits, auth, store, plugins, "
                "node_name, log_level"
            )
    config = BrokerConfig(**kwargs)
    return _check(_apply_overrides(config, overrides or {}))


def _apply_overrides(config: BrokerConfig, overrides: dict[str, Any]) -> BrokerConfig:
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if "host" in overrides or "port" in overrides:
        listener = replace(
            config.listener,
            host=overrides.get("host", config.listener.host),
            port=overrides.get("port", config.listener.port),
        )
        config = replace(config, listener=listener)
    if "log_level" in overrides:
        config = replace(config, log_level=overrides["log_level"])
    if "data_dir" in overrides or "store" in overrides:
        store = replace(
            config.store,
            data_dir=str(overrides.get("data_dir", config.store.data_dir)),
            kind=overrides.get("store", config.store.kind),
        )
        config = replace(config, store=store)
    return config
