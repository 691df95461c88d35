"""Stream layers: what sits between a listener's socket and the MQTT decoder (TLS, WebSocket).

A layer is sans-I/O: it is given the bytes read from the socket and says which bytes the MQTT
decoder gets and which must be written back at once (handshake answers, pongs); it turns the
broker's MQTT bytes into bytes for the socket. It never touches a socket, so the reader and
the transport stay the only I/O, and each layer is tested in-process against a client-side
peer (tests/unit/test_tls_layer.py, test_websocket_layer.py).

`LayerStack` composes layers, socket side first: `wss` is TLS under WebSocket. A reply or an
error answer of an upper layer (a WebSocket pong, an HTTP 404) goes down through the layers
below it (it is encrypted by the TLS layer) before it reaches the socket.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class LayerError(Exception):
    """The peer's bytes are not acceptable for this layer; `reply` is written before closing.

    The message says what was wrong (it is logged with the peer's address).
    """

    def __init__(self, message: str, reply: bytes = b"") -> None:
        super().__init__(message)
        self.reply = reply  # e.g. an HTTP 400/403 response, a WebSocket close frame; may be b""


class StreamLayer(Protocol):
    """One layer of a connection's byte stream; see the module docstring.

    The three state attributes are read-only for users of a layer (a plain attribute or a
    property satisfies them).
    """

    @property
    def ready(self) -> bool:
        """Handshake complete: MQTT bytes may flow."""
        ...

    @property
    def peer_closed(self) -> bool:
        """The peer ended this layer's stream (WebSocket close, TLS close_notify)."""
        ...

    @property
    def identity(self) -> str | None:
        """TLS: the client certificate's CN (None without a certificate)."""
        ...

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        """Bytes read from the socket -> (bytes for the MQTT decoder, bytes to write back to
        the socket now). Raises LayerError."""
        ...

    def send(self, data: bytes) -> bytes:
        """MQTT bytes -> bytes to write to the socket (must only be called once `ready`)."""
        ...

    def close(self) -> bytes:
        """Bytes to write before closing the socket (TLS close_notify, WebSocket close frame)."""
        ...


class LayerStack:
    """Layers composed into one `StreamLayer`, the socket side first (`wss`: TLS, WebSocket)."""

    __slots__ = ("_layers",)

    def __init__(self, layers: Sequence[StreamLayer]) -> None:
        if not layers:
            raise ValueError("a LayerStack needs at least one layer")
        self._layers = tuple(layers)

    @property
    def ready(self) -> bool:
        return all(layer.ready for layer in self._layers)

    @property
    def peer_closed(self) -> bool:
        return any(layer.peer_closed for layer in self._layers)

    @property
    def identity(self) -> str | None:
        for layer in self._layers:
            if layer.identity is not None:
                return layer.identity
        return None

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        replies: list[bytes] = []
        for index, layer in enumerate(self._layers):
            if not data:
                break  # nothing reached this layer yet (a TLS handshake in progress)
            try:
                data, reply = layer.receive(data)
            except LayerError as error:
                replies.append(self._down(index, error.reply))
                raise LayerError(str(error), b"".join(replies)) from error
            if reply:
                replies.append(self._down(index, reply))
        return data, b"".join(replies)

    def send(self, data: bytes) -> bytes:
        for layer in reversed(self._layers):
            data = layer.send(data)
        return data

    def close(self) -> bytes:
        """The upper layers' closing bytes, passed down, then the lower layers' own."""
        data = b""
        for index in range(len(self._layers) - 1, -1, -1):
            layer = self._layers[index]
            if data:
                data = layer.send(data)
            data += layer.close()
        return data

    def _down(self, index: int, data: bytes) -> bytes:
        """`data` written by layer `index`, as bytes for the socket (through the layers below)."""
        for layer in reversed(self._layers[:index]):
            if not data:
                break
            data = layer.send(data)
        return data
