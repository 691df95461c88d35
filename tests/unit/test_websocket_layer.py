"""net.websocket_layer in-process: the broker's WebSocketLayer against a wsproto client.

Handshake answers are checked as the HTTP status the client sees; after the upgrade, MQTT bytes
must come out of binary messages however they are split [MQTT-6.0.0-1] [MQTT-6.0.0-2].
"""

from __future__ import annotations

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from net.stream_layers import LayerError
from net.websocket_layer import WebSocketLayer
from tests.support.ws_frames import BINARY, client_frame

CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"
PINGREQ = b"\xc0\x00"


class WsClient:
    """A wsproto client; `events(data)` feeds it the layer's reply."""

    def __init__(self) -> None:
        self.ws = WSConnection(ConnectionType.CLIENT)

    def upgrade(
        self,
        target: str = "/mqtt",
        subprotocols: tuple[str, ...] = ("mqtt",),
        origin: str | None = None,
    ) -> bytes:
        headers = [(b"origin", origin.encode())] if origin is not None else []
        return self.ws.send(
            Request(
                host="localhost",
                target=target,
                subprotocols=list(subprotocols),
                extra_headers=headers,
            )
        )

    def events(self, data: bytes) -> list[Event]:
        self.ws.receive_data(data)
        return list(self.ws.events())


def upgraded(layer: WebSocketLayer) -> WsClient:
    """A client whose upgrade `layer` accepted."""
    client = WsClient()
    data, reply = layer.receive(client.upgrade())
    assert data == b""
    [accept] = client.events(reply)
    assert isinstance(accept, AcceptConnection)
    assert layer.ready
    return client


@pytest.mark.parametrize(
    ("offered", "selected"),
    [
        (("mqtt",), "mqtt"),
        (("mqttv3.1",), "mqttv3.1"),
        (("mqttv3.1", "mqtt"), "mqtt"),  # [MQTT-6.0.0-4]: "mqtt" whenever offered
        (("chat", "mqtt"), "mqtt"),
    ],
)
def test_upgrade_selects_the_mqtt_subprotocol_MQTT_6_0_0_4(
    offered: tuple[str, ...], selected: str
) -> None:
    layer = WebSocketLayer()
    client = WsClient()
    _data, reply = layer.receive(client.upgrade(subprotocols=offered))
    [accept] = client.events(reply)
    assert isinstance(accept, AcceptConnection)
    assert accept.subprotocol == selected
    assert layer.ready
    assert layer.identity is None


def test_upgrade_split_across_reads() -> None:
    layer = WebSocketLayer()
    client = WsClient()
    request = client.upgrade()
    assert layer.receive(request[:20]) == (b"", b"")
    assert not layer.ready
    _data, reply = layer.receive(request[20:])
    assert isinstance(client.events(reply)[0], AcceptConnection)


def test_frames_sent_with_the_upgrade_request_are_read_after_it() -> None:
    """A client that sends its CONNECT without waiting for the 101 has it read."""
    layer = WebSocketLayer()
    client = WsClient()
    data, reply = layer.receive(
        client.upgrade() + client_frame(BINARY, CONNECT) + client_frame(BINARY, PINGREQ[:1])
    )
    assert data == CONNECT + PINGREQ[:1]
    assert isinstance(client.events(reply)[0], AcceptConnection)
    data, reply = layer.receive(client_frame(BINARY, PINGREQ[1:]))
    assert (data, reply) == (PINGREQ[1:], b"")


def test_frames_behind_an_upgrade_request_split_across_reads() -> None:
    layer = WebSocketLayer()
    client = WsClient()
    stream = client.upgrade() + client_frame(BINARY, CONNECT)
    end = stream.index(b"\r\n\r\n")
    assert layer.receive(stream[: end + 2]) == (b"", b"")  # the head's end split too
    data, reply = layer.receive(stream[end + 2 :])
    assert data == CONNECT
    assert isinstance(client.events(reply)[0], AcceptConnection)


def test_query_string_is_ignored_and_custom_path_served() -> None:
    layer = WebSocketLayer(path="/ws")
    client = WsClient()
    _data, reply = layer.receive(client.upgrade(target="/ws?token=abc"))
    assert isinstance(client.events(reply)[0], AcceptConnection)


@pytest.mark.parametrize(
    ("case", "request_kwargs", "status", "why"),
    [
        ("wrong path", {"target": "/other"}, 404, "no MQTT WebSocket at '/other'"),
        ("no subprotocol", {"subprotocols": ()}, 400, "no MQTT subprotocol offered"),
        ("other subprotocol", {"subprotocols": ("chat",)}, 400, "no MQTT subprotocol offered"),
        ("origin not allowed", {"origin": "https://evil.example"}, 403, "not in allowed_origins"),
    ],
)
def test_refused_upgrades_get_an_http_answer_saying_why(
    case: str, request_kwargs: dict, status: int, why: str
) -> None:
    layer = WebSocketLayer(allowed_origins=["https://app.example"])
    client = WsClient()
    with pytest.raises(LayerError) as raised:
        layer.receive(client.upgrade(**request_kwargs))
    assert f"HTTP {status}" in str(raised.value)
    assert why in str(raised.value)
    reject, *body = client.events(raised.value.reply)
    assert isinstance(reject, RejectConnection), case
    assert reject.status_code == status
    assert all(isinstance(part, RejectData) for part in body)
    assert why in b"".join(part.data for part in body).decode()  # type: ignore[attr-defined]
    assert not layer.ready


