"""Test plugin: a one-step enhanced authentication method "TOKEN".

A CONNECT with Authentication Method "TOKEN" is accepted at once when its Authentication
Data is the plugin's `token` (CONNACK carries b"token accepted" back), and refused with
BAD_CREDENTIALS otherwise; every other request is IGNOREd. paho-mqtt cannot answer AUTH
packets, so this is the method a paho client can complete.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from hooks.decisions import AUTH_BAD_CREDENTIALS, AuthResult, Decision
from hooks.events import AuthenticateRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
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
            return AuthResult(allowed=True, data=b"token accepted")
        return AUTH_BAD_CREDENTIALS

    def close(self) -> None:
        """Nothing to release."""
