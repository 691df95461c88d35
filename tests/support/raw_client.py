"""A minimal blocking MQTT client on a plain socket and the project's codec, for wire tests.

It sends exactly the bytes or packets a test gives it and hands back decoded packets, so
tests can drive the broker through situations a well-behaved library never produces.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from mqtt import PacketDecoder, encode
from mqtt.packets import Connect, Packet


class RawClient:
    def __init__(self, host: str, port: int, version: int = 4, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.version = version
        self.decoder = PacketDecoder(max_packet_size=268_435_460, protocol_version=version)
        self.received: list[Packet] = []

    def send(self, packet: Any) -> None:
        self.sock.sendall(encode(packet, self.version))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(
        self, client_id: str, clean: bool = True, keepalive: int = 60, **kwargs: Any
    ) -> Any:
        self.send(
            Connect(
                client_id=client_id,
                protocol_version=self.version,
                clean_start=clean,
                keepalive=keepalive,
                **kwargs,
            )
        )
        return self.expect()

    def expect(self, timeout: float = 5.0) -> Any:
        """The next packet from the broker; raises TimeoutError or ConnectionError."""
        deadline = time.monotonic() + timeout
        while not self.received:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no packet from the broker in time")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                raise ConnectionError("broker closed the connection")
            self.received.extend(self.decoder.feed(data))
        return self.received.pop(0)

    def expect_nothing(self, within: float = 0.3) -> None:
        try:
            packet = self.expect(timeout=within)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected packet {packet!r}")

    def is_closed_by_broker(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within `timeout` (packets are discarded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionError:
                return True
            if not data:
                return True
        return False

    def close(self) -> None:
        self.sock.close()
