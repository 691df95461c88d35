"""WebSocket listeners against real clients: paho-mqtt over ws and wss, raw sockets for the
HTTP refusals.

One broker with a tcp, a ws (path /mqtt), a second ws (path /custom, one allowed origin), a
third ws (at most one connection) and a wss listener. Messages cross listeners; a refused
upgrade gets its HTTP answer and a close, and clients on the other listeners do not notice
[MQTT-6.0.0-1..4].
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import paho.mqtt.client as paho
import pytest

from mqtt import encode
from mqtt.packets import Connect
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, unique
from tests.support.listeners import Certificates, listener_port
from tests.support.ws_frames import BINARY, client_frame

CONFIG = """\
[store]
kind = "memory"
[[listeners]]
type = "tcp"
port = 0
[[listeners]]
type = "ws"
port = 0
[[listeners]]
type = "ws"
port = 0
path = "/custom"
allowed_origins = ["https://app.example"]
[[listeners]]
type = "ws"
port = 0
max_connections = 1
[[listeners]]
type = "wss"
port = 0
certfile = "server.pem"
"""


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def ws_broker(certificates: Certificates, workers: int) -> Iterator[BrokerProcess]:
    with running_broker(certificates.directory, CONFIG) as broker:
        yield broker


def websocket_client(
    broker: BrokerProcess,
    port: int,
    path: str = "/mqtt",
    cafile: str | None = None,
    origin: str | None = None,
    **kw: object,
) -> PahoCollector:
    """A paho client over ws (wss with `cafile`); paho sends Origin: https://HOST:PORT unless
    `origin` replaces it."""

    def setup(client: paho.Client) -> None:
        client.ws_set_options(path=path, headers={"Origin": origin} if origin else None)
        if cafile is not None:
            client.tls_set(ca_certs=cafile)

    return PahoCollector(broker, unique("ws"), port=port, transport="websockets", setup=setup, **kw)


def http_exchange(port: int, request: bytes) -> bytes:
    """Send `request` on a new connection; everything the broker answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def upgrade_request(path: str = "/mqtt", origin: str | None = None) -> bytes:
    lines = [
        f"GET {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: mqtt",
    ]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("protocol", [paho.MQTTv311, paho.MQTTv5, paho.MQTTv31])
def test_paho_over_websocket_to_and_from_tcp(ws_broker: BrokerProcess, protocol: int) -> None:
    topic = unique("ws")
    ws = websocket_client(ws_broker, listener_port(ws_broker, "ws"), protocol=protocol)
    tcp = PahoCollector(ws_broker, unique("tcp"))
    ws.subscribe(topic, 1)
    tcp.subscribe(topic, 1)
    tcp.publish(topic, b"from tcp", qos=1)
    ws.publish(topic, b"from ws" * 1000, qos=1)  # several WebSocket frames' worth
    # Both messages reach both clients. Their order is not fixed: MQTT orders messages per
    # publisher only (section 4.6), and in a pool the TCP client's message may be forwarded
    # from another worker while the WebSocket client's own is delivered where it lands.
    expected = sorted([b"from tcp", b"from ws" * 1000])
    assert sorted(ws.next_message().payload for _ in range(2)) == expected
    assert sorted(tcp.next_message().payload for _ in range(2)) == expected
    for client in (ws, tcp):
        client.assert_no_message(within=0.2)  # once each: no connection broke, nothing resent
    ws.close()
    tcp.close()


def test_paho_over_secure_websocket(ws_broker: BrokerProcess, certificates: Certificates) -> None:
    topic = unique("wss")
    wss = websocket_client(
        ws_broker, listener_port(ws_broker, "wss"), cafile=str(certificates.ca_file)
    )
    tcp = PahoCollector(ws_broker, unique("tcp"))
    wss.subscribe(topic, 2)
    tcp.publish(topic, b"to wss", qos=2)
    message = wss.next_message()
    assert (message.payload, message.qos) == (b"to wss", 2)
    wss.publish(topic, b"from wss", qos=1)
    assert wss.next_message().payload == b"from wss"
    wss.close()
    tcp.close()


