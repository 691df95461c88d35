"""net.tls_layer in-process: the broker's TlsLayer against a client-side ssl.SSLObject.

Certificates come from trustme (a throw-away CA); the two sides exchange bytes through memory
buffers, exactly what the reader and the transport do with the socket.
"""

from __future__ import annotations

import ssl

import pytest
import trustme

from net.stream_layers import LayerError
from net.tls_layer import TlsLayer, common_name

CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(
    ca: trustme.CA, verify: ssl.VerifyMode = ssl.CERT_NONE, minimum: str = "TLSv1_2"
) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion[minimum]
    ca.issue_cert("localhost").configure_cert(context)
    if verify is not ssl.CERT_NONE:
        ca.configure_trust(context)
        context.verify_mode = verify
    return context


class TlsClient:
    """The client side of a TLS session over memory buffers."""

    def __init__(
        self,
        ca: trustme.CA,
        cert: trustme.LeafCert | None = None,
        maximum: str = "MAXIMUM_SUPPORTED",
    ) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.maximum_version = ssl.TLSVersion[maximum]
        ca.configure_trust(context)
        if cert is not None:
            cert.configure_cert(context)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")

    def handshake_with(self, layer: TlsLayer) -> bytes:
        """Run the handshake to its end on both sides; the plaintext the layer passed up."""
        plaintext = b""
        for _ in range(10):
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                pass
            else:
                if layer.ready:
                    return plaintext
            data, reply = layer.receive(self.outgoing.read())
            plaintext += data
            self.incoming.write(reply)
        raise AssertionError("handshake did not complete in 10 round trips")

    def write(self, data: bytes) -> bytes:
        self.tls.write(data)
        return self.outgoing.read()

    def read(self, data: bytes) -> bytes:
        self.incoming.write(data)
        return self.tls.read(65536)


def test_handshake_then_plaintext_both_ways(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca))
    client = TlsClient(ca)
    assert not layer.ready
    client.handshake_with(layer)
    assert layer.ready
    assert layer.identity is None  # no client certificate
    data, reply = layer.receive(client.write(CONNECT))
    assert data == CONNECT
    client.incoming.write(reply)
    assert client.read(layer.send(b"\x20\x02\x00\x00")) == b"\x20\x02\x00\x00"


def test_plaintext_split_across_reads_and_records(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca))
    client = TlsClient(ca)
    client.handshake_with(layer)
    records = client.write(CONNECT[:5]) + client.write(CONNECT[5:])
    received = b""
    for start in range(0, len(records), 7):  # the socket hands over 7 bytes at a time
        data, _reply = layer.receive(records[start : start + 7])
        received += data
    assert received == CONNECT


def test_client_certificate_common_name_is_the_identity(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca, ssl.CERT_REQUIRED))
    client = TlsClient(ca, ca.issue_cert("device-17.example", common_name="device-17"))
    client.handshake_with(layer)
    assert layer.identity == "device-17"


def test_optional_verification_without_certificate_gives_no_identity(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca, ssl.CERT_OPTIONAL))
    client = TlsClient(ca)
    client.handshake_with(layer)
    assert layer.ready
    assert layer.identity is None


@pytest.mark.parametrize(
    ("case", "verify", "versions", "reason"),
    [
        ("no certificate, one required", ssl.CERT_REQUIRED, ("TLSv1_2", "TLSv1_3"), "CERTIFICATE"),
        ("certificate of another CA", ssl.CERT_REQUIRED, ("TLSv1_2", "TLSv1_3"), "CERTIFICATE"),
        ("client only speaks 1.2, 1.3 needed", ssl.CERT_NONE, ("TLSv1_3", "TLSv1_2"), "PROTOCOL"),
    ],
)
def test_refused_handshakes_raise_layer_error_with_the_alert(
    ca: trustme.CA, case: str, verify: ssl.VerifyMode, versions: tuple[str, str], reason: str
) -> None:
    """`versions`: the server's minimum TLS version, the client's maximum."""
    minimum, maximum = versions
    layer = TlsLayer(server_context(ca, verify, minimum))
    cert = trustme.CA().issue_cert("intruder") if "another CA" in case else None
    client = TlsClient(ca, cert, maximum)
    with pytest.raises(LayerError) as raised:
        client.handshake_with(layer)
    assert "TLS handshake failed" in str(raised.value)
    assert reason in str(raised.value)
    assert raised.value.reply, "the alert OpenSSL produced is the reply"
    assert not layer.ready
    assert layer.identity is None


def test_plain_mqtt_on_the_tls_port_is_a_handshake_failure(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca))
    with pytest.raises(LayerError, match="TLS handshake failed"):
        layer.receive(CONNECT)


def test_partial_client_hello_waits_for_more(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca))
    client = TlsClient(ca)
    with pytest.raises(ssl.SSLWantReadError):
        client.tls.do_handshake()
    hello = client.outgoing.read()
    assert layer.receive(hello[:10]) == (b"", b"")
    assert not layer.ready
    _data, reply = layer.receive(hello[10:])
    assert reply  # ServerHello...


def test_close_notify_from_the_client_sets_peer_closed(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca))
    client = TlsClient(ca)
    client.handshake_with(layer)
    with pytest.raises(ssl.SSLWantReadError):
        client.tls.unwrap()
    data, _reply = layer.receive(client.outgoing.read())
    assert data == b""
    assert layer.peer_closed
    assert layer.receive(b"\x17\x03\x03") == (b"", b"")  # nothing counts after close_notify


def test_close_writes_close_notify_once(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca))
    client = TlsClient(ca)
    client.handshake_with(layer)
    farewell = layer.close()
    assert client.read(farewell) == b""  # Python's read: b"" once close_notify is in
    client.tls.unwrap()  # completes at once: the server's close_notify was received
    assert layer.close() == b""
    assert layer.send(b"\xd0\x00") == b""


def test_nothing_is_sent_or_closed_before_the_handshake(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca))
    assert layer.send(b"\x20\x02\x00\x00") == b""
    assert layer.close() == b""


def test_tampered_record_after_handshake_raises_layer_error(ca: trustme.CA) -> None:
    layer = TlsLayer(server_context(ca))
    client = TlsClient(ca)
    client.handshake_with(layer)
    record = bytearray(client.write(CONNECT))
    record[-1] ^= 0xFF  # breaks the record's authentication tag
    with pytest.raises(LayerError, match="TLS record rejected"):
        layer.receive(bytes(record))


@pytest.mark.parametrize(
    ("certificate", "expected"),
    [
        (None, None),
        ({}, None),
        ({"subject": ((("organizationName", "Example"),),)}, None),
        ({"subject": ((("countryName", "FR"),), (("commonName", "sensor-1"),))}, "sensor-1"),
    ],
)
def test_common_name(certificate: dict | None, expected: str | None) -> None:
    assert common_name(certificate) == expected
