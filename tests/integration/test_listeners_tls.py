"""TLS listeners against real clients: mosquitto_pub/mosquitto_sub, paho-mqtt, raw sockets.

One broker for most tests, with a tcp listener and three tls listeners on one trustme
certificate: server-authenticated TLS (client certificates optional), mutual TLS with
`use_identity_as_username` (the certificate's CN is the user name, an ACL rule keyed on it
applies), and `require_certificate`. Bad TLS input (a plain MQTT client on the TLS port, a
handshake that never ends) closes that connection only. SIGHUP with new certificate files
serves the new certificate to new connections and keeps the connections already up.
"""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.support.broker_config import running_broker, wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, unique
from tests.support.listeners import Certificates, listener_port
from tests.support.raw_client import RawClient

MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
MOSQUITTO_SUB = shutil.which("mosquitto_sub") or "/usr/bin/mosquitto_sub"
CONNECT_TIMEOUT = 2.0
ACL = """\
# anonymous clients
topic readwrite tls/#

user alice
topic readwrite alice/#
topic read tls/#
"""
CONFIG = f"""\
[store]
kind = "memory"
[limits]
connect_timeout = {CONNECT_TIMEOUT}
[[listeners]]
type = "tcp"
port = 0
[[listeners]]            # tls 0: server-authenticated; a client certificate is optional
type = "tls"
port = 0
certfile = "server.pem"
cafile = "ca.pem"
[[listeners]]            # tls 1: the client certificate's CN is the user name
type = "tls"
port = 0
certfile = "server.pem"
cafile = "ca.pem"
use_identity_as_username = true
[[listeners]]            # tls 2: a client certificate is required
type = "tls"
port = 0
certfile = "server.pem"
cafile = "ca.pem"
require_certificate = true
[[plugins]]
module = "plugins.acl_file"
acl_file = "acl"
"""
NOT_AUTHORIZED = 135  # paho reports CONNACK 0x05 of MQTT 3.1.1 as reason code 0x87


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(certificates: Certificates, workers: int) -> Iterator[BrokerProcess]:
    directory = certificates.directory
    (directory / "acl").write_text(ACL, encoding="utf-8")
    with running_broker(directory, CONFIG) as broker:
        yield broker


