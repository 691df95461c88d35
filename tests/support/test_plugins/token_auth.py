"""Test plugin: a one-step enhanced authentication method "TOKEN".

A CONNECT with Authentication Method "TOKEN" is accepted at once when its Authentication
Data is the plugin's `token` (CONNACK carries b"token accepted" back), and refused with
BAD_CREDENTIALS otherwise; every other request is IGNOREd. paho-mqtt cannot answer AUTH
packets, so this is the method a paho client can complete.

Both answers carry User Properties for the CONNACK (`AuthResult.user_properties`): an
acceptance ("granted-by", "token_auth") followed by the CONNECT's own User Properties named
"echo" (plugins see them in `request.client.properties`), a refusal ("hint", ...).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from hooks.decisions import AuthFailure, AuthResult, Decision
from hooks.events import AuthenticateRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt.properties import PropertyId
from plugins.base import PluginContext, parse_options


@dataclass(frozen=True, slots=True)
class Config:
    token: str


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        self._token = parse_options(Config, options, self._name).token.encode()

    def register(self, bus: HookBus) -> None:
        bus.register(HookPoint.CLIENT_AUTHENTICATE, self.on_authenticate, owner=self._name)

    def on_authenticate(self, request: AuthenticateRequest) -> Decision | AuthResult:
        if request.method != "TOKEN":
            return Decision.IGNORE
        if hmac.compare_digest(request.data or b"", self._token):
            sent = request.client.properties.get(PropertyId.USER_PROPERTY, [])
            echoed = tuple((name, value) for name, value in sent if name == "echo")
            return AuthResult(
                allowed=True,
                data=b"token accepted",
                user_properties=(("granted-by", "token_auth"), *echoed),
            )
        return AuthResult(
            allowed=False,
            reason=AuthFailure.BAD_CREDENTIALS,
            user_properties=(("hint", "ask the operator for a new token"),),
        )

    def close(self) -> None:
        """Nothing to release."""
