"""Broker configuration: frozen dataclasses read from a TOML file, overridden by the command line.

Every key is documented in docs/configuration.md. Unknown tables or keys, and values of the
wrong type, fail at start-up with a message naming the key (a typo must not be silently
ignored).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from bridge.config import BridgeConfig, BridgeConfigError, parse_bridges
from cluster.config import ClusterConfig, ClusterConfigError, parse_cluster
from net.listener_config import ListenerConfig
from router.share_strategy import STRATEGY_NAMES


class ConfigError(ValueError):
    """The configuration file or a command-line value is wrong; the message says which key."""


LISTENER_TYPES = ("tcp", "tls", "ws", "wss", "unix")
TLS_VERSIONS = ("1.2", "1.3")  # tls_version: the oldest version a client may speak


_NETWORK_KEYS = frozenset({"type", "host", "port", "max_connections", "max_connection_rate"})
_TLS_KEYS = frozenset(
    {
        "certfile",
        "keyfile",
        "cafile",
        "require_certificate",
        "use_identity_as_username",
        "tls_version",
        "ciphers",
    }
)
_WEBSOCKET_KEYS = frozenset({"path", "allowed_origins"})
_LISTENER_KEYS = {
    "tcp": _NETWORK_KEYS,
    "tls": _NETWORK_KEYS | _TLS_KEYS,
    "ws": _NETWORK_KEYS | _WEBSOCKET_KEYS,
    "wss": _NETWORK_KEYS | _TLS_KEYS | _WEBSOCKET_KEYS,
    "unix": frozenset({"type", "path", "max_connections", "max_connection_rate"}),
}
_DEFAULT_PORTS = {"tcp": 1883, "tls": 8883, "ws": 8083, "wss": 8084}
_FILE_KEYS = ("certfile", "keyfile", "cafile")


CPU_AFFINITY_CHOICES = ("auto", "none")  # [broker] cpu_affinity: pool.cpu_affinity


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_packet_size: int = 1_048_576  # bytes, whole packet; up to 268,435,460
    max_inflight: int = 32  # outgoing QoS 1/2 messages awaiting acknowledgement, per session
    max_queued_messages: int = 1000  # per session; 0 = unbounded
    # payload bytes a session may queue; 0 = unbounded. Like max_queued_messages it bounds
    # offline sessions and stuck subscribers; connected ones are bounded by flow control
    max_queued_bytes: int = 67_108_864
    queue_qos0: bool = False  # queue QoS 0 messages for offline persistent sessions
    # incoming QoS 2 packet ids awaiting PUBREL; beyond, new QoS 2 PUBLISHes wait for PUBRELs
    max_awaiting_rel: int = 100
    connect_timeout: float = 10.0  # seconds from accept to CONNECT
    max_client_id_length: int = 65535
    max_topic_levels: int = 128
    # accept client ids and will topics holding control characters (U+0001-U+001F,
    # U+007F-U+009F); false: CONNACK 0x02 / 0x85, or for a will topic 0x90 (3.x: close)
    allow_control_characters: bool = False
    # bytes waiting for a slow socket before QoS 0 to it is dropped and reads from it pause
    max_write_buffer: int = 4_194_304
    # a connection's input the actors have not handled yet, beyond which its reads pause
    max_unprocessed_packets: int = 1000
    max_unprocessed_bytes: int = 1_048_576
    # seconds a persistent 3.x session is kept after its client went away; 0 = forever
    session_expiry: float = 7200.0
    # the most seconds any session is kept (a 5.0 client's Session Expiry Interval is
    # lowered to it, and CONNACK says so); 0 = no maximum
    max_session_expiry: float = 0.0
    # the most seconds of keep-alive a client may use; longer (or 0) is replaced by it and
    # 5.0 clients are told with Server Keep Alive; 0 = no maximum
    max_keepalive: int = 0


@dataclass(frozen=True, slots=True)
class MqttConfig:
    """What the broker offers MQTT 5.0 clients (announced in CONNACK) and how it checks them."""

    maximum_qos: int = 2  # highest QoS accepted from and granted to clients
    retain_available: bool = True
    wildcard_subscriptions: bool = True
    subscription_identifiers: bool = True
    topic_alias_maximum: int = 10  # aliases a 5.0 client may use per connection; 0 = none
    response_information: str = ""  # sent to 5.0 clients that ask for it; "" = none
    validate_utf8_payloads: bool = False  # refuse (0x99) payloads marked UTF-8 that are not


@dataclass(frozen=True, slots=True)
class OverloadConfig:
    """`[overload]`: flow control, the memory watermark and rate limits (docs/overload.md)."""

    flow_control: bool = True
    # a connected session's in-flight + queued messages / payload bytes: at the high mark
    # its publishers pause, at the low mark they resume
    high_water_messages: int = 1000
    low_water_messages: int = 500
    high_water_bytes: int = 16_777_216
    low_water_bytes: int = 8_388_608
    max_stall: float = 10.0  # seconds over high water without an ack: a stuck subscriber
    # up to 1.0: a fraction of the machine's memory; above 1: bytes
    memory_high_watermark: float = 0.4
    memory_check_interval: float = 1.0  # seconds between memory samples and stall checks
    # per client, token buckets; 0 = unlimited
    messages_rate: float = 0.0  # PUBLISH packets per second
    bytes_rate: float = 0.0  # bytes read per second
    # seconds before CONNACK after the Nth authentication failure from one address:
    # auth_failure_delay * 2^(N-1), at most max_auth_failure_delay; 0 = off
    auth_failure_delay: float = 0.1
    max_auth_failure_delay: float = 2.0


@dataclass(frozen=True, slots=True)
class StoreConfig:
    kind: str = "sqlite"  # "sqlite" (durable), "memory" (tests), "none" (no persistence)
    data_dir: str = "data"  # relative to the working directory
    synchronous: str = "normal"  # SQLite: "normal" survives a process kill, "full" power loss
    # Seconds a CONNECT that needs the store (a pool worker loads the session) waits for a
    # store process that is away (restarting) before CONNACK 0x88 (3.1.1: 3).
    connect_wait: float = 5.0


@dataclass(frozen=True, slots=True)
class AuthConfig:
    allow_anonymous: bool = True  # used when no authentication plugin decides
    # Seconds a connection keeps each publish decision of the ACL plugins, by topic and
    # QoS (channel.publish_acl; at most 32 per connection, all forgotten on SIGHUP); 0:
    # every PUBLISH asks them.
    acl_cache_ttl: float = 60.0


@dataclass(frozen=True, slots=True)
class HttpConfig:
    """The admin HTTP listener: API, /metrics, dashboard (docs/operations.md)."""

    host: str = "127.0.0.1"
    port: int = 18083  # 0: no HTTP listener
    certfile: str = ""  # PEM chain; set: HTTPS
    keyfile: str = ""  # "" when the key is in certfile
    api_keys: tuple[str, ...] = ()  # "sha256:<hex>" of each key (python -m admin.ctl hash-key)
    api_key_file: str = ""  # one "sha256:<hex>" a line
    password_file: str = ""  # Basic auth against a mosquitto_passwd file
    metrics_auth: bool = False  # /metrics needs credentials too
    # open connections; at the cap the oldest idle one is closed for each new one
    max_connections: int = 64
    idle_timeout: float = 10.0  # seconds a connection may wait between requests
    header_timeout: float = 5.0  # seconds a request's line and headers (and its body) may take


@dataclass(frozen=True, slots=True)
class SysConfig:
    interval: float = 10.0  # seconds between $SYS/broker/... updates; 0: none
    presence_events: bool = False  # $SYS/brokers/<node>/clients/<id>/connected|disconnected


@dataclass(frozen=True, slots=True)
class FlappingConfig:
    max_connects: int = 0  # CONNECTs of one client id within `window` that ban it; 0: off
    window: float = 60.0  # seconds
    ban_time: float = 300.0  # seconds a flapping client id stays banned


@dataclass(frozen=True, slots=True)
class SharedSubscriptionsConfig:
    enabled: bool = True  # announced in CONNACK; off: SUBACK 0x9E for $share/... filters
    strategy: str = "round_robin"  # router.share_strategy.STRATEGY_NAMES


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    listeners: tuple[ListenerConfig, ...] = (ListenerConfig(),)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    overload: OverloadConfig = field(default_factory=OverloadConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    sys: SysConfig = field(default_factory=SysConfig)
    flapping: FlappingConfig = field(default_factory=FlappingConfig)
    shared_subscriptions: SharedSubscriptionsConfig = field(
        default_factory=SharedSubscriptionsConfig
    )
    mqtt: MqttConfig = field(default_factory=MqttConfig)
    node_name: str = "broker@127.0.0.1"
    log_level: str = "info"
    plugins: tuple[dict[str, Any], ...] = ()
    config_dir: Path = Path()
    # [broker] workers: processes in the pool; None: "auto" (the CPU cores), the default.
    workers: int | None = None
    # [broker] cpu_affinity: "auto" pins each pool worker to a CPU of its own; "none" does
    # not (pool.cpu_affinity).
    cpu_affinity: str = "auto"
    # [[bridges]]: topics forwarded to and from other MQTT brokers (docs/bridges.md).
    bridges: tuple[BridgeConfig, ...] = ()
    # [cluster]: brokers on several machines acting as one, over NATS (docs/cluster.md).
    cluster: ClusterConfig | None = None

    @property
    def listener(self) -> ListenerConfig:
        """The first tcp listener (the one `--host`/`--port` set), else the first listener."""
        return next((x for x in self.listeners if x.type == "tcp"), self.listeners[0])


_SECTIONS = {
    "limits": LimitsConfig,
    "overload": OverloadConfig,
    "auth": AuthConfig,
    "store": StoreConfig,
    "http": HttpConfig,
    "sys": SysConfig,
    "flapping": FlappingConfig,
    "shared_subscriptions": SharedSubscriptionsConfig,
    "mqtt": MqttConfig,
}
_MAX_PACKET_SIZE_LIMIT = 268_435_455 + 5


def _section(name: str, cls: type, values: Any, config_dir: Path) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"[{name}] must be a table")
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"[{name}] unknown key {key!r}; known keys: {', '.join(known)}")
        default = getattr(cls(), key)
        if isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"[{name}] {key} must be an array of strings")
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = _typed(f"[{name}]", key, value, default)
    section = cls(**kwargs)
    return _http_paths(section, config_dir) if isinstance(section, HttpConfig) else section


def _typed(where: str, key: str, value: Any, default: Any) -> Any:
    """`value` if it has the type of `default` (an int is accepted for a float)."""
    expected = float if isinstance(default, float) else type(default)
    ok = isinstance(value, int | float) if expected is float else type(value) is expected
    if not ok:
        raise ConfigError(
            f"{where} {key} must be {expected.__name__}, got {type(value).__name__} {value!r}"
        )
    return float(value) if expected is float else value


def _listeners(raw: dict[str, Any], config_dir: Path) -> tuple[ListenerConfig, ...] | None:
    """The listeners of `[listener]` (one tcp listener) or `[[listeners]]`; None: neither."""
    if "listener" in raw and "listeners" in raw:
        raise ConfigError(
            "[listener] and [[listeners]] are both set: move the [listener] keys into a "
            '[[listeners]] table with type = "tcp"'
        )
    if "listener" in raw:
        table = raw["listener"]
        if not isinstance(table, dict):
            raise ConfigError("[listener] must be a table")
        if "type" in table:
            raise ConfigError("[listener] is the tcp listener: use [[listeners]] to set type")
        return (_listener("[listener]", {"type": "tcp", **table}, config_dir),)
    if "listeners" in raw:
        tables = raw["listeners"]
        if (
            not isinstance(tables, list)
            or not tables
            or not all(isinstance(t, dict) for t in tables)
        ):
            raise ConfigError(
                'listeners must be a non-empty array of tables: [[listeners]] type = "tcp" ...'
            )
        listeners = tuple(
            _listener(f"[[listeners]] #{number}", table, config_dir)
            for number, table in enumerate(tables, 1)
        )
        _check_distinct(listeners)
        return listeners
    return None


def _listener(where: str, table: dict[str, Any], config_dir: Path) -> ListenerConfig:
    """One listener table, checked: `where` names it in errors ("[[listeners]] #2")."""
    kind = table.get("type", "tcp")
    if kind not in LISTENER_TYPES:
        raise ConfigError(f"{where} type must be one of {', '.join(LISTENER_TYPES)}, got {kind!r}")
    where = f"{where} ({kind})"
    allowed = _LISTENER_KEYS[kind]
    defaults = ListenerConfig()
    kwargs: dict[str, Any] = {"type": kind, "port": _DEFAULT_PORTS.get(kind, 0)}
    for key, value in table.items():
        if key not in allowed:
            types = [name for name, keys in _LISTENER_KEYS.items() if key in keys]
            if types:
                raise ConfigError(f"{where}: {key} applies to {', '.join(types)} listeners only")
            raise ConfigError(
                f"{where}: unknown key {key!r}; known keys for {kind}: {', '.join(sorted(allowed))}"
            )
        if key == "allowed_origins":
            if not isinstance(value, list) or not all(isinstance(o, str) for o in value):
                raise ConfigError(f"{where} allowed_origins must be an array of strings")
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = _typed(where, key, value, getattr(defaults, key))
    for key in _FILE_KEYS:
        if kwargs.get(key):
            kwargs[key] = str(config_dir / kwargs[key])
    if kind == "unix" and "path" not in table:
        raise ConfigError(f"{where}: path is required (the socket file, e.g. /run/mqtt.sock)")
    listener = ListenerConfig(**kwargs)
    _check_listener(where, listener)
    return listener


def _check_listener(where: str, listener: ListenerConfig) -> None:
    if not 0 <= listener.port <= 65535:
        raise ConfigError(f"{where} port must be 0..65535, got {listener.port}")
    if listener.max_connections < 1:
        raise ConfigError(f"{where} max_connections must be at least 1")
    if listener.max_connection_rate < 0:
        raise ConfigError(f"{where} max_connection_rate must be 0 (unlimited) or above")
    if listener.type in ("ws", "wss") and not listener.path.startswith("/"):
        raise ConfigError(f"{where} path must start with '/', got {listener.path!r}")
    if not listener.is_tls:
        return
    if not listener.certfile:
        raise ConfigError(f"{where}: certfile is required (the server certificate chain, PEM)")
    if listener.tls_version not in TLS_VERSIONS:
        raise ConfigError(
            f"{where} tls_version must be one of {', '.join(TLS_VERSIONS)}, "
            f"got {listener.tls_version!r}"
        )
    if (listener.require_certificate or listener.use_identity_as_username) and not listener.cafile:
        raise ConfigError(
            f"{where}: require_certificate and use_identity_as_username need cafile (the CA "
            "certificates that client certificates are verified against)"
        )


def _check_distinct(listeners: tuple[ListenerConfig, ...]) -> None:
    """Two listeners on one address would fail at start-up with a vaguer error."""
    seen: set[tuple[str, str | int]] = set()
    for listener in listeners:
        if listener.type == "unix":
            address: tuple[str, str | int] = ("unix", listener.path)
        elif listener.port == 0:
            continue  # every port-0 listener gets a port of its own
        else:
            address = (listener.host, listener.port)
        if address in seen:
            raise ConfigError(f"two listeners on {listener.describe().split(' ', 1)[1]}")
        seen.add(address)


def _check(config: BrokerConfig) -> BrokerConfig:
    """Refuse values no section may hold (ConfigError names the key and what it may be)."""
    _check_limits(config.limits)
    _check_mqtt(config.mqtt)
    _check_overload(config.overload)
    if config.store.kind not in ("sqlite", "memory", "none"):
        raise ConfigError(f"[store] kind must be sqlite, memory or none, got {config.store.kind!r}")
    if config.store.synchronous not in ("normal", "full"):
        raise ConfigError("[store] synchronous must be normal or full")
    if config.store.connect_wait <= 0:
        raise ConfigError("[store] connect_wait must be above 0 (seconds)")
    if not 0 <= config.http.port <= 65535:
        raise ConfigError(f"[http] port must be 0..65535 (0: off), got {config.http.port}")
    http = config.http
    if http.max_connections < 2 or http.idle_timeout <= 0 or http.header_timeout <= 0:
        raise ConfigError(
            "[http] max_connections must be at least 2, idle_timeout and header_timeout "
            "above 0 (seconds)"
        )
    if config.sys.interval < 0:
        raise ConfigError("[sys] interval must be at least 0 (0: no $SYS updates)")
    flapping = config.flapping
    if flapping.max_connects < 0 or flapping.window <= 0 or flapping.ban_time <= 0:
        raise ConfigError(
            "[flapping] max_connects must be at least 0 (0: off), window and ban_time above 0"
        )
    if config.shared_subscriptions.strategy not in STRATEGY_NAMES:
        raise ConfigError(
            f"[shared_subscriptions] strategy must be one of {', '.join(STRATEGY_NAMES)}, "
            f"got {config.shared_subscriptions.strategy!r}"
        )
    return config


def _check_limits(limits: LimitsConfig) -> None:
    size = limits.max_packet_size
    if not 2 <= size <= _MAX_PACKET_SIZE_LIMIT:
        raise ConfigError(
            f"[limits] max_packet_size must be 2..{_MAX_PACKET_SIZE_LIMIT}, got {size}"
        )
    if not 1 <= limits.max_inflight <= 65535:
        raise ConfigError("[limits] max_inflight must be 1..65535")
    if limits.max_unprocessed_packets < 1 or limits.max_unprocessed_bytes < 1:
        raise ConfigError(
            "[limits] max_unprocessed_packets and max_unprocessed_bytes must be at least 1"
        )
    if limits.max_awaiting_rel < 1:
        raise ConfigError("[limits] max_awaiting_rel must be at least 1 (0 would refuse QoS 2)")
    if not 0 <= limits.max_keepalive <= 65535:
        raise ConfigError("[limits] max_keepalive must be 0..65535 (seconds; 0 = no maximum)")
    if limits.max_session_expiry < 0 or limits.session_expiry < 0:
        raise ConfigError("[limits] session_expiry and max_session_expiry must be >= 0")


def _check_mqtt(mqtt: MqttConfig) -> None:
    if not 0 <= mqtt.maximum_qos <= 2:
        raise ConfigError("[mqtt] maximum_qos must be 0, 1 or 2")
    if not 0 <= mqtt.topic_alias_maximum <= 65535:
        raise ConfigError("[mqtt] topic_alias_maximum must be 0..65535")


def _check_overload(overload: OverloadConfig) -> None:
    if not 0 <= overload.low_water_messages < overload.high_water_messages:
        raise ConfigError(
            "[overload] low_water_messages must be at least 0 and below high_water_messages"
        )
    if not 0 <= overload.low_water_bytes < overload.high_water_bytes:
        raise ConfigError(
            "[overload] low_water_bytes must be at least 0 and below high_water_bytes"
        )
    if overload.max_stall <= 0 or overload.memory_check_interval <= 0:
        raise ConfigError("[overload] max_stall and memory_check_interval must be above 0")
    if overload.memory_high_watermark <= 0:
        raise ConfigError(
            "[overload] memory_high_watermark must be above 0 (a fraction of RAM up to 1.0, "
            "else bytes)"
        )
    if overload.messages_rate < 0 or overload.bytes_rate < 0:
        raise ConfigError("[overload] messages_rate and bytes_rate must be 0 (off) or above")
    if overload.auth_failure_delay < 0 or overload.max_auth_failure_delay < 0:
        raise ConfigError("[overload] auth_failure_delay and max_auth_failure_delay must be >= 0")


def _http_paths(http: HttpConfig, config_dir: Path) -> HttpConfig:
    """File names in [http] are relative to the configuration file's directory."""

    def resolved(name: str) -> str:
        return str(config_dir / name) if name else ""

    return replace(
        http,
        certfile=resolved(http.certfile),
        keyfile=resolved(http.keyfile),
        api_key_file=resolved(http.api_key_file),
        password_file=resolved(http.password_file),
    )


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> BrokerConfig:
    """Read `path` (TOML) if given, then apply command-line `overrides`.

    `overrides` keys: host, port, log_level, data_dir, store, http_port, sys_interval (None
    values are ignored).
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
    listeners = _listeners(raw, config_dir)
    if listeners is not None:
        kwargs["listeners"] = listeners
    kwargs["workers"], kwargs["cpu_affinity"] = _broker_section(raw.get("broker", {}))
    for key, value in raw.items():
        if key in ("listener", "listeners", "broker"):
            continue
        if key in _SECTIONS:
            kwargs[key] = _section(key, _SECTIONS[key], value, config_dir)
        elif key in _TABLE_ARRAYS:
            kwargs[key] = _TABLE_ARRAYS[key](value, config_dir)
        elif key in ("node_name", "log_level"):
            if not isinstance(value, str):
                raise ConfigError(f"{key} must be a string")
            kwargs[key] = value
        else:
            raise ConfigError(
                f"unknown top-level key {key!r}; known: broker, listener, listeners, limits, "
                "overload, auth, store, http, sys, flapping, shared_subscriptions, mqtt, plugins, "
                "bridges, cluster, node_name, log_level"
            )
    cluster = kwargs.get("cluster")
    if cluster is not None and "node_name" not in kwargs:
        # In a cluster the node's name is the node name: events, $SYS and logs carry it.
        kwargs["node_name"] = cluster.node
    config = BrokerConfig(**kwargs)
    return _check(_apply_overrides(config, overrides or {}))


def _plugins(value: Any, _config_dir: Path) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError("plugins must be an array of tables: [[plugins]] module = ...")
    return tuple(value)


def _bridges(value: Any, config_dir: Path) -> tuple[BridgeConfig, ...]:
    try:
        return parse_bridges(value, config_dir)
    except BridgeConfigError as error:
        raise ConfigError(str(error)) from None


def _cluster(value: Any, config_dir: Path) -> ClusterConfig:
    try:
        return parse_cluster(value, config_dir)
    except ClusterConfigError as error:
        raise ConfigError(str(error)) from None


# The tables read by a reader of their own (the arrays of tables besides [[listeners]], and
# [cluster]): key -> its reader.
_TABLE_ARRAYS: dict[str, Callable[[Any, Path], Any]] = {
    "plugins": _plugins,
    "bridges": _bridges,
    "cluster": _cluster,
}


def _broker_section(values: Any) -> tuple[int | None, str]:
    """`[broker] workers`: a number of worker processes, or "auto" (None: the CPU cores; the
    default); `cpu_affinity`: "auto" or "none"."""
    if not isinstance(values, dict) or set(values) - {"workers", "cpu_affinity"}:
        raise ConfigError("[broker] must be a table with the keys workers and cpu_affinity")
    affinity = values.get("cpu_affinity", "auto")
    if affinity not in CPU_AFFINITY_CHOICES:
        raise ConfigError(
            f'[broker] cpu_affinity must be "auto" (each worker on a CPU of its own) or '
            f'"none" (the kernel places them), got {affinity!r}'
        )
    return parse_workers(values.get("workers", "auto"), "[broker] workers"), affinity


def parse_workers(value: Any, where: str) -> int | None:
    """A worker count (1..1024) or "auto" (None); ConfigError naming `where` otherwise."""
    if value == "auto":
        return None
    if type(value) is str and value.isdigit():
        value = int(value)
    if type(value) is not int or not 1 <= value <= 1024:
        raise ConfigError(f'{where} must be "auto" or a number of processes 1..1024, got {value!r}')
    return value


def _apply_overrides(config: BrokerConfig, overrides: dict[str, Any]) -> BrokerConfig:
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if "workers" in overrides:
        config = replace(config, workers=parse_workers(overrides["workers"], "--workers"))
    if "host" in overrides or "port" in overrides:
        config = replace(config, listeners=_override_tcp(config.listeners, overrides))
    if "log_level" in overrides:
        config = replace(config, log_level=overrides["log_level"])
    if "http_port" in overrides:
        config = replace(config, http=replace(config.http, port=overrides["http_port"]))
    if "sys_interval" in overrides:
        config = replace(config, sys=replace(config.sys, interval=overrides["sys_interval"]))
    if "data_dir" in overrides or "store" in overrides:
        store = replace(
            config.store,
            data_dir=str(overrides.get("data_dir", config.store.data_dir)),
            kind=overrides.get("store", config.store.kind),
        )
        config = replace(config, store=store)
    return config


def _override_tcp(
    listeners: tuple[ListenerConfig, ...], overrides: dict[str, Any]
) -> tuple[ListenerConfig, ...]:
    """`--host`/`--port` set the first tcp listener."""
    index = next((i for i, x in enumerate(listeners) if x.type == "tcp"), None)
    if index is None:
        raise ConfigError(
            "--host/--port set the first tcp listener, and [[listeners]] has none: add a "
            'type = "tcp" listener or leave the options out'
        )
    port = overrides.get("port", listeners[index].port)
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {port}")
    tcp = replace(listeners[index], host=overrides.get("host", listeners[index].host), port=port)
    return (*listeners[:index], tcp, *listeners[index + 1 :])