@pytest.mark.parametrize(
    ("allowed", "origin"),
    [
        ((), "https://anything.example"),  # empty list: every origin
        (("https://app.example",), "https://app.example"),
        (("https://app.example",), "HTTPS://APP.EXAMPLE"),  # scheme and host: case-insensitive
        (("https://app.example",), None),  # no Origin: not a browser
    ],
)
def test_allowed_origins(allowed: tuple[str, ...], origin: str | None) -> None:
    layer = WebSocketLayer(allowed_origins=allowed)
    client = WsClient()
    _data, reply = layer.receive(client.upgrade(origin=origin))
    assert isinstance(client.events(reply)[0], AcceptConnection)


@pytest.mark.parametrize(
    ("garbage", "status"),
    [
        (CONNECT + b"\r\n\r\n", 400),  # plain MQTT on the WebSocket port
        (b"garbage\r\n\r\n", 400),
        (b"GET /mqtt HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # plain HTTP, no upgrade
        (b"POST /mqtt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 400),
        (
            b"GET /mqtt HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
            426,
        ),
    ],
)
def test_not_an_upgrade_request_gets_an_http_error(garbage: bytes, status: int) -> None:
    layer = WebSocketLayer()
    with pytest.raises(LayerError, match="not a WebSocket upgrade request") as raised:
        layer.receive(garbage)
    assert raised.value.reply.startswith(f"HTTP/1.1 {status} ".encode())


def test_several_packets_in_one_message_and_one_packet_across_messages_MQTT_6_0_0_2() -> None:
    layer = WebSocketLayer()
    client = upgraded(layer)
    one_message = client.ws.send(Message(data=CONNECT + PINGREQ))
    split = client.ws.send(Message(data=CONNECT[:3])) + client.ws.send(Message(data=CONNECT[3:]))
    fragmented = client.ws.send(Message(data=PINGREQ[:1], message_finished=False))
    fragmented += client.ws.send(Message(data=PINGREQ[1:], message_finished=True))
    data, reply = layer.receive(one_message + split + fragmented)
    assert data == CONNECT + PINGREQ + CONNECT + PINGREQ
    assert reply == b""


def test_frame_split_across_reads() -> None:
    layer = WebSocketLayer()
    client = upgraded(layer)
    frame = client.ws.send(Message(data=CONNECT))
    received = b""
    for byte in frame:
        data, _reply = layer.receive(bytes([byte]))
        received += data
    assert received == CONNECT


def test_send_is_a_binary_message() -> None:
    layer = WebSocketLayer()
    client = upgraded(layer)
    [message] = client.events(layer.send(b"\x20\x02\x00\x00"))
    assert isinstance(message, BytesMessage)
    assert message.data == b"\x20\x02\x00\x00"


def test_text_message_closes_with_1003_MQTT_6_0_0_1() -> None:
    layer = WebSocketLayer()
    client = upgraded(layer)
    with pytest.raises(LayerError, match=r"binary messages \[MQTT-6.0.0-1\]") as raised:
        layer.receive(client.ws.send(TextMessage(data="hello")))
    [close] = client.events(raised.value.reply)
    assert isinstance(close, CloseConnection)
    assert close.code == 1003
    assert layer.send(PINGREQ) == b""  # closing: no more messages
    assert layer.close() == b""  # the close frame is already out


def test_ping_is_answered_with_pong_and_data_still_flows() -> None:
    layer = WebSocketLayer()
    client = upgraded(layer)
    data, reply = layer.receive(
        client.ws.send(Ping(payload=b"hi")) + client.ws.send(Message(data=PINGREQ))
    )
    assert data == PINGREQ
    assert client.events(reply) == [Pong(payload=b"hi")]


def test_peer_close_is_answered_and_ends_the_stream() -> None:
    layer = WebSocketLayer()
    client = upgraded(layer)
    data, reply = layer.receive(client.ws.send(CloseConnection(code=1000)))
    assert data == b""
    assert layer.peer_closed
    [answer] = client.events(reply)
    assert isinstance(answer, CloseConnection)
    assert client.ws.state is ConnectionState.CLOSED
    assert layer.receive(b"\x82\x00") == (b"", b"")  # nothing counts after the close
    assert layer.close() == b""


def test_unmasked_client_frame_closes_with_protocol_error() -> None:
    layer = WebSocketLayer()
    client = upgraded(layer)
    unmasked = b"\x82\x02" + PINGREQ  # clients must mask every frame (RFC 6455 5.1)
    with pytest.raises(LayerError, match="bad WebSocket frame") as raised:
        layer.receive(unmasked)
    [close] = client.events(raised.value.reply)
    assert isinstance(close, CloseConnection)
    assert close.code == 1002


def test_close_sends_a_normal_close_frame() -> None:
    layer = WebSocketLayer()
    client = upgraded(layer)
    [close] = client.events(layer.close())
    assert isinstance(close, CloseConnection)
    assert close.code == 1000


def test_nothing_is_sent_or_closed_before_the_upgrade() -> None:
    layer = WebSocketLayer()
    assert layer.send(PINGREQ) == b""
    assert layer.close() == b""
