"""HookBus.authenticate for MQTT 5.0 enhanced authentication: AuthContinue passes through,
a method nobody speaks is BAD_AUTHENTICATION_METHOD (0x8C), and the password plugin keeps
out of the way of a method's plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.client import ClientInfo
from hooks.decisions import (
    AUTH_BAD_CREDENTIALS,
    AUTH_BAD_METHOD,
    AuthContinue,
    AuthFailure,
    AuthResult,
    Decision,
)
from hooks.events import AuthenticateRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt.reason_codes import ReasonCode
from plugins.auth_file import Plugin as PasswordPlugin
from plugins.auth_file import hash_password
from plugins.base import PluginContext

CLIENT = ClientInfo(
    client_id="c", username="alice", peer="p", protocol_version=5, clean_start=True, keepalive=0
)


def request(method: str | None, password: bytes | None = None) -> AuthenticateRequest:
    return AuthenticateRequest(client=CLIENT, password=password, method=method, data=b"d")


def test_bad_authentication_method_maps_to_0x8c() -> None:
    assert AuthFailure.BAD_AUTHENTICATION_METHOD.connack_v5 == ReasonCode.BAD_AUTHENTICATION_METHOD


@pytest.mark.parametrize("allow_anonymous", [True, False])
def test_a_method_nobody_speaks_is_bad_authentication_method(allow_anonymous: bool) -> None:
    bus = HookBus(allow_anonymous=allow_anonymous)
    bus.register(HookPoint.CLIENT_AUTHENTICATE, lambda _request: Decision.IGNORE)
    assert bus.authenticate(request("KERBEROS")) == AUTH_BAD_METHOD
    # Without a method nothing changes: allow_anonymous decides.
    result = bus.authenticate(request(None))
    assert isinstance(result, AuthResult)
    assert result.allowed is allow_anonymous


def test_auth_continue_wins_like_a_decision() -> None:
    bus = HookBus()
    step = AuthContinue(data=b"challenge", state=1)
    bus.register(HookPoint.CLIENT_AUTHENTICATE, lambda r: step if r.method == "X" else None)
    assert bus.authenticate(request("X")) is step


def test_password_plugin_ignores_requests_with_a_method(tmp_path: Path) -> None:
    passwords = tmp_path / "passwd"
    passwords.write_text(f"alice:{hash_password(b'secret').encode()}\n")
    context = PluginContext(config_dir=tmp_path, node_name="n", worker_id=0, plugin_name="pw")
    plugin = PasswordPlugin({"password_file": str(passwords)}, context)
    assert plugin.authenticate(request("SCRAM-SHA-256", b"secret")) is Decision.IGNORE
    assert plugin.authenticate(request(None, b"secret")) is Decision.ALLOW
    bus = HookBus(allow_anonymous=False)
    plugin.register(bus)
    assert bus.authenticate(request("SCRAM-SHA-256")) == AUTH_BAD_METHOD
    assert bus.authenticate(request(None)) == AUTH_BAD_CREDENTIALS  # alice, no password


def test_auth_continue_without_a_method_is_ignored_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Nothing to continue without a method: a plugin bug, treated as IGNORE.
    bus = HookBus(allow_anonymous=False)
    bus.register(HookPoint.CLIENT_AUTHENTICATE, lambda _r: AuthContinue(data=b"?"), owner="bad")
    assert bus.authenticate(request(None)) == AUTH_BAD_CREDENTIALS
    assert "expected Decision, AuthResult or AuthContinue" in caplog.text