def test_custom_path_and_allowed_origin(ws_broker: BrokerProcess) -> None:
    port = listener_port(ws_broker, "ws", 1)
    custom = websocket_client(ws_broker, port, path="/custom", origin="https://app.example")
    other = websocket_client(ws_broker, listener_port(ws_broker, "ws", 0))
    topic = unique("custom")
    custom.subscribe(topic, 0)
    other.publish(topic, b"hello", qos=0)
    assert custom.next_message().payload == b"hello"
    other.close()
    custom.close()


def test_max_connections_of_one_listener(ws_broker: BrokerProcess) -> None:
    port = listener_port(ws_broker, "ws", 2)
    first = websocket_client(ws_broker, port)
    # This listener takes one connection: the next one is closed before its handshake...
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(upgrade_request())
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            answer = b""
    assert answer == b""
    wait_for_log(ws_broker, f"max_connections (1) of listener ws 127.0.0.1:{port} reached")
    # ...while the other listeners go on accepting.
    other = websocket_client(ws_broker, listener_port(ws_broker, "ws", 0))
    topic = unique("limited")
    first.subscribe(topic, 0)
    other.publish(topic, b"hello", qos=0)
    assert first.next_message().payload == b"hello"
    other.close()
    first.close()


@pytest.mark.parametrize(
    ("request_bytes", "status", "why"),
    [
        (b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00", 400, "not a WebSocket upgrade"),
        (b"garbage\r\n\r\n", 400, "not a WebSocket upgrade"),
        (b"GET /mqtt HTTP/1.1\r\nHost: x\r\n\r\n", 400, "not a WebSocket upgrade"),
        (upgrade_request("/other"), 404, "no MQTT WebSocket at '/other'"),
    ],
)
def test_refused_upgrades_get_an_http_answer_others_unaffected(
    ws_broker: BrokerProcess, request_bytes: bytes, status: int, why: str
) -> None:
    topic = unique("bystander")
    bystander = websocket_client(ws_broker, listener_port(ws_broker, "ws"))
    bystander.subscribe(topic, 1)
    answer = http_exchange(listener_port(ws_broker, "ws"), request_bytes)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer
    assert why in answer.decode()
    wait_for_log(ws_broker, f"WebSocket upgrade refused with HTTP {status}")
    publisher = PahoCollector(ws_broker, unique("publisher"))
    publisher.publish(topic, b"still here", qos=1)
    assert bystander.next_message().payload == b"still here"
    publisher.close()
    bystander.close()


def test_origin_not_allowed_gets_403(ws_broker: BrokerProcess) -> None:
    port = listener_port(ws_broker, "ws", 1)
    answer = http_exchange(port, upgrade_request("/custom", origin="https://evil.example"))
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert b"origin 'https://evil.example' is not in allowed_origins" in answer


def test_allowed_origin_is_upgraded(ws_broker: BrokerProcess) -> None:
    port = listener_port(ws_broker, "ws", 1)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(upgrade_request("/custom", origin="https://app.example"))
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101 "), answer
    assert b"sec-websocket-protocol: mqtt" in answer.lower()


def test_plain_mqtt_over_tls_on_the_wss_port_is_refused(
    ws_broker: BrokerProcess, certificates: Certificates
) -> None:
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=unique("not-ws"))
    client.tls_set(ca_certs=str(certificates.ca_file))
    client.connect("127.0.0.1", listener_port(ws_broker, "wss"))
    with pytest.raises(OSError):  # the HTTP 400 answer is no CONNACK
        for _ in range(50):
            if client.loop(0.1) != paho.MQTT_ERR_SUCCESS:
                raise OSError("connection lost")
    wait_for_log(ws_broker, "WebSocket upgrade refused with HTTP 400")


def test_a_connect_sent_with_the_upgrade_request_gets_its_connack(
    ws_broker: BrokerProcess,
) -> None:
    """A client that does not wait for the 101 before its CONNECT is answered at once."""
    connect = encode(Connect(client_id=unique("eager"), protocol_version=4), 4)
    port = listener_port(ws_broker, "ws")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(upgrade_request() + client_frame(BINARY, connect))
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < 2 + 4:
            chunk = sock.recv(4096)
            assert chunk, f"closed after {answer!r}"
            answer += chunk
        elapsed = time.monotonic() - started
    head, frames = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 101 "), head
    # A server frame is not masked: 0x82, length 4, then the CONNACK (accepted).
    assert frames[:6] == b"\x82\x04" + b"\x20\x02\x00\x00", frames
    assert elapsed < 2.0, elapsed
