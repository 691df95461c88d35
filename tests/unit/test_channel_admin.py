"""The channel's two operations hooks, in-process: a banned CONNECT is refused with CONNACK
0x8A (3.1.1: 0x05), and an operator's close sends a 5.0 client DISCONNECT 0x98 and still
publishes the will [MQTT-3.1.2-8]."""

from __future__ import annotations

from typing import Any

import pytest

from channel.actions import End, OpenSession, Publish, Send
from channel.channel import Channel, ChannelSettings, Phase
from core.client import ClientInfo
from core.reasons import DisconnectReason
from hooks.hook_bus import HookBus
from mqtt.encoder import encode
from mqtt.packets import ConnAck, Connect, Disconnect, Will
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode


def banning(*client_ids: str) -> Any:
    seen: list[ClientInfo] = []

    def admit(client: ClientInfo) -> str | None:
        seen.append(client)
        return "banned (test)" if client.client_id in client_ids else None

    admit.seen = seen  # type: ignore[attr-defined]
    return admit


@pytest.mark.parametrize(
    ("version", "connack"),
    [
        # 5.0: the ban's text as Reason String [MQTT-3.2.2-19]; 3.x: the return code alone
        (5, ConnAck(False, ReasonCode.BANNED, {PropertyId.REASON_STRING: "banned (test)"})),
        (4, ConnAck(False, 0x05)),
        (3, ConnAck(False, 0x05)),
    ],
)
def test_a_banned_client_gets_connack_banned(version: int, connack: ConnAck) -> None:
    admit = banning("bad")
    channel = Channel("10.1.2.3:5000", HookBus(), ChannelSettings(admit=admit))
    actions = channel.handle_in([Connect(client_id="bad", protocol_version=version)], 20)
    assert actions[0] == Send(encode(connack, version))
    assert End(DisconnectReason.NOT_AUTHORIZED, False) in actions
    assert channel.phase is Phase.CLOSED
    assert not any(isinstance(action, OpenSession) for action in actions)
    assert admit.seen[0].peer == "10.1.2.3:5000"


def test_an_admitted_client_opens_its_session() -> None:
    admit = banning("bad")
    channel = Channel("10.1.2.3:5000", HookBus(), ChannelSettings(admit=admit))
    actions = channel.handle_in([Connect(client_id="good", protocol_version=5, username="u")], 20)
    assert any(isinstance(action, OpenSession) for action in actions)
    assert (admit.seen[0].client_id, admit.seen[0].username) == ("good", "u")


def connected(version: int, will: Will | None = None) -> Channel:
    channel = Channel("127.0.0.1:5000", HookBus(), ChannelSettings())
    channel.handle_in([Connect(client_id="c1", protocol_version=version, will=will)], 20)
    channel.session_attached(session_present=False)
    return channel


def test_an_operators_close_sends_disconnect_0x98_to_a_5_0_client_and_the_will() -> None:
    channel = connected(5, Will("wills/c1", b"bye"))
    actions = channel.close(DisconnectReason.ADMINISTRATIVE_ACTION, "(test)")
    disconnect = encode(
        Disconnect(
            ReasonCode.ADMINISTRATIVE_ACTION,
            {PropertyId.REASON_STRING: "administrative action: test"},
        ),
        5,
    )
    assert actions[0] == Send(disconnect)
    published = [action for action in actions if isinstance(action, Publish)]
    assert [m.topic for m in published[0].messages] == ["wills/c1"]
    assert actions[-1] == End(DisconnectReason.ADMINISTRATIVE_ACTION, True)


def test_an_operators_close_of_a_3_1_1_client_sends_nothing_but_still_fires_the_will() -> None:
    channel = connected(4, Will("wills/c1", b"bye"))
    actions = channel.close(DisconnectReason.ADMINISTRATIVE_ACTION)
    assert not any(isinstance(action, Send) for action in actions)
    assert any(isinstance(action, Publish) for action in actions)
    assert actions[-1] == End(DisconnectReason.ADMINISTRATIVE_ACTION, True)


def test_other_server_closes_send_their_own_reason_code() -> None:
    channel = connected(5)
    actions = channel.close(DisconnectReason.SERVER_SHUTDOWN)
    shutdown = encode(
        Disconnect(
            ReasonCode.SERVER_SHUTTING_DOWN, {PropertyId.REASON_STRING: "server shutting down"}
        ),
        5,
    )
    assert actions == [Send(shutdown), End(DisconnectReason.SERVER_SHUTDOWN, True)]
