"""The `[[bridges]]` tables of the configuration, checked (pure: no I/O).

Each key is named after its Mosquitto `bridge` counterpart where one exists (the line-by-line
mapping is in docs/configuration.md). `parse_bridges` raises `BridgeConfigError` naming the
table and key; `actors.config` turns it into its `ConfigError`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from mqtt.topics import TopicError, validate_topic_filter, validate_topic_name

DIRECTIONS = ("in", "out", "both")
PROTOCOL_VERSIONS = {"3.1.1": 4, "5.0": 5}
NEVER_EXPIRES = 4_294_967_295  # MQTT 5.0 Session Expiry Interval 0xFFFFFFFF
MAX_PACKET_SIZE = 268_435_460  # the largest MQTT packet: 5 + the largest remaining length
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TLS_FILES = ("cafile", "capath", "certfile", "keyfile")
# Mosquitto's `bridge_tls_version` values this broker offers; each pins that one version.
TLS_VERSIONS = ("tlsv1.2", "tlsv1.3")
START_TYPES = ("automatic", "lazy", "once")
# The default in-flight window toward the remote broker. Wide when no outgoing line carries
# QoS 2: every hop of a message costs this broker a turn of its event loop, and a window of
# 20 (Mosquitto's) spends those turns on a few messages each; against 256, 1,024 carried QoS 1
# through the bridge 3-11 % faster for about a tenth less CPU per message, and 4,096 was no
# faster again (docs/bridges.md, "Throughput"). Narrow with a QoS 2 line: a
# Mosquitto remote holds each QoS 2 message it has not been released against a quota of its
# `max_inflight_messages` (20) and drops one past it, acknowledging it all the same (to a
# 3.1.1 client a refusing PUBREC reads as a success); QoS 1 it acknowledges at once.
WIDE_WINDOW = 1024
QOS2_WINDOW = 20
# Where a bridge's state is published when `notification_topic` is not set: here under the
# bridge's name, at the remote under its client id there (unique among a central broker's
# edges, where many may name their bridge alike). Mosquitto's topic and values.
STATE_TOPIC = "$SYS/broker/connection/{id}/state"


class BridgeConfigError(ValueError):
    """A `[[bridges]]` table is wrong; the message names the bridge and the key."""


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One `[[bridges.topics]]` table: Mosquitto's `topic pattern direction qos local-prefix
    remote-prefix`."""

    pattern: str = ""
    direction: str = "out"
    qos: int = 0
    local_prefix: str = ""
    remote_prefix: str = ""


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    """One `[[bridges]]` table (docs/bridges.md)."""

    name: str = ""
    addresses: tuple[str, ...] = ()  # "host:port", tried in turn
    # false: the first address is the main one: while connected to another, the bridge
    # checks every PRIMARY_RETRY seconds whether it answers and then moves back to it; true:
    # all are equals, a lost connection tries the next one (Mosquitto's `round_robin`)
    round_robin: bool = False
    bind_address: str = ""  # the local IP address the connections leave from; "": any
    # "automatic": connected while the broker runs; "once": not started again once its
    # connection ended; "lazy": connected once `threshold` messages wait for the remote, and
    # disconnected after `idle_timeout` seconds in which no message crossed either way
    start_type: str = "automatic"
    threshold: int = 10
    idle_timeout: float = 60.0
    # Unsubscribe at the remote from the outgoing-only lines' filters once connected (a
    # remote session may hold them from when they came in): Mosquitto's
    # `bridge_attempt_unsubscribe`
    attempt_unsubscribe: bool = True
    protocol_version: str = "3.1.1"  # or "5.0"
    client_id: str = ""  # at the remote; "": "<node_name>.<name>" ("<cluster>.<name>")
    username: str = ""  # at the remote broker; "": none
    password: str = ""
    keepalive: int = 60  # seconds
    clean_start: bool = False  # false: the remote keeps the bridge's session
    session_expiry: int = NEVER_EXPIRES  # 5.0: seconds the remote keeps it (clean_start false)
    try_private: bool = True  # 3.1.1: set the bridge bit (0x80) in CONNECT's protocol level
    tls: bool = False  # on by itself with cafile; without one the system's CAs are trusted
    cafile: str = ""
    capath: str = ""  # a directory of CA certificates (hashed names, `openssl rehash`)
    certfile: str = ""  # the client certificate (PEM); keyfile if the key is apart
    keyfile: str = ""
    tls_insecure: bool = False  # skip the server name check (never in production)
    tls_version: str = ""  # one of TLS_VERSIONS, that version only; "": TLS 1.2 or later
    alpn: str = ""  # the protocol offered in the TLS handshake's ALPN extension; "": none
    reconnect_delay: float = 1.0  # seconds before the first retry round ...
    max_reconnect_delay: float = 60.0  # ... doubling up to this
    connect_timeout: float = 10.0  # seconds for TCP, TLS and CONNACK together
    # QoS 1/2 messages sent to the remote and not yet acknowledged (capped by a 5.0 remote's
    # Receive Maximum); not set: WIDE_WINDOW, QOS2_WINDOW with an outgoing QoS 2 line
    max_inflight: int = QOS2_WINDOW
    # The store-and-forward queue: outgoing messages waiting for the remote, past which the
    # oldest are dropped (0: unbounded)
    queue_max_messages: int = 100_000
    queue_max_bytes: int = 104_857_600
    local_username: str = ""  # the user the local ACL sees the bridge as; "": none
    # false: the retain flag is cleared on every message sent to the remote (for a broker
    # that does not take retained messages; a 5.0 remote that says so is heard as well)
    outgoing_retain: bool = True
    # The largest packet sent to the remote (0: no bound of the bridge's own; a 5.0 remote's
    # Maximum Packet Size bounds it too): a message past it is dropped, counted and logged
    max_packet_size: int = 0
    # Mosquitto's notifications: the bridge's state (retained "1" connected, "0" not) here
    # and, unless local only, at the remote (a will "0", and "1" once connected)
    notifications: bool = True
    notifications_local_only: bool = False
    notification_topic: str = ""  # "": STATE_TOPIC, as described there
    topics: tuple[TopicConfig, ...] = ()

    @property
    def version(self) -> int:
        """The protocol level toward the remote broker (4 or 5)."""
        return PROTOCOL_VERSIONS[self.protocol_version]

    @property
    def uses_tls(self) -> bool:
        return self.tls or bool(self.cafile) or bool(self.capath)

    def state_topic(self, client_id: str) -> str:
        """The topic of the bridge's state: here `client_id` is "" (the bridge's name stands
        in the default topic), at the remote the bridge's client id there."""
        return self.notification_topic or STATE_TOPIC.format(id=client_id or self.name)


