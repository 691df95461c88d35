"""Listener start-up: what a misconfigured listener does to `python -m actors.main` (one ERROR
line naming the listener, the key and the file; exit 2 for configuration, 1 for an address in
use), and the unix socket listener with mosquitto_pub/mosquitto_sub."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.broker_process import ROOT, BrokerProcess
from tests.support.listeners import Certificates

MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
MOSQUITTO_SUB = shutil.which("mosquitto_sub") or "/usr/bin/mosquitto_sub"


def run_until_exit(tmp_path: Path, config_text: str) -> tuple[int, str]:
    """Start the broker with `config_text`; its exit code and output (it must exit by itself)."""
    config = tmp_path / "broker.toml"
    config.write_text(config_text, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "actors.main", "--config", str(config), "--store", "none"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return result.returncode, result.stdout + result.stderr


def tls_listener(certfile: str, keyfile: str = "", extra: str = "") -> str:
    key = f'keyfile = "{keyfile}"\n' if keyfile else ""
    return f'[[listeners]]\ntype = "tls"\nport = 0\ncertfile = "{certfile}"\n{key}{extra}'


@pytest.mark.parametrize(
    ("case", "listener", "message"),
    [
        (
            "missing certificate file",
            tls_listener("missing.pem"),
            "listener tls 127.0.0.1:0: certfile {dir}/missing.pem: cannot read it: No such file",
        ),
        (
            "key of another certificate",
            tls_listener("server.pem", "other.key"),
            "keyfile {dir}/other.key: the private key does not match the certificate in "
            "certfile {dir}/server.pem",
        ),
        (
            "not a certificate",
            tls_listener("garbage.pem", "other.key"),
            "certfile {dir}/garbage.pem / keyfile {dir}/other.key: not a PEM certificate chain",
        ),
        (
            "cipher list matching nothing",
            tls_listener("server.pem", extra='ciphers = "NO-SUCH-CIPHER"\n'),
            "ciphers 'NO-SUCH-CIPHER': no cipher matches",
        ),
    ],
)
def test_unusable_tls_files_stop_the_broker_with_exit_2(
    tmp_path: Path, case: str, listener: str, message: str
) -> None:
    Certificates(tmp_path)  # ca.pem, server.pem
    other = Certificates(tmp_path, "-other")
    (tmp_path / "other.key").write_bytes(other.ca.issue_cert("localhost").private_key_pem.bytes())
    (tmp_path / "garbage.pem").write_text("not a certificate\n", encoding="utf-8")
    code, output = run_until_exit(tmp_path, "[[listeners]]\nport = 0\n" + listener)
    assert code == 2, (case, output)
    errors = [line for line in output.splitlines() if " ERROR " in line]
    assert len(errors) == 1, output
    assert "TLS configuration error: " in errors[0]
    assert message.format(dir=tmp_path) in errors[0], errors[0]
    assert "ready:" not in output


def test_unknown_listener_key_stops_the_broker_with_exit_2(tmp_path: Path) -> None:
    code, output = run_until_exit(tmp_path, '[[listeners]]\ntype = "ws"\ncertfile = "x.pem"\n')
    assert code == 2, output
    assert "configuration error: [[listeners]] #1 (ws): certfile applies to tls, wss" in output


def test_port_in_use_stops_the_broker_with_exit_1(tmp_path: Path) -> None:
    Certificates(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = "[[listeners]]\nport = 0\n" + tls_listener("server.pem").replace(
            "port = 0", f"port = {port}"
        )
        code, output = run_until_exit(tmp_path, config)
    assert code == 1, output
    assert f"cannot listen for tls 127.0.0.1:{port}: Address already in use" in output
    assert "ready:" not in output


@pytest.mark.skipif(shutil.which(MOSQUITTO_PUB) is None, reason="mosquitto-clients missing")
def test_unix_socket_listener_with_mosquitto_clients(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    path = tmp_path / "mqtt.sock"
    broker = broker_factory(
        f'[[listeners]]\nport = 0\n[[listeners]]\ntype = "unix"\npath = "{path}"\n'
    )
    assert f"listening: unix {path}" in broker.log()
    published = subprocess.run(
        [MOSQUITTO_PUB, "--unix", str(path), "-t", "unix/t", "-m", "over unix", "-q", "1", "-r"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert published.returncode == 0, published.stderr
    received = subprocess.run(
        [MOSQUITTO_SUB, "--unix", str(path), "-t", "unix/#", "-C", "1", "-W", "5", "-v"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert received.stdout.strip() == "unix/t over unix", received.stderr
    assert broker.stop() == 0
    assert not path.exists()  # the socket file is removed on exit


def test_unix_socket_path_taken_by_a_running_broker(
    tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    path = tmp_path / "mqtt.sock"
    config = f'[[listeners]]\nport = 0\n[[listeners]]\ntype = "unix"\npath = "{path}"\n'
    broker_factory(config)
    code, output = run_until_exit(
        tmp_path, config.replace("port = 0", 'port = 0\nhost = "127.0.0.2"')
    )
    assert code == 1, output
    assert f"cannot listen for unix {path}: Address already in use" in output
    assert path.exists()  # the running broker's socket is left alone
