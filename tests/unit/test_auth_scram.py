"""SCRAM-SHA-256 (plugins.auth_scram): the exchange against RFC 7677's test vector, the
credentials file and its tool, and the plugin's answers on client.authenticate."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.client import ClientInfo
from hooks.decisions import AUTH_BAD_CREDENTIALS, AuthContinue, AuthResult, Decision
from hooks.events import AuthenticateRequest
from plugins.auth_scram import CredentialsFileError, Plugin, parse_credentials_file
from plugins.auth_scram.__main__ import main as scram_tool
from plugins.auth_scram.scram import (
    ScramClient,
    ScramError,
    make_credential,
    parse_client_first,
    parse_credential,
    server_final,
    server_first,
)
from plugins.base import PluginConfigError, PluginContext

# RFC 7677 section 3: user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_vector_client_side() -> None:
    client = ScramClient("user", b"pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)


def test_rfc7677_vector_server_side() -> None:
    credential = make_credential(b"pencil", 4096, RFC_SALT)
    first = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    exchange = server_first(first, credential, RFC_SERVER_NONCE, credential)
    assert exchange.server_first.encode() == RFC_SERVER_FIRST
    assert server_final(exchange, RFC_CLIENT_FINAL) == RFC_SERVER_FINAL


def rfc_exchange() -> object:
    credential = make_credential(b"pencil", 4096, RFC_SALT)
    first = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    return server_first(first, credential, RFC_SERVER_NONCE, credential)


@pytest.mark.parametrize(
    "client_final",
    [
        RFC_CLIENT_FINAL.replace(b"p=dHz", b"p=eHz"),  # another proof
        RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # claims channel binding "y,,"
        RFC_CLIENT_FINAL.replace(b"hNlF$k0,", b"hNlF$k1,"),  # another nonce
        RFC_CLIENT_FINAL.split(b",p=")[0],  # no proof
        b"c=biws,r=x,p=!!!",  # proof not base64
        b"\xff\xfe",
    ],
)
def test_server_refuses_a_bad_client_final(client_final: bytes) -> None:
    with pytest.raises(ScramError):
        server_final(rfc_exchange(), client_final)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "client_first",
    [
        b"p=tls-unique,,n=user,r=abc",  # channel binding
        b"n,a=admin,n=user,r=abc",  # authzid
        b"n,,r=abc,n=user",  # attributes out of order
        b"n,,n=,r=a",  # empty user name
        b"n,,n=us=er,r=abc",  # '=' not escaped
        b"n,,garbage",
        b"\xff",
    ],
)
def test_server_refuses_a_bad_client_first(client_first: bytes) -> None:
    with pytest.raises(ScramError):
        parse_client_first(client_first)


def test_escaped_user_names_round_trip() -> None:
    client = ScramClient("a,b=c", b"pw")
    assert parse_client_first(client.first()).username == "a,b=c"


@settings(max_examples=20, deadline=None)
@given(password=st.binary(min_size=1, max_size=40), other=st.binary(min_size=1, max_size=40))
def test_only_the_right_password_verifies(password: bytes, other: bytes) -> None:
    credential = make_credential(password, iterations=2)
    for attempt in {password, other}:
        client = ScramClient("u", attempt)
        exchange = server_first(parse_client_first(client.first()), credential, "srv", credential)
        final = client.final(exchange.server_first.encode())
        if attempt == password:
            client.verify(server_final(exchange, final))
        else:
            with pytest.raises(ScramError):
                server_final(exchange, final)


def test_credential_encoding_round_trips_and_holds_no_password() -> None:
    credential = make_credential(b"pencil", 4096)
    text = credential.encode()
    assert text.startswith("SCRAM-SHA-256$4096:")
    assert "pencil" not in text
    assert parse_credential(text) == credential


@pytest.mark.parametrize(
    "text",
    [
        "SCRAM-SHA-1$4096:c2FsdA==$" + "A" * 44 + ":" + "A" * 44,
        "SCRAM-SHA-256$x:c2FsdA==$" + "A" * 44 + ":" + "A" * 44,
        "SCRAM-SHA-256$4096:c2FsdA==$QUFB:QUFB",  # keys too short
        "SCRAM-SHA-256$4096:c2FsdA==",
    ],
)
def test_bad_credentials_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_credential(text)


def test_credentials_file_errors_name_the_line() -> None:
    good = make_credential(b"x", 2).encode()
    with pytest.raises(CredentialsFileError, match="f line 3"):
        parse_credentials_file(f"# users\nalice:{good}\nbob:plain-password\n", "f")
    with pytest.raises(CredentialsFileError, match="defined twice"):
        parse_credentials_file(f"alice:{good}\nalice:{good}\n", "f")


def test_tool_adds_and_updates_users(tmp_path: Path) -> None:
    path = tmp_path / "scram"
    assert scram_tool(["add", str(path), "alice", "--password", "one", "--iterations", "16"]) == 0
    assert scram_tool(["add", str(path), "bob", "--password", "two", "--iterations", "16"]) == 0
    assert scram_tool(["add", str(path), "alice", "--password", "three", "--iterations", "16"]) == 0
    users = parse_credentials_file(path.read_text(), str(path))
    assert sorted(users) == ["alice", "bob"]
    assert "three" not in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    plugin = new_plugin(path)
    assert run_exchange(plugin, "alice", b"three").allowed
    assert run_exchange(plugin, "alice", b"one") == AUTH_BAD_CREDENTIALS


# ----- the plugin -----------------------------------------------------------------------


def new_plugin(path: Path) -> Plugin:
    context = PluginContext(config_dir=path.parent, node_name="n", worker_id=0, plugin_name="s")
    return Plugin({"credentials_file": str(path)}, context)


def request(data: bytes, state: object = None, username: str | None = None) -> AuthenticateRequest:
    client = ClientInfo(
        client_id="c",
        username=username,
        peer="p",
        protocol_version=5,
        clean_start=True,
        keepalive=0,
    )
    return AuthenticateRequest(
        client=client, password=None, method="SCRAM-SHA-256", data=data, state=state
    )


def run_exchange(plugin: Plugin, user: str, password: bytes) -> AuthResult:
    client = ScramClient(user, password)
    step = plugin.authenticate(request(client.first()))
    assert isinstance(step, AuthContinue), step
    final = plugin.authenticate(request(client.final(step.data), state=step.state))
    assert isinstance(final, AuthResult), final
    if final.allowed:
        assert final.data is not None
        client.verify(final.data)
    return final


@pytest.fixture
def credentials(tmp_path: Path) -> Path:
    path = tmp_path / "scram"
    path.write_text(f"alice:{make_credential(b'pencil', 64).encode()}\n")
    return path


def test_plugin_accepts_the_right_password_and_names_the_user(credentials: Path) -> None:
    result = run_exchange(new_plugin(credentials), "alice", b"pencil")
    assert result.allowed and result.username == "alice"


def test_plugin_refuses_a_wrong_password_and_an_unknown_user(credentials: Path) -> None:
    plugin = new_plugin(credentials)
    assert run_exchange(plugin, "alice", b"pen") == AUTH_BAD_CREDENTIALS
    # An unknown user still gets a server-first, with a stable decoy salt: the exchange
    # does not say which users exist.
    assert run_exchange(plugin, "mallory", b"pencil") == AUTH_BAD_CREDENTIALS
    first = plugin.authenticate(request(ScramClient("mallory", b"x").first()))
    again = plugin.authenticate(request(ScramClient("mallory", b"x").first()))
    assert isinstance(first, AuthContinue) and isinstance(again, AuthContinue)
    salt = [part for part in first.data.split(b",") if part.startswith(b"s=")]
    assert salt == [part for part in again.data.split(b",") if part.startswith(b"s=")]


def test_plugin_ignores_other_methods_and_password_logins(credentials: Path) -> None:
    plugin = new_plugin(credentials)
    other = AuthenticateRequest(client=request(b"").client, password=b"x", method="OTHER")
    plain = AuthenticateRequest(client=request(b"").client, password=b"x")
    assert plugin.authenticate(other) is Decision.IGNORE
    assert plugin.authenticate(plain) is Decision.IGNORE


def test_plugin_refuses_a_malformed_first_message(credentials: Path) -> None:
    assert new_plugin(credentials).authenticate(request(b"not scram")) == AUTH_BAD_CREDENTIALS


def test_bad_file_stops_the_plugin_and_a_bad_reload_keeps_the_users(
    credentials: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad"
    bad.write_text("alice:$7$101$salt$hash\n")
    with pytest.raises(PluginConfigError, match="line 1"):
        new_plugin(bad)
    plugin = new_plugin(credentials)
    credentials.write_text("garbage\n")
    plugin.reload()
    assert run_exchange(plugin, "alice", b"pencil").allowed