def parse_bridges(tables: Any, config_dir: Path) -> tuple[BridgeConfig, ...]:
    """The bridges of `[[bridges]]` (`tables` as TOML read it); file names are resolved
    against `config_dir`. Raises BridgeConfigError."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise BridgeConfigError(
            'bridges must be an array of tables: [[bridges]] name = "..." addresses = [...]'
        )
    bridges = tuple(_bridge(number, table, config_dir) for number, table in enumerate(tables, 1))
    names = [bridge.name for bridge in bridges]
    for name in names:
        if names.count(name) > 1:
            raise BridgeConfigError(f"two [[bridges]] are named {name!r}: names must differ")
    return bridges


def _bridge(number: int, table: dict[str, Any], config_dir: Path) -> BridgeConfig:
    where = f"[[bridges]] #{number}"
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BridgeConfigError(
            f"{where}: name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}"
        )
    where = f"[[bridges]] {name!r}"
    defaults = BridgeConfig()
    known = {f.name for f in fields(BridgeConfig)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise BridgeConfigError(
                f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(known))}"
            )
        if key == "topics":
            values[key] = _topics(where, value)
        elif key == "addresses":
            values[key] = _addresses(where, value)
        else:
            values[key] = _typed(where, key, value, getattr(defaults, key))
    for key in _TLS_FILES:
        if values.get(key):
            values[key] = str(config_dir / values[key])
    if "max_inflight" not in values:
        values["max_inflight"] = default_window(values.get("topics", ()))
    bridge = BridgeConfig(**values)
    _check(where, bridge)
    return bridge


def default_window(topics: tuple[TopicConfig, ...]) -> int:
    """The in-flight window of a bridge whose table does not set `max_inflight`."""
    qos2_out = any(t.qos == 2 and t.direction in ("out", "both") for t in topics)
    return QOS2_WINDOW if qos2_out else WIDE_WINDOW


def _typed(where: str, key: str, value: Any, default: Any) -> Any:
    expected = float if isinstance(default, float) else type(default)
    ok = isinstance(value, int | float) if expected is float else type(value) is expected
    if not ok:
        raise BridgeConfigError(
            f"{where}: {key} must be {expected.__name__}, got {type(value).__name__} {value!r}"
        )
    return float(value) if expected is float else value


def _addresses(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise BridgeConfigError(
            f'{where}: addresses must be a non-empty array of "host:port" strings'
        )
    for address in value:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BridgeConfigError(
                f"{where}: address {address!r} must be host:port, with a port of 1-65535"
            )
    return tuple(value)


def _topics(where: str, value: Any) -> tuple[TopicConfig, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(t, dict) for t in value):
        raise BridgeConfigError(
            f'{where}: needs [[bridges.topics]] tables (pattern = "...", direction = "out")'
        )
    topics = []
    defaults = TopicConfig()
    known = {f.name for f in fields(TopicConfig)}
    for number, table in enumerate(value, 1):
        here = f"{where} topic #{number}"
        for key in table:
            if key not in known:
                raise BridgeConfigError(
                    f"{here}: unknown key {key!r}; known keys: {', '.join(sorted(known))}"
                )
        topic = TopicConfig(
            **{key: _typed(here, key, v, getattr(defaults, key)) for key, v in table.items()}
        )
        _check_topic(here, topic)
        topics.append(topic)
    return tuple(topics)


def _check_topic(where: str, topic: TopicConfig) -> None:
    if topic.direction not in DIRECTIONS:
        raise BridgeConfigError(
            f"{where}: direction must be one of {', '.join(DIRECTIONS)}, got {topic.direction!r}"
        )
    if topic.qos not in (0, 1, 2):
        raise BridgeConfigError(f"{where}: qos must be 0, 1 or 2, got {topic.qos}")
    for key in ("local_prefix", "remote_prefix"):
        prefix = getattr(topic, key)
        if "+" in prefix or "#" in prefix:
            raise BridgeConfigError(f"{where}: {key} {prefix!r} must not hold a wildcard")
    if not topic.pattern and not (topic.local_prefix and topic.remote_prefix):
        raise BridgeConfigError(
            f"{where}: an empty pattern needs both local_prefix and remote_prefix (each then "
            "is a whole topic, as in Mosquitto)"
        )
    for prefix in (topic.local_prefix, topic.remote_prefix):
        try:
            validate_topic_filter(prefix + topic.pattern)
        except TopicError as error:
            raise BridgeConfigError(
                f"{where}: {prefix + topic.pattern!r} is not a valid topic filter: {error}"
            ) from None


def _check(where: str, bridge: BridgeConfig) -> None:
    if not bridge.addresses:
        raise BridgeConfigError(f'{where}: addresses is required (["host:port", ...])')
    if not bridge.topics:
        raise BridgeConfigError(f"{where}: needs at least one [[bridges.topics]] table")
    if bridge.protocol_version not in PROTOCOL_VERSIONS:
        raise BridgeConfigError(
            f"{where}: protocol_version must be one of {', '.join(PROTOCOL_VERSIONS)}, got "
            f"{bridge.protocol_version!r}"
        )
    if not 0 <= bridge.keepalive <= 65535:
        raise BridgeConfigError(f"{where}: keepalive must be 0-65535 seconds")
    if not 0 <= bridge.session_expiry <= NEVER_EXPIRES:
        raise BridgeConfigError(f"{where}: session_expiry must be 0-{NEVER_EXPIRES} seconds")
    if not 1 <= bridge.max_inflight <= 65535:
        raise BridgeConfigError(f"{where}: max_inflight must be 1-65535")
    if bridge.queue_max_messages < 0 or bridge.queue_max_bytes < 0:
        raise BridgeConfigError(f"{where}: queue_max_messages and queue_max_bytes must be >= 0")
    if not 0 < bridge.reconnect_delay <= bridge.max_reconnect_delay:
        raise BridgeConfigError(
            f"{where}: reconnect_delay must be above 0 and at most max_reconnect_delay"
        )
    _check_connection(where, bridge)
    _check_credentials(where, bridge)


def _check_connection(where: str, bridge: BridgeConfig) -> None:
    if not 0 <= bridge.max_packet_size <= MAX_PACKET_SIZE:
        raise BridgeConfigError(
            f"{where}: max_packet_size must be 0 (no bound) to {MAX_PACKET_SIZE} bytes"
        )
    if bridge.bind_address:
        try:
            ipaddress.ip_address(bridge.bind_address)
        except ValueError:
            raise BridgeConfigError(
                f"{where}: bind_address must be an IP address of this machine, got "
                f"{bridge.bind_address!r}"
            ) from None
    if bridge.start_type not in START_TYPES:
        raise BridgeConfigError(
            f"{where}: start_type must be one of {', '.join(START_TYPES)}, got "
            f"{bridge.start_type!r}"
        )
    if bridge.threshold < 1 or bridge.idle_timeout <= 0:
        raise BridgeConfigError(f"{where}: threshold must be 1 or more, idle_timeout above 0")
    if bridge.connect_timeout <= 0:
        raise BridgeConfigError(f"{where}: connect_timeout must be above 0 seconds")
    if bridge.notification_topic:
        try:
            validate_topic_name(bridge.notification_topic)
        except TopicError as error:
            raise BridgeConfigError(
                f"{where}: notification_topic {bridge.notification_topic!r} is not a valid "
                f"topic name: {error}"
            ) from None


def _check_credentials(where: str, bridge: BridgeConfig) -> None:
    tls_only = ("certfile", "keyfile", "tls_version", "alpn")
    if any(getattr(bridge, key) for key in tls_only) and not bridge.uses_tls:
        raise BridgeConfigError(
            f"{where}: {', '.join(tls_only)} need tls = true, a cafile or a capath"
        )
    if bridge.tls_version and bridge.tls_version not in TLS_VERSIONS:
        raise BridgeConfigError(
            f"{where}: tls_version must be one of {', '.join(TLS_VERSIONS)}, got "
            f"{bridge.tls_version!r} (TLS 1.1 and older are deprecated, RFC 8996)"
        )
    if bridge.keyfile and not bridge.certfile:
        raise BridgeConfigError(f"{where}: keyfile needs certfile")
    if bridge.password and not bridge.username:
        raise BridgeConfigError(f"{where}: password needs username")
