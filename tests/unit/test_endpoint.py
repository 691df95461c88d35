"""net.endpoint and net.tls_context in-process: layer stacks per listener type, the
SSLContext built from a listener's keys, and a reload that keeps the old context on error."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from net.endpoint import Endpoint
from net.listener_config import ListenerConfig
from net.stream_layers import LayerStack
from net.tls_context import TlsSetupError, server_context
from net.tls_layer import TlsLayer
from net.websocket_layer import WebSocketLayer


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "server.pem"
    trustme.CA().issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return path


@pytest.mark.parametrize(
    ("kind", "layer_types"),
    [
        ("tcp", None),
        ("unix", None),
        ("tls", TlsLayer),
        ("ws", WebSocketLayer),
        ("wss", LayerStack),
    ],
)
def test_new_layers_per_type(server_file: Path, kind: str, layer_types: type | None) -> None:
    certfile = str(server_file) if kind in ("tls", "wss") else ""
    endpoint = Endpoint(ListenerConfig(type=kind, certfile=certfile, path="/mqtt"))
    first, second = endpoint.new_layers(), endpoint.new_layers()
    if layer_types is None:
        assert first is None
        return
    assert isinstance(first, layer_types)
    assert first is not second  # a fresh stack per connection


@pytest.mark.parametrize(
    ("keys", "verify_mode"),
    [
        ({}, ssl.CERT_NONE),
        ({"cafile": True}, ssl.CERT_OPTIONAL),
        ({"cafile": True, "use_identity_as_username": True}, ssl.CERT_OPTIONAL),
        ({"cafile": True, "require_certificate": True}, ssl.CERT_REQUIRED),
    ],
)
def test_client_certificates_are_asked_for_with_a_cafile(
    server_file: Path, ca_file: Path, keys: dict, verify_mode: ssl.VerifyMode
) -> None:
    values = {**keys, "cafile": str(ca_file)} if "cafile" in keys else keys
    context = server_context(ListenerConfig(type="tls", certfile=str(server_file), **values))
    assert context.verify_mode == verify_mode


@pytest.mark.parametrize(("version", "minimum"), [("1.2", "TLSv1_2"), ("1.3", "TLSv1_3")])
def test_tls_version_is_the_minimum(server_file: Path, version: str, minimum: str) -> None:
    config = ListenerConfig(type="tls", certfile=str(server_file), tls_version=version)
    assert server_context(config).minimum_version == ssl.TLSVersion[minimum]


def test_encrypted_key_is_refused_without_a_prompt(tmp_path: Path) -> None:
    leaf = trustme.CA().issue_cert("localhost")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    (tmp_path / "enc.key").write_bytes(encrypted)
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    config = ListenerConfig(
        type="tls", certfile=str(tmp_path / "cert.pem"), keyfile=str(tmp_path / "enc.key")
    )
    with pytest.raises(TlsSetupError, match="the private key is encrypted"):
        server_context(config)


def test_endpoint_error_names_the_listener(tmp_path: Path) -> None:
    config = ListenerConfig(type="wss", port=8084, certfile=str(tmp_path / "none.pem"))
    with pytest.raises(TlsSetupError, match=r"^listener wss 127.0.0.1:8084: certfile .*none.pem"):
        Endpoint(config)


def handshake_ca(layer: TlsLayer, cafile: Path) -> bool:
    """Whether a client trusting `cafile` completes a handshake with `layer`."""
    context = ssl.create_default_context(cafile=str(cafile))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    for _ in range(5):
        try:
            client.do_handshake()
            return True
        except ssl.SSLWantReadError:
            incoming.write(layer.receive(outgoing.read())[1])
        except ssl.SSLCertVerificationError:
            return False
    raise AssertionError("no handshake in 5 round trips")


def test_reload_uses_new_files_for_new_layers_and_keeps_old_on_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = trustme.CA(), trustme.CA()
    for name, ca in (("first.pem", first), ("second.pem", second)):
        ca.cert_pem.write_to_path(str(tmp_path / name))
    certfile = tmp_path / "server.pem"
    first.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(certfile))
    endpoint = Endpoint(ListenerConfig(type="tls", certfile=str(certfile)))
    old_layer = endpoint.new_layers()
    second.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(certfile))
    with caplog.at_level(logging.INFO, logger="net.endpoint"):
        endpoint.reload()
    assert "certificates reloaded for new connections" in caplog.text
    assert isinstance(old_layer, TlsLayer)
    assert handshake_ca(old_layer, tmp_path / "first.pem")  # made before: old certificate
    new_layer = endpoint.new_layers()
    assert isinstance(new_layer, TlsLayer)
    assert handshake_ca(new_layer, tmp_path / "second.pem")

    certfile.write_text("garbage\n", encoding="utf-8")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="net.endpoint"):
        endpoint.reload()
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert "certificates not reloaded, new connections keep the previous ones" in record.message
    kept = endpoint.new_layers()
    assert isinstance(kept, TlsLayer)
    assert handshake_ca(kept, tmp_path / "second.pem")


def test_reload_of_a_plain_listener_does_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="net.endpoint"):
        Endpoint(ListenerConfig(type="ws")).reload()
    assert caplog.records == []
