"""Client helpers for integration tests: connected raw clients and a collecting paho client.

`connect_raw` returns a RawClient whose CONNACK was already checked; `subscribe_raw` sends a
SUBSCRIBE and returns the SUBACK; `PahoCollector` is a paho-mqtt 2.x client on its own network
thread that puts every received message on a queue, so tests wait on packets, not on sleeps.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable
from typing import Any, Literal

import paho.mqtt.client as paho

from mqtt.packets import ConnAck, Publish, SubAck, Subscribe, Subscription
from mqtt.reason_codes import ReasonCode
from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient


def unique(prefix: str) -> str:
    """A client id or topic level no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def connect_raw(
    broker: BrokerProcess,
    client_id: str,
    *,
    clean: bool = True,
    keepalive: int = 60,
    version: int = 4,
    session_present: bool | None = None,
    **kwargs: Any,
) -> RawClient:
    """A raw client whose CONNECT was accepted (CONNACK 0, and `session_present` if given)."""
    client = RawClient(broker.host, broker.port, version=version)
    connack = client.connect(client_id, clean=clean, keepalive=keepalive, **kwargs)
    assert isinstance(connack, ConnAck), connack
    assert connack.reason_code == ReasonCode.SUCCESS, connack
    if session_present is not None:
        assert connack.session_present is session_present, connack
    return client


def subscribe_raw(client: RawClient, packet_id: int, *filters: tuple[str, int]) -> SubAck:
    """SUBSCRIBE to `(filter, qos)` pairs; returns the SUBACK (checked to carry `packet_id`)."""
    client.send(Subscribe(packet_id, [Subscription(f, qos) for f, qos in filters]))
    suback = client.expect()
    assert isinstance(suback, SubAck), suback
    assert suback.packet_id == packet_id, suback
    return suback


def expect_publish(client: RawClient, timeout: float = 5.0) -> Publish:
    """The next packet, which must be a PUBLISH."""
    packet = client.expect(timeout)
    assert isinstance(packet, Publish), packet
    return packet


class PahoCollector:
    """A paho 2.x client (network loop in a thread) collecting messages on `messages`.

    `port` picks another listener of `broker`, with paho's `transport`; `setup` runs on the
    paho client before it connects (`tls_set`, `ws_set_options`, `username_pw_set`).
    """

    def __init__(
        self,
        broker: BrokerProcess,
        client_id: str,
        protocol: int = paho.MQTTv311,
        clean_session: bool | None = True,
        will: tuple[str, bytes, int, bool] | None = None,
        *,
        port: int | None = None,
        transport: Literal["tcp", "websockets", "unix"] = "tcp",
        setup: Callable[[paho.Client], object] | None = None,
    ) -> None:
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.subacks: queue.Queue[list[Any]] = queue.Queue()
        self._connected = threading.Event()
        self.disconnected = threading.Event()
        self.connect_reason: Any = None
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=protocol,
            clean_session=clean_session if protocol != paho.MQTTv5 else None,
            transport=transport,
        )
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _p: self.subacks.put(list(codes))
        self.client.on_disconnect = lambda *_args: self.disconnected.set()
        if will is not None:
            topic, payload, qos, retain = will
            self.client.will_set(topic, payload, qos, retain)
        if setup is not None:
            setup(self.client)
        self.client.connect(broker.host, broker.port if port is None else port, keepalive=30)
        self.client.loop_start()
        assert self._connected.wait(5), "paho client did not get a CONNACK in 5 s"

    def _on_connect(self, _client: Any, _userdata: Any, _flags: Any, reason: Any, _p: Any) -> None:
        self.connect_reason = reason
        self._connected.set()

    def subscribe(self, topic_filter: str, qos: int) -> list[Any]:
        """Subscribe and wait for the SUBACK; returns its reason codes."""
        self.client.subscribe(topic_filter, qos)
        return self.subacks.get(timeout=5)

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        """Publish and wait until the QoS flow completed (PUBACK/PUBCOMP, or sent for QoS 0)."""
        self.client.publish(topic, payload, qos, retain).wait_for_publish(5)

    def next_message(self, timeout: float = 5.0) -> paho.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def assert_no_message(self, within: float = 0.3) -> None:
        try:
            message = self.messages.get(timeout=within)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message on {message.topic!r}: {message.payload!r}")

    def close(self) -> None:
        """DISCONNECT cleanly and stop the network thread."""
        self.client.disconnect()
        self.client.loop_stop()
