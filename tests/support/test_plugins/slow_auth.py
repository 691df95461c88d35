"""Test plugin on client.authenticate: takes `seconds` to decide (allows) for client ids starting
with `prefix`, as an authentication against a remote service would.

While it waits, the client actor handles nothing else: a client that closes its socket meanwhile
has its connection's end queued behind its own CONNECT.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import gevent

from hooks.decisions import Decision
from hooks.events import AuthenticateRequest
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginContext, parse_options


@dataclass(frozen=True, slots=True)
class Config:
    prefix: str
    seconds: float = 0.3


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        self._config = parse_options(Config, options, self._name)

    def register(self, bus: HookBus) -> None:
        bus.register(HookPoint.CLIENT_AUTHENTICATE, self.on_authenticate, owner=self._name)

    def on_authenticate(self, request: AuthenticateRequest) -> Decision:
        if not request.client.client_id.startswith(self._config.prefix):
            return Decision.IGNORE
        gevent.sleep(self._config.seconds)
        return Decision.ALLOW

    def close(self) -> None:
        """Nothing to release."""
