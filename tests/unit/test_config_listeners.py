"""actors.config listeners: `[[listeners]]` tables, the old `[listener]` table, `--host/--port`,
and the start-up errors that name the offending key."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.config import BrokerConfig, ConfigError, load_config
from net.listener_config import ListenerConfig


def load(tmp_path: Path, text: str, **overrides: object) -> BrokerConfig:
    path = tmp_path / "broker.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, overrides)


def test_default_is_one_tcp_listener_on_loopback() -> None:
    config = load_config(None)
    assert config.listeners == (ListenerConfig(type="tcp", host="127.0.0.1", port=1883),)
    assert config.listener is config.listeners[0]


def test_old_listener_table_is_one_tcp_listener(tmp_path: Path) -> None:
    config = load(tmp_path, '[listener]\nhost = "0.0.0.0"\nport = 1884\nmax_connections = 10\n')
    assert config.listeners == (
        ListenerConfig(type="tcp", host="0.0.0.0", port=1884, max_connections=10),
    )


def test_every_type_with_its_keys(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[[listeners]]
type = "tcp"
port = 1883
[[listeners]]
type = "tls"
certfile = "certs/server.pem"
keyfile = "/etc/mqtt/server.key"
cafile = "certs/ca.pem"
require_certificate = true
use_identity_as_username = true
tls_version = "1.3"
ciphers = "ECDHE+AESGCM"
max_connections = 50
[[listeners]]
type = "ws"
host = "0.0.0.0"
path = "/ws"
allowed_origins = ["https://app.example"]
[[listeners]]
type = "wss"
certfile = "server.pem"
[[listeners]]
type = "unix"
path = "/run/mqtt.sock"
""",
    )
    tcp, tls, ws, wss, unix = config.listeners
    assert tcp == ListenerConfig(type="tcp", port=1883)
    # Relative file names resolve against the configuration file's directory.
    assert tls.certfile == str(tmp_path / "certs/server.pem")
    assert tls.keyfile == "/etc/mqtt/server.key"
    assert tls.cafile == str(tmp_path / "certs/ca.pem")
    assert (tls.port, tls.require_certificate, tls.use_identity_as_username) == (8883, True, True)
    assert (tls.tls_version, tls.ciphers, tls.max_connections) == ("1.3", "ECDHE+AESGCM", 50)
    assert (ws.host, ws.port, ws.path, ws.allowed_origins) == (
        "0.0.0.0",
        8083,
        "/ws",
        ("https://app.example",),
    )
    assert (wss.port, wss.path, wss.tls_version, wss.cafile) == (8084, "/mqtt", "1.2", "")
    assert (unix.path, unix.describe()) == ("/run/mqtt.sock", "unix /run/mqtt.sock")
    assert [x.is_tls for x in config.listeners] == [False, True, False, True, False]
    assert config.listener is tcp


def test_host_and_port_options_set_the_first_tcp_listener(tmp_path: Path) -> None:
    text = """
[[listeners]]
type = "ws"
port = 8080
[[listeners]]
type = "tcp"
port = 1883
[[listeners]]
type = "tcp"
port = 1884
"""
    config = load(tmp_path, text, host="0.0.0.0", port=0)
    assert [(x.type, x.host, x.port) for x in config.listeners] == [
        ("ws", "127.0.0.1", 8080),
        ("tcp", "0.0.0.0", 0),
        ("tcp", "127.0.0.1", 1884),
    ]
    assert config.listener is config.listeners[1]


TLS = '[[listeners]]\ntype = "tls"\ncertfile = "s.pem"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[listener]\nport = 1\n[[listeners]]\ntype = "tcp"\n', "both set"),
        ('[listener]\ntype = "tls"\n', "use [[listeners]] to set type"),
        ("listeners = []\n", "non-empty array of tables"),
        ('[[listeners]]\ntype = "quic"\n', "type must be one of tcp, tls, ws, wss, unix"),
        ('[[listeners]]\ntype = "tcp"\nprot = 1\n', "#1 (tcp): unknown key 'prot'"),
        ('[[listeners]]\ntype = "tcp"\ncertfile = "x"\n', "certfile applies to tls, wss"),
        ('[[listeners]]\ntype = "tls"\npath = "/x"\n', "path applies to ws, wss, unix"),
        ('[[listeners]]\ntype = "unix"\nport = 1\n', "port applies to tcp, tls, ws, wss"),
        ('[[listeners]]\ntype = "tls"\n', "#1 (tls): certfile is required"),
        (TLS + 'tls_version = "1.1"\n', "tls_version must be one of 1.2, 1.3"),
        (TLS + "tls_version = 1.2\n", "tls_version must be str"),
        (TLS + "require_certificate = true\n", "need cafile"),
        (TLS + "use_identity_as_username = true\n", "need cafile"),
        (TLS + 'require_certificate = "yes"\n', "require_certificate must be bool"),
        ('[[listeners]]\ntype = "ws"\npath = "mqtt"\n', "path must start with '/'"),
        ('[[listeners]]\ntype = "ws"\nallowed_origins = "*"\n', "must be an array of strings"),
        ('[[listeners]]\ntype = "unix"\n', "#1 (unix): path is required"),
        ("[[listeners]]\nport = 70000\n", "#1 (tcp) port must be 0..65535"),
        ("[[listeners]]\nmax_connections = 0\n", "max_connections must be at least 1"),
        (
            '[[listeners]]\nport = 1883\n[[listeners]]\ntype = "tcp"\nport = 1883\n',
            "two listeners on 127.0.0.1:1883",
        ),
        ('[[listeners]]\ntype = "ws"\nport = 1883\n' + TLS.replace("tls", "tcp"), "#2 (tcp)"),
    ],
)
def test_errors_name_the_listener_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, text)
    assert message in str(raised.value)


def test_port_option_needs_a_tcp_listener(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--host/--port set the first tcp listener"):
        load(tmp_path, '[[listeners]]\ntype = "ws"\n', port=0)


def test_port_option_out_of_range(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--port must be 0\.\.65535"):
        load(tmp_path, "", port=65536)


def test_port_zero_listeners_may_share_the_host(tmp_path: Path) -> None:
    config = load(tmp_path, '[[listeners]]\nport = 0\n[[listeners]]\ntype = "ws"\nport = 0\n')
    assert [x.port for x in config.listeners] == [0, 0]
