"""net.stream_layers: LayerStack composition, with a tagging fake and as `wss` (TLS under
WebSocket) against a client-side SSLObject carrying a wsproto client."""

from __future__ import annotations

import ssl

import pytest
import trustme
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    Request,
)

from net.stream_layers import LayerError, LayerStack
from net.tls_layer import TlsLayer
from net.websocket_layer import WebSocketLayer

CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"


class Tagging:
    """A fake layer: `<name>` around what it sends; received input must carry its tag.

    receive: "name:payload" -> payload; "name!reply" -> a reply; "name?" -> LayerError.
    """

    def __init__(self, name: str, identity: str | None = None) -> None:
        self.name = name
        self.ready = True
        self.peer_closed = False
        self.identity = identity

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        tag = self.name.encode()
        assert data.startswith(tag), f"{self.name} got {data!r}"
        rest = data[len(tag) :]
        if rest.startswith(b"?"):
            raise LayerError(f"{self.name} refused", self.send(b"refusal"))
        if rest.startswith(b"!"):
            return b"", self.send(rest[1:])
        return rest[1:], b""

    def send(self, data: bytes) -> bytes:
        return b"<" + self.name.encode() + b">" + data

    def close(self) -> bytes:
        return b"bye-" + self.name.encode()


def test_receive_goes_up_and_replies_go_down_through_the_lower_layers() -> None:
    stack = LayerStack([Tagging("low"), Tagging("high")])
    assert stack.receive(b"low:high:mqtt") == (b"mqtt", b"")
    # The upper layer's reply is encoded by the lower one on its way to the socket.
    assert stack.receive(b"low:high!pong") == (b"", b"<low><high>pong")
    assert stack.send(b"mqtt") == b"<low><high>mqtt"


def test_error_reply_of_an_upper_layer_goes_down_through_the_lower_layers() -> None:
    stack = LayerStack([Tagging("low"), Tagging("high")])
    with pytest.raises(LayerError, match="high refused") as raised:
        stack.receive(b"low:high?")
    assert raised.value.reply == b"<low><high>refusal"


def test_close_passes_the_upper_farewell_down_then_adds_the_lower_one() -> None:
    stack = LayerStack([Tagging("low"), Tagging("high")])
    assert stack.close() == b"<low>bye-high" + b"bye-low"


def test_ready_closed_and_identity_combine_the_layers() -> None:
    low, high = Tagging("low", identity="alice"), Tagging("high")
    stack = LayerStack([low, high])
    assert stack.ready
    assert stack.identity == "alice"
    high.ready = False
    assert not stack.ready
    assert not stack.peer_closed
    low.peer_closed = True
    assert stack.peer_closed


def test_an_empty_stack_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one layer"):
        LayerStack([])


class WssClient:
    """A wsproto client over a TLS client over memory buffers."""

    def __init__(self, ca: trustme.CA, cert: trustme.LeafCert | None) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ca.configure_trust(context)
        if cert is not None:
            cert.configure_cert(context)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        self.ws = WSConnection(ConnectionType.CLIENT)

    def exchange(self, stack: LayerStack, data: bytes) -> bytes:
        """Send `data` (WebSocket bytes) through TLS; take in the stack's reply; the
        plaintext for the stack's MQTT decoder."""
        self.tls.write(data)
        plaintext, reply = stack.receive(self.outgoing.read())
        self.incoming.write(reply)
        return plaintext

    def ws_events(self) -> list:
        try:
            self.ws.receive_data(self.tls.read(65536))
        except ssl.SSLWantReadError:
            return []
        return list(self.ws.events())


def wss_stack(ca: trustme.CA) -> LayerStack:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost").configure_cert(context)
    ca.configure_trust(context)
    context.verify_mode = ssl.CERT_OPTIONAL
    return LayerStack([TlsLayer(context), WebSocketLayer()])


def tls_handshake(client: WssClient, stack: LayerStack) -> None:
    for _ in range(10):
        try:
            client.tls.do_handshake()
            return
        except ssl.SSLWantReadError:
            _data, reply = stack.receive(client.outgoing.read())
            client.incoming.write(reply)
    raise AssertionError("no TLS handshake in 10 round trips")


def test_wss_end_to_end_with_identity_from_the_tls_layer() -> None:
    ca = trustme.CA()
    stack = wss_stack(ca)
    client = WssClient(ca, ca.issue_cert("meter-9.example", common_name="meter-9"))
    tls_handshake(client, stack)
    assert not stack.ready  # TLS is up, the WebSocket upgrade is not done yet
    upgrade = client.ws.send(Request(host="localhost", target="/mqtt", subprotocols=["mqtt"]))
    assert client.exchange(stack, upgrade) == b""
    assert isinstance(client.ws_events()[0], AcceptConnection)
    assert stack.ready
    assert stack.identity == "meter-9"
    ping_and_connect = client.ws.send(Ping(payload=b"p")) + client.ws.send(Message(data=CONNECT))
    assert client.exchange(stack, ping_and_connect) == CONNECT
    assert client.ws_events() == [Pong(payload=b"p")]
    client.incoming.write(stack.send(b"\x20\x02\x00\x00"))
    [message] = client.ws_events()
    assert isinstance(message, BytesMessage)
    assert message.data == b"\x20\x02\x00\x00"
    # Closing: the WebSocket close frame, encrypted, then TLS close_notify.
    client.incoming.write(stack.close())
    [close] = client.ws_events()
    assert isinstance(close, CloseConnection)
    assert client.tls.read(100) == b""  # close_notify


def test_wss_refusal_is_encrypted() -> None:
    ca = trustme.CA()
    stack = wss_stack(ca)
    client = WssClient(ca, None)
    tls_handshake(client, stack)
    client.tls.write(client.ws.send(Request(host="localhost", target="/nope", subprotocols=[])))
    with pytest.raises(LayerError, match="HTTP 404") as raised:
        stack.receive(client.outgoing.read())
    assert b"HTTP/1.1" not in raised.value.reply  # not in clear on the socket
    client.incoming.write(raised.value.reply)
    [reject, *_body] = client.ws_events()
    assert isinstance(reject, RejectConnection)
    assert reject.status_code == 404
    assert stack.identity is None
