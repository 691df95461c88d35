"""MQTT 5.0 enhanced authentication in the channel, in-process: packets in, actions out.

A test plugin speaks the method "ECHO-2": the first step answers AUTH 0x18 with b"challenge",
the second accepts when the client answers b"response" (CONNACK carries b"welcome"), and
refuses otherwise. The real SCRAM-SHA-256 plugin runs the same phases at the end. Section
4.12 of MQTT 5.0; the normative statements are cited where they decide an answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from channel.actions import End, InputHandled, OpenSession, Send, SetReadTimeout
from channel.channel import Channel, ChannelSettings, Phase
from core.reasons import DisconnectReason
from hooks.decisions import AUTH_BAD_CREDENTIALS, AuthContinue, AuthResult, Decision
from hooks.events import AuthenticateRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt import PacketDecoder
from mqtt.packets import Auth, ConnAck, Connect, Disconnect, PingReq, Publish
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from plugins.auth_scram import Plugin as ScramPlugin
from plugins.auth_scram.scram import ScramClient, make_credential
from plugins.base import PluginContext

METHOD = "ECHO-2"
METHOD_ID = PropertyId.AUTHENTICATION_METHOD
DATA_ID = PropertyId.AUTHENTICATION_DATA
REASON_ID = PropertyId.REASON_STRING


class EchoTwoSteps:
    """A two-step method; records every request it gets."""

    def __init__(self) -> None:
        self.requests: list[AuthenticateRequest] = []

    def __call__(self, request: AuthenticateRequest) -> Decision | AuthResult | AuthContinue:
        self.requests.append(request)
        if request.method != METHOD:
            return Decision.IGNORE
        if request.state is None:
            return AuthContinue(data=b"challenge", state="sent challenge")
        if request.state == "sent challenge" and request.data == b"response":
            return AuthResult(allowed=True, data=b"welcome")
        return AUTH_BAD_CREDENTIALS


def hooks_with(callback: Any) -> HookBus:
    hooks = HookBus(allow_anonymous=False)
    hooks.register(HookPoint.CLIENT_AUTHENTICATE, callback)
    return hooks


def new_channel(hooks: HookBus) -> Channel:
    return Channel("127.0.0.1:5000", hooks, ChannelSettings())


def connect(method: str | None = METHOD, data: bytes | None = b"hello", **kwargs: Any) -> Connect:
    properties: dict[int, Any] = {}
    if method is not None:
        properties[METHOD_ID] = method
    if data is not None:
        properties[DATA_ID] = data
    return Connect(client_id="c1", protocol_version=5, properties=properties, **kwargs)


def auth(reason: int, data: bytes | None, method: str = METHOD) -> Auth:
    properties: dict[int, Any] = {METHOD_ID: method}
    if data is not None:
        properties[DATA_ID] = data
    return Auth(reason_code=reason, properties=properties)


def decoded(action: Any) -> Any:
    """The one packet a Send action writes, decoded as a 5.0 client would."""
    assert type(action) is Send, action
    decoder = PacketDecoder(max_packet_size=1 << 20, protocol_version=5)
    (packet,) = decoder.feed(action.data)
    return packet


def test_connect_with_a_method_gets_auth_continue_and_waits() -> None:
    plugin = EchoTwoSteps()
    channel = new_channel(hooks_with(plugin))
    actions = channel.handle_in([connect()], 30)
    assert channel.phase is Phase.AUTHENTICATING
    packet = decoded(actions[0])
    assert packet == auth(ReasonCode.CONTINUE_AUTHENTICATION, b"challenge")
    assert actions[1:] == [InputHandled(1, 30)]
    (request,) = plugin.requests
    assert (request.method, request.data, request.state) == (METHOD, b"hello", None)


def test_the_right_answer_opens_the_session_with_method_and_data_in_connack() -> None:
    plugin = EchoTwoSteps()
    channel = new_channel(hooks_with(plugin))
    channel.handle_in([connect()], 30)
    actions = channel.handle_in([auth(ReasonCode.CONTINUE_AUTHENTICATION, b"response")], 20)
    assert channel.phase is Phase.CONNECTING
    assert actions[0] == SetReadTimeout(None)
    opened = actions[1]
    assert type(opened) is OpenSession
    # The CONNACK carries the method and the plugin's last data [MQTT-4.12.0-5].
    assert opened.connack_properties[METHOD_ID] == METHOD
    assert opened.connack_properties[DATA_ID] == b"welcome"
    assert plugin.requests[1].state == "sent challenge"
    assert plugin.requests[1].data == b"response"


def test_a_wrong_answer_is_refused_with_the_plugins_code_and_closed() -> None:
    channel = new_channel(hooks_with(EchoTwoSteps()))
    channel.handle_in([connect()], 30)
    actions = channel.handle_in([auth(ReasonCode.CONTINUE_AUTHENTICATION, b"nonsense")], 20)
    assert decoded(actions[0]) == ConnAck(
        False,
        ReasonCode.BAD_USER_NAME_OR_PASSWORD,
        {REASON_ID: "authentication failed: bad_credentials"},
    )
    assert actions[1] == End(DisconnectReason.NOT_AUTHORIZED, was_connected=False)
    assert channel.phase is Phase.CLOSED


def test_no_plugin_for_the_method_is_bad_authentication_method() -> None:
    # Nobody speaks "KERBEROS": CONNACK 0x8C and close [MQTT-4.12.0-1], even if anonymous
    # clients were allowed.
    channel = Channel("p", HookBus(allow_anonymous=True), ChannelSettings())
    actions = channel.handle_in([connect(method="KERBEROS")], 30)
    assert decoded(actions[0]) == ConnAck(
        False,
        ReasonCode.BAD_AUTHENTICATION_METHOD,
        {REASON_ID: "authentication failed: bad_authentication_method"},
    )
    assert type(actions[1]) is End
    assert channel.phase is Phase.CLOSED


@pytest.mark.parametrize(
    "packet",
    [
        Publish(topic="a", payload=b"x", qos=0),
        PingReq(),
        auth(ReasonCode.RE_AUTHENTICATE, b"response"),  # 0x18 expected
        auth(ReasonCode.CONTINUE_AUTHENTICATION, b"response", method="OTHER"),  # [MQTT-4.12.0-5]
    ],
)
def test_anything_but_auth_continue_with_the_method_is_a_protocol_error(packet: Any) -> None:
    # Only AUTH or DISCONNECT until CONNACK [MQTT-3.1.2-30].
    channel = new_channel(hooks_with(EchoTwoSteps()))
    channel.handle_in([connect()], 30)
    actions = channel.handle_in([packet], 10)
    connack = decoded(actions[0])
    assert connack.reason_code == ReasonCode.PROTOCOL_ERROR
    assert "MQTT" in connack.properties[REASON_ID]  # the rule it broke
    assert channel.phase is Phase.CLOSED


def test_disconnect_during_the_exchange_ends_quietly() -> None:
    channel = new_channel(hooks_with(EchoTwoSteps()))
    channel.handle_in([connect()], 30)
    actions = channel.handle_in([Disconnect()], 2)
    assert actions[0] == End(DisconnectReason.CLIENT_DISCONNECT, was_connected=False)


def test_authentication_data_without_a_method_is_a_protocol_error() -> None:
    channel = new_channel(hooks_with(EchoTwoSteps()))
    actions = channel.handle_in([connect(method=None, data=b"x")], 30)
    assert decoded(actions[0]) == ConnAck(
        False,
        ReasonCode.PROTOCOL_ERROR,
        {REASON_ID: "Authentication Data without an Authentication Method [MQTT-3.1.2-28]"},
    )


def test_the_whole_exchange_in_one_read() -> None:
    # A client that sends CONNECT and its AUTH back to back: handled in order.
    channel = new_channel(hooks_with(EchoTwoSteps()))
    actions = channel.handle_in(
        [connect(), auth(ReasonCode.CONTINUE_AUTHENTICATION, b"response")], 50
    )
    assert decoded(actions[0]).reason_code == ReasonCode.CONTINUE_AUTHENTICATION
    assert any(type(a) is OpenSession for a in actions)
    assert channel.phase is Phase.CONNECTING


def connected_by_echo(plugin: EchoTwoSteps) -> Channel:
    channel = new_channel(hooks_with(plugin))
    channel.handle_in([connect()], 30)
    channel.handle_in([auth(ReasonCode.CONTINUE_AUTHENTICATION, b"response")], 20)
    channel.session_attached(session_present=False)
    assert channel.phase is Phase.CONNECTED
    return channel


def test_reauthentication_success_answers_auth_success() -> None:
    plugin = EchoTwoSteps()
    channel = connected_by_echo(plugin)
    first = channel.handle_in([auth(ReasonCode.RE_AUTHENTICATE, b"again")], 10)
    assert decoded(first[0]) == auth(ReasonCode.CONTINUE_AUTHENTICATION, b"challenge")
    assert plugin.requests[-1].reauthenticate and plugin.requests[-1].state is None
    second = channel.handle_in([auth(ReasonCode.CONTINUE_AUTHENTICATION, b"response")], 10)
    assert decoded(second[0]) == auth(ReasonCode.SUCCESS, b"welcome")
    assert channel.phase is Phase.CONNECTED


def test_reauthentication_failure_disconnects_with_not_authorized() -> None:
    # [MQTT-4.12.1-2]: DISCONNECT with a reason code, then close.
    channel = connected_by_echo(EchoTwoSteps())
    channel.handle_in([auth(ReasonCode.RE_AUTHENTICATE, b"again")], 10)
    actions = channel.handle_in([auth(ReasonCode.CONTINUE_AUTHENTICATION, b"wrong")], 10)
    assert decoded(actions[0]) == Disconnect(
        ReasonCode.NOT_AUTHORIZED, {REASON_ID: "re-authentication failed: bad_credentials"}
    )
    assert actions[1] == End(DisconnectReason.NOT_AUTHORIZED, was_connected=True)


@pytest.mark.parametrize(
    "packet",
    [
        auth(ReasonCode.CONTINUE_AUTHENTICATION, b"x"),  # no re-authentication under way
        auth(ReasonCode.RE_AUTHENTICATE, b"x", method="OTHER"),  # [MQTT-4.12.1-1]
    ],
)
def test_bad_auth_when_connected_is_a_protocol_error(packet: Auth) -> None:
    channel = connected_by_echo(EchoTwoSteps())
    actions = channel.handle_in([packet], 10)
    disconnect = decoded(actions[0])
    assert disconnect.reason_code == ReasonCode.PROTOCOL_ERROR
    assert "AUTH with" in disconnect.properties[REASON_ID]
    assert channel.phase is Phase.CLOSED


def test_auth_from_a_client_that_connected_without_a_method_is_a_protocol_error() -> None:
    channel = Channel("p", HookBus(), ChannelSettings())
    channel.handle_in([Connect(client_id="c1", protocol_version=5)], 20)
    channel.session_attached(session_present=False)
    actions = channel.handle_in([auth(ReasonCode.RE_AUTHENTICATE, b"x")], 10)
    assert decoded(actions[0]) == Disconnect(
        ReasonCode.PROTOCOL_ERROR,
        {REASON_ID: "AUTH from a client that did not CONNECT with an Authentication Method"},
    )


def test_password_connects_are_unchanged_by_a_method_plugin() -> None:
    # The plugin IGNOREs requests without its method; allow_anonymous decides as before.
    plugin = EchoTwoSteps()
    allowed = Channel("p", hooks_with(plugin), ChannelSettings())
    actions = allowed.handle_in([Connect(client_id="c1", protocol_version=5)], 20)
    assert decoded(actions[0]) == ConnAck(
        False, ReasonCode.NOT_AUTHORIZED, {REASON_ID: "authentication failed: not_authorized"}
    )
    assert plugin.requests[0].method is None


# ----- the SCRAM-SHA-256 plugin through the channel -------------------------------------


def scram_hooks(tmp_path: Path) -> HookBus:
    credentials = tmp_path / "scram"
    credentials.write_text(f"alice:{make_credential(b'correct horse', 4096).encode()}\n")
    plugin = ScramPlugin(
        {"credentials_file": str(credentials)},
        PluginContext(config_dir=tmp_path, node_name="n", worker_id=0, plugin_name="scram"),
    )
    hooks = HookBus(allow_anonymous=False)
    plugin.register(hooks)
    return hooks


def scram_connect(channel: Channel, password: bytes, username: str | None = None) -> list[Any]:
    client = ScramClient("alice", password)
    properties = {METHOD_ID: "SCRAM-SHA-256", DATA_ID: client.first()}
    first = channel.handle_in(
        [Connect(client_id="c1", protocol_version=5, properties=properties, username=username)],
        40,
    )
    server_first = decoded(first[0])
    assert server_first.reason_code == ReasonCode.CONTINUE_AUTHENTICATION, server_first
    final = client.final(server_first.properties[DATA_ID])
    actions = channel.handle_in(
        [auth(ReasonCode.CONTINUE_AUTHENTICATION, final, "SCRAM-SHA-256")], 40
    )
    opened = [a for a in actions if type(a) is OpenSession]
    if opened:
        client.verify(opened[0].connack_properties[DATA_ID])  # the server knows the key
    return actions


def test_scram_right_password_connects_as_the_scram_user(tmp_path: Path) -> None:
    channel = new_channel(scram_hooks(tmp_path))
    actions = scram_connect(channel, b"correct horse")
    (opened,) = [a for a in actions if type(a) is OpenSession]
    assert opened.client.username == "alice"  # the proven identity becomes the user name
    assert channel.phase is Phase.CONNECTING


def test_scram_wrong_password_is_refused(tmp_path: Path) -> None:
    channel = new_channel(scram_hooks(tmp_path))
    actions = scram_connect(channel, b"wrong horse")
    assert decoded(actions[0]) == ConnAck(
        False,
        ReasonCode.BAD_USER_NAME_OR_PASSWORD,
        {REASON_ID: "authentication failed: bad_credentials"},
    )
    assert channel.phase is Phase.CLOSED


def test_scram_user_must_match_the_connect_user_name(tmp_path: Path) -> None:
    channel = new_channel(scram_hooks(tmp_path))
    client = ScramClient("alice", b"correct horse")
    properties = {METHOD_ID: "SCRAM-SHA-256", DATA_ID: client.first()}
    actions = channel.handle_in(
        [Connect(client_id="c1", protocol_version=5, properties=properties, username="bob")], 40
    )
    connack = decoded(actions[0])
    assert connack.reason_code == ReasonCode.NOT_AUTHORIZED
    assert connack.properties[REASON_ID].startswith("authentication failed")
