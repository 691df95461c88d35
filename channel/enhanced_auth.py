"""The state of one connection's MQTT 5.0 enhanced authentication (section 4.12).

A client that puts an Authentication Method in CONNECT authenticates by an exchange of AUTH
packets that the `client.authenticate` hook decides (a plugin that speaks the method, e.g.
`plugins.auth_scram`); the channel (`channel.channel`) runs the exchange:

    CONNECT(method, data) -> [AUTH 0x18 (server) <-> AUTH 0x18 (client)]* -> CONNACK(method, data)

and, later in the connection, a re-authentication the client starts with AUTH 0x19:

    AUTH 0x19 (client) -> [AUTH 0x18 <-> AUTH 0x18]* -> AUTH 0x00 (success) | DISCONNECT

`AuthExchange` holds what the exchange needs between packets: the method, the plugin's
state, and while CONNECT waits for the exchange's end, the CONNECT and its CONNACK
properties. `mismatch` says how an AUTH packet breaks the rules, and `auth_packet` encodes
the server's AUTH.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mqtt.encoder import encode
from mqtt.packets import Auth, Connect
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode

AUTHENTICATION_METHOD = PropertyId.AUTHENTICATION_METHOD
AUTHENTICATION_DATA = PropertyId.AUTHENTICATION_DATA


@dataclass(slots=True)
class AuthExchange:
    method: str
    pending: Connect | None = None  # the CONNECT awaiting the end of the exchange
    connack_properties: dict[int, Any] = field(default_factory=dict)
    state: Any = None  # what the plugin returned with its last AuthContinue
    reauthenticating: bool = False  # a re-authentication (AUTH 0x19) is under way

    def mismatch(self, packet: Auth, expected_reason: int) -> str | None:
        """Why the client's AUTH `packet` is a protocol error here, or None if it is fine."""
        if packet.reason_code != expected_reason:
            return (
                f"AUTH with reason 0x{packet.reason_code:02x} where 0x{expected_reason:02x} "
                "was expected (MQTT 5.0 section 4.12)"
            )
        method = packet.properties.get(AUTHENTICATION_METHOD)
        if method != self.method:
            return (
                f"AUTH with Authentication Method {method!r}, not the CONNECT's "
                f"{self.method!r} [MQTT-4.12.0-5] [MQTT-4.12.1-1]"
            )
        return None


def auth_packet(reason_code: int, method: str, data: bytes | None) -> bytes:
    """The server's AUTH: the method always, the data if there is any [MQTT-4.12.0-5]."""
    properties: dict[int, Any] = {AUTHENTICATION_METHOD: method}
    if data is not None:
        properties[AUTHENTICATION_DATA] = data
    return encode(Auth(reason_code=reason_code, properties=properties), 5)


CONTINUE = ReasonCode.CONTINUE_AUTHENTICATION
REAUTHENTICATE = ReasonCode.RE_AUTHENTICATE
SUCCESS = ReasonCode.SUCCESS