def mosquitto(
    program: str, port: int, *args: str, cafile: Path | None = None, timeout: float = 10
) -> subprocess.CompletedProcess[str]:
    tls = ["--cafile", str(cafile)] if cafile is not None else []
    return subprocess.run(
        [program, "-h", "127.0.0.1", "-p", str(port), *tls, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tls_setup(
    certificates: Certificates, client_cert: Path | None = None, username: str | None = None
) -> object:
    """A PahoCollector `setup`: trust the test CA, present `client_cert`, send `username`."""

    def setup(client: paho.Client) -> None:
        certfile = str(client_cert) if client_cert is not None else None
        client.tls_set(ca_certs=str(certificates.ca_file), certfile=certfile, keyfile=certfile)
        if username is not None:
            client.username_pw_set(username, "ignored")

    return setup


def test_mosquitto_pub_and_sub_over_tls(
    tls_broker: BrokerProcess, certificates: Certificates
) -> None:
    port = listener_port(tls_broker, "tls", 0)
    topic = f"tls/{unique('interop')}"
    tcp_subscriber = PahoCollector(tls_broker, unique("tcp-sub"))
    tcp_subscriber.subscribe(topic, 1)
    # Retained: mosquitto_sub gets it whenever its subscription lands, without a sleep.
    published = mosquitto(
        MOSQUITTO_PUB,
        port,
        "-t",
        topic,
        "-m",
        "over-tls",
        "-q",
        "1",
        "-r",
        cafile=certificates.ca_file,
    )
    assert published.returncode == 0, published.stderr
    received = mosquitto(
        MOSQUITTO_SUB,
        port,
        "-t",
        topic,
        "-q",
        "1",
        "-C",
        "1",
        "-W",
        "10",
        "-v",
        cafile=certificates.ca_file,
    )
    assert received.returncode == 0, received.stderr
    assert received.stdout.strip() == f"{topic} over-tls"
    # The same message reached the subscriber on the plain tcp listener.
    assert tcp_subscriber.next_message().payload == b"over-tls"
    tcp_subscriber.close()


def test_client_certificate_cn_is_the_username_and_its_acl_applies(
    tls_broker: BrokerProcess, certificates: Certificates
) -> None:
    port = listener_port(tls_broker, "tls", 1)
    shared = f"tls/{unique('acl')}"
    observer = PahoCollector(tls_broker, unique("observer"))  # anonymous, on tcp
    assert observer.subscribe(f"{shared}/#", 1)[0].value == 1
    # The CONNECT says "mallory": the certificate's CN "alice" is what counts.
    alice = PahoCollector(
        tls_broker,
        unique("alice"),
        port=port,
        setup=tls_setup(certificates, certificates.client_file("alice"), username="mallory"),
    )
    assert not alice.connect_reason.is_failure
    assert [code.value for code in alice.subscribe("alice/#", 1)] == [1]  # `user alice`
    assert [code.value for code in alice.subscribe(f"{shared}/#", 1)] == [1]  # reads tls/#...
    alice.publish(f"{shared}/from-alice", b"denied", qos=1)  # ...not writes: not routed
    alice.publish("alice/inbox", b"mine", qos=1)
    assert alice.next_message().payload == b"mine"
    observer.publish(f"{shared}/marker", b"marker", qos=1)
    first = observer.next_message()
    assert (first.topic, first.payload) == (f"{shared}/marker", b"marker")
    assert alice.next_message().payload == b"marker"
    alice.close()
    observer.close()


def test_anonymous_rules_do_not_apply_to_a_certificate_user(
    tls_broker: BrokerProcess, certificates: Certificates
) -> None:
    bob = PahoCollector(
        tls_broker,
        unique("bob"),
        port=listener_port(tls_broker, "tls", 1),
        setup=tls_setup(certificates, certificates.client_file("bob")),
    )
    # "bob" has no rules; anonymous clients may use tls/#, bob (a user) may not.
    assert [code.value for code in bob.subscribe("tls/#", 1)] == [0x80]
    bob.close()


def test_no_certificate_on_identity_listener_is_not_authorized(
    tls_broker: BrokerProcess, certificates: Certificates
) -> None:
    client = PahoCollector(
        tls_broker,
        unique("no-cert"),
        port=listener_port(tls_broker, "tls", 1),
        setup=tls_setup(certificates, username="alice"),
    )
    assert client.connect_reason.value == NOT_AUTHORIZED
    assert client.disconnected.wait(5)
    wait_for_log(tls_broker, "no client certificate (with a common name)")
    client.client.loop_stop()


def test_require_certificate_refuses_a_client_without_one(
    tls_broker: BrokerProcess, certificates: Certificates
) -> None:
    port = listener_port(tls_broker, "tls", 2)
    topic = f"tls/{unique('required')}"
    refused = mosquitto(MOSQUITTO_PUB, port, "-t", topic, "-m", "x", cafile=certificates.ca_file)
    assert refused.returncode != 0
    wait_for_log(tls_broker, "PEER_DID_NOT_RETURN_A_CERTIFICATE")
    client_file = str(certificates.client_file("carol"))
    accepted = mosquitto(
        MOSQUITTO_PUB,
        port,
        "-t",
        topic,
        "-m",
        "x",
        "--cert",
        client_file,
        "--key",
        client_file,
        cafile=certificates.ca_file,
    )
    assert accepted.returncode == 0, accepted.stderr


def client_hello() -> bytes:
    """The first flight of a real TLS client."""
    context = ssl.create_default_context()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname="x")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("sent", ["nothing", "half a ClientHello"])
def test_unfinished_handshake_is_closed_by_the_connect_timeout(
    tls_broker: BrokerProcess, sent: str
) -> None:
    port = listener_port(tls_broker, "tls", 0)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        if sent != "nothing":
            hello = client_hello()
            sock.sendall(hello[: len(hello) // 2])
        assert sock.recv(1024) == b""  # closed by the broker, nothing sent
    elapsed = time.monotonic() - started
    assert CONNECT_TIMEOUT - 0.2 <= elapsed < CONNECT_TIMEOUT + 3, elapsed
    wait_for_log(tls_broker, "connect_timeout")


def test_plain_mqtt_client_on_the_tls_port_is_closed_others_unaffected(
    tls_broker: BrokerProcess, certificates: Certificates
) -> None:
    topic = f"tls/{unique('unaffected')}"
    bystander = PahoCollector(
        tls_broker,
        unique("bystander"),
        port=listener_port(tls_broker, "tls", 0),
        setup=tls_setup(certificates),
    )
    bystander.subscribe(topic, 1)
    plain = RawClient("127.0.0.1", listener_port(tls_broker, "tls", 0))
    plain.send_bytes(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")  # CONNECT, in clear
    assert plain.is_closed_by_broker()
    plain.close()
    wait_for_log(tls_broker, "TLS handshake failed: WRONG_VERSION_NUMBER")
    publisher = PahoCollector(tls_broker, unique("publisher"))  # tcp
    publisher.publish(topic, b"still here", qos=1)
    assert bystander.next_message().payload == b"still here"
    publisher.close()
    bystander.close()


RELOAD_CONFIG = """[store]
kind = "none"
[[listeners]]
type = "tcp"
port = 0
[[listeners]]
type = "tls"
port = 0
certfile = "server.pem"
"""


def test_sighup_serves_new_certificate_to_new_connections_keeps_old_ones(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess], workers: int
) -> None:
    first = Certificates(tmp_path, "-1")
    second = Certificates(tmp_path, "-2")
    server_file = tmp_path / "server.pem"
    first.write_server_certificate(server_file)
    broker = broker_factory(RELOAD_CONFIG)
    port = listener_port(broker, "tls")
    topic = f"reload/{unique('t')}"
    existing = PahoCollector(
        broker, unique("existing"), port=port, setup=lambda c: c.tls_set(str(first.ca_file))
    )
    existing.subscribe(topic, 1)

    second.write_server_certificate(server_file)
    broker.process.send_signal(signal.SIGHUP)
    # Every worker of a pool reloads its listeners on its own; a connection may reach any.
    wait_for_log_lines(broker, "certificates reloaded for new connections", workers)
    assert publish_over_tls(port, second.ca_file, topic, b"new certificate") == 0
    assert existing.next_message().payload == b"new certificate"  # still connected
    assert publish_over_tls(port, first.ca_file, topic, b"old trust") != 0  # cert replaced

    server_file.write_text("not a certificate\n", encoding="utf-8")
    broker.process.send_signal(signal.SIGHUP)
    line = wait_for_log_lines(broker, "certificates not reloaded", workers)[0]
    assert "ERROR" in line and str(server_file) in line, line
    assert publish_over_tls(port, second.ca_file, topic, b"kept") == 0  # the previous context
    assert existing.next_message().payload == b"kept"
    existing.close()


def publish_over_tls(port: int, cafile: Path, topic: str, payload: bytes) -> int:
    """mosquitto_pub's exit code for one QoS 1 PUBLISH over TLS trusting `cafile`."""
    result = mosquitto(
        MOSQUITTO_PUB, port, "-t", topic, "-m", payload.decode(), "-q", "1", cafile=cafile
    )
    return result.returncode
