"""The reusable Locust MQTT user: every measured operation becomes a Locust request event.

`MqttUser` owns one `loadtest.gevent_client.MqttClient` and reports through
`environment.events.request.fire(...)`:

| request_type | measured time | failure when |
| --- | --- | --- |
| CONNECT | TCP connect + CONNECT until CONNACK | refused CONNACK, timeout, closed |
| PUBLISH | QoS 0: the write; QoS 1: until PUBACK; QoS 2: until PUBCOMP | timeout, closed |
| SUBSCRIBE / UNSUBSCRIBE | until SUBACK / UNSUBACK | refused filter, timeout, closed |
| PING | PINGREQ until PINGRESP | timeout, closed |
| DELIVER | end to end: publish until a subscriber receives it (send time in the payload) | - |
| CONNECTION | - | the broker or the network closed a connection in use |

Payloads start with a 10-byte header, `b"LT"` and the sender's `time.time_ns()` (big endian),
so a receiver in any process on the same machine can compute end-to-end latency.
After a failed or lost connection the user waits like Paho's automatic reconnect: 1 s,
doubling up to 120 s, back to 1 s after a successful CONNECT.
"""

from __future__ import annotations

import argparse
import itertools
import os
import struct
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from locust import User
from locust.env import Environment

from loadtest.gevent_client import ConnectionLostError, MqttClient, MqttClientError
from mqtt import Publish

PAYLOAD_MAGIC = b"LT"
_HEADER = struct.Struct(">2sQ")
PAYLOAD_HEADER_SIZE = _HEADER.size
DEFAULT_PORT = 1883

_user_numbers: defaultdict[str, itertools.count[int]] = defaultdict(itertools.count)


def parse_mqtt_url(url: str) -> tuple[str, int]:
    """`mqtt://HOST:PORT` (also `tcp://` or bare `HOST[:PORT]`) as `(host, port)`."""
    parts = urlsplit(url if "://" in url else f"mqtt://{url}")
    if parts.scheme not in ("mqtt", "tcp"):
        raise ValueError(f"--host {url!r}: use mqtt://HOST:PORT (TLS and websockets not supported)")
    if not parts.hostname:
        raise ValueError(f"--host {url!r} names no host: use mqtt://HOST:PORT")
    return parts.hostname, parts.port or DEFAULT_PORT


def parse_qos_levels(text: str) -> tuple[int, ...]:
    """`"0,1"` as `(0, 1)`: the QoS levels publishers cycle through."""
    levels = tuple(int(part) for part in text.split(",") if part.strip())
    if not levels or any(level not in (0, 1, 2) for level in levels):
        raise ValueError(f"QoS list {text!r}: give levels 0, 1 or 2 separated by commas")
    return levels


def timestamped_payload(size: int) -> bytes:
    """A payload of `size` bytes (at least the header) carrying the current wall-clock time."""
    header = _HEADER.pack(PAYLOAD_MAGIC, time.time_ns())
    return header + b"x" * max(0, size - PAYLOAD_HEADER_SIZE)


def payload_sent_ns(payload: bytes) -> int | None:
    """The send time written by `timestamped_payload`, or None for a foreign payload."""
    if len(payload) < PAYLOAD_HEADER_SIZE or payload[:2] != PAYLOAD_MAGIC:
        return None
    sequence: int = _HEADER.unpack_from(payload)[1]
    return sequence


