"""Credentials that expire (`AuthResult.expires_at`, a JWT's exp): the channel asks for the
close at that time, and the close is DISCONNECT 0x87 for a 5.0 client, a plain close for
3.1.1 (which has no server DISCONNECT)."""

from __future__ import annotations

import pytest

from channel.actions import End, ExpireCredentials, OpenSession, Send
from channel.channel import Channel, ChannelSettings
from core.reasons import DisconnectReason
from hooks.decisions import AuthResult, Decision
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt.encoder import encode
from mqtt.packets import Connect, Disconnect, Will
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode

EXPIRES = 1_900_000_000.0


def channel_with(result: AuthResult) -> tuple[Channel, list[object]]:
    bus = HookBus(allow_anonymous=False)
    bus.register(HookPoint.CLIENT_AUTHENTICATE, lambda _request: result)
    channel = Channel("127.0.0.1:5000", bus, ChannelSettings())
    connect = Connect(client_id="c1", protocol_version=5, username="u", password=b"token")
    return channel, list(channel.handle_in([connect], 20))


def test_an_expiring_authentication_asks_for_the_close_at_its_time() -> None:
    _channel, actions = channel_with(AuthResult(allowed=True, expires_at=EXPIRES))
    assert any(isinstance(action, OpenSession) for action in actions)
    assert ExpireCredentials(EXPIRES) in actions


def test_credentials_that_do_not_expire_ask_for_nothing() -> None:
    _channel, actions = channel_with(AuthResult(allowed=True))
    assert not any(isinstance(action, ExpireCredentials) for action in actions)


def test_a_refused_will_asks_for_no_close_time() -> None:
    bus = HookBus()
    bus.register(HookPoint.CLIENT_AUTHENTICATE, lambda _r: AuthResult(True, expires_at=EXPIRES))
    bus.register(HookPoint.CLIENT_AUTHORIZE, lambda _request: Decision.DENY)
    channel = Channel("127.0.0.1:5000", bus, ChannelSettings())
    will = Will("w", b"x")
    actions = channel.handle_in([Connect(client_id="c1", protocol_version=5, will=will)], 20)
    assert not any(isinstance(action, ExpireCredentials) for action in actions)


@pytest.mark.parametrize("version", [4, 5])
def test_the_expiry_close_is_0x87_for_5_0_and_a_plain_close_for_3_1_1(version: int) -> None:
    channel = Channel("127.0.0.1:5000", HookBus(), ChannelSettings())
    channel.handle_in([Connect(client_id="c1", protocol_version=version)], 20)
    channel.session_attached(session_present=False)
    actions = channel.close(DisconnectReason.CREDENTIALS_EXPIRED)
    sent = [action for action in actions if isinstance(action, Send)]
    if version == 5:
        disconnect = Disconnect(
            ReasonCode.NOT_AUTHORIZED, {PropertyId.REASON_STRING: "credentials expired"}
        )
        assert sent == [Send(encode(disconnect, 5))]
    else:
        assert sent == []
    assert actions[-1] == End(DisconnectReason.CREDENTIALS_EXPIRED, True)