@dataclass(frozen=True)
class MqttSettings:
    """What every MQTT user needs to know; built from Locust's parsed options."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    username: str | None = None
    password: str | None = None
    qos_levels: tuple[int, ...] = (0, 1)
    payload_size: int = 64
    topic_prefix: str = "loadtest"
    keepalive: int = 60
    timeout: float = 10.0
    interval: float | None = None  # seconds between a user's actions; None: scenario default
    retained_topics: int = 100

    @property
    def subscribe_qos(self) -> int:
        """Subscribers ask for the highest QoS publishers use, so no delivery is downgraded."""
        return max(self.qos_levels)

    @classmethod
    def from_options(cls, options: argparse.Namespace | None, url: str | None) -> MqttSettings:
        """Settings from the `--mqtt-*` options (added by the locustfile) and the host URL."""
        host, port = parse_mqtt_url(url or f"{cls.host}:{cls.port}")
        values = {
            name: getattr(options, f"mqtt_{name}")
            for name in (
                "username",
                "password",
                "qos_levels",
                "payload_size",
                "topic_prefix",
                "keepalive",
                "timeout",
                "interval",
                "retained_topics",
            )
            if options is not None and getattr(options, f"mqtt_{name}", None) is not None
        }
        return cls(host=host, port=port, **values)


class ReconnectBackoff:
    """Paho-style reconnect delay: `min_delay`, doubled per failure up to `max_delay`."""

    def __init__(self, min_delay: float = 1.0, max_delay: float = 120.0) -> None:
        self.min_delay = min_delay
        self.max_delay = max_delay
        self._next = min_delay

    def failed(self) -> float:
        """The delay before the next attempt; doubles the one after it."""
        delay = self._next
        self._next = min(self._next * 2, self.max_delay)
        return delay

    def reset(self) -> None:
        self._next = self.min_delay


class MqttUser(User):
    """A Locust user with one MQTT connection; subclasses add tasks and pick `scenario`.

    Helpers return True on success; failures are reported to Locust, never raised, so one
    refused connection does not stop the user (it retries after the backoff delay).
    """

    abstract = True
    host = "mqtt://127.0.0.1:1883"
    scenario = "mqtt"
    default_interval = 1.0

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.settings = MqttSettings.from_options(environment.parsed_options, self.host)
        self.number = next(_user_numbers[type(self).__name__])
        self.client = MqttClient(
            self.settings.host,
            self.settings.port,
            f"lt-{self.scenario}-{os.getpid()}-{self.number}",
            username=self.settings.username,
            password=self.settings.password,
            keepalive=self.settings.keepalive,
            timeout=self.settings.timeout,
            on_message=self.on_message,
            on_connection_lost=self.on_connection_lost,
        )
        self.backoff = ReconnectBackoff()
        self._retry_delay: float | None = None
        self._published = 0

    # ------------------------------------------------------------------ Locust hooks
    def wait_time(self) -> float:
        """The reconnect backoff after a failure, otherwise `pace()`."""
        if self._retry_delay is not None:
            delay, self._retry_delay = self._retry_delay, None
            return delay
        return self.pace()

    def pace(self) -> float:
        """Seconds between two tasks: `--mqtt-interval`, else the scenario's default."""
        return self.settings.interval or self.default_interval

    def on_stop(self) -> None:
        self.client.disconnect()

    def on_message(self, packet: Publish) -> None:
        """Report end-to-end delivery of a timestamped payload."""
        sent_ns = payload_sent_ns(packet.payload)
        if sent_ns is None:
            return
        self.fire(
            "DELIVER",
            f"{self.scenario} qos{packet.qos}",
            max(0.0, (time.time_ns() - sent_ns) / 1e6),
            len(packet.payload),
        )

    def on_connection_lost(self, reason: str) -> None:
        self.fire("CONNECTION", f"{self.scenario} lost", 0.0, 0, ConnectionLostError(reason))
        self._retry_delay = self.backoff.failed()

    # ------------------------------------------------------------------ measured operations
    def fire(
        self,
        request_type: str,
        name: str,
        response_time_ms: float,
        length: int,
        exception: Exception | None = None,
    ) -> None:
        """Report one operation to Locust's statistics."""
        self.environment.events.request.fire(
            request_type=request_type,
            name=name,
            response_time=response_time_ms,
            response_length=length,
            exception=exception,
            context={"client_id": self.client.client_id},
        )

    def measure(self, request_type: str, name: str, length: int, op: Callable[[], object]) -> bool:
        """Run `op`, report its duration (or its failure) and return whether it succeeded."""
        start = time.perf_counter()
        try:
            op()
        except MqttClientError as error:
            self.fire(request_type, name, (time.perf_counter() - start) * 1000, 0, error)
            return False
        self.fire(request_type, name, (time.perf_counter() - start) * 1000, length)
        return True

    def on_connected(self) -> bool:
        """Called after every successful CONNECT (sessions are clean): subscribe here."""
        return True

    def connect(self) -> bool:
        """CONNECT, then `on_connected`; on failure close and schedule the backoff delay."""
        if self.measure("CONNECT", self.scenario, 0, self.client.connect) and self.on_connected():
            self.backoff.reset()
            return True
        self.client.close()
        self._retry_delay = self.backoff.failed()
        return False

    def ensure_connected(self) -> bool:
        """Connect if not connected (the first task, or after a lost connection)."""
        return self.client.connected or self.connect()

    def next_qos(self) -> int:
        """The next QoS of this user's cycle through `--mqtt-qos`."""
        levels = self.settings.qos_levels
        return levels[self._published % len(levels)]

    def publish(self, topic: str, qos: int, *, retain: bool = False, name: str = "") -> bool:
        """Publish a timestamped payload; reported as `PUBLISH <scenario> qos<N>`."""
        payload = timestamped_payload(self.settings.payload_size)
        self._published += 1
        return self.measure(
            "PUBLISH",
            name or f"{self.scenario} qos{qos}",
            len(payload),
            lambda: self.client.publish(topic, payload, qos, retain),
        )

    def subscribe(self, filters: Sequence[tuple[str, int]], name: str) -> bool:
        return self.measure("SUBSCRIBE", name, 0, lambda: self.client.subscribe(filters))

    def unsubscribe(self, filters: Sequence[str], name: str) -> bool:
        return self.measure("UNSUBSCRIBE", name, 0, lambda: self.client.unsubscribe(filters))

    def ping(self) -> bool:
        return self.measure("PING", self.scenario, 0, self.client.ping)

    def topic(self, *levels: str) -> str:
        """A topic under `--mqtt-topic-prefix`."""
        return "/".join((self.settings.topic_prefix, *levels))
