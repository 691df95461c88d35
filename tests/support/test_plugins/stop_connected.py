"""Test plugin on client.connected: returns `Stop()` for clients whose id starts with `prefix`.

Options: `prefix` and `priority` (default 10). Callbacks of lower priority on
client.connected (e.g. the recorder at 0) then never see those clients connect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hooks.decisions import Stop
from hooks.events import ClientConnected
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginContext, parse_options


@dataclass(frozen=True, slots=True)
class Config:
    prefix: str
    priority: int = 10


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        self._config = parse_options(Config, options, self._name)

    def register(self, bus: HookBus) -> None:
        bus.register(
            HookPoint.CLIENT_CONNECTED,
            self.on_connected,
            priority=self._config.priority,
            owner=self._name,
        )

    def on_connected(self, event: ClientConnected) -> Stop | None:
        return Stop() if event.client.client_id.startswith(self._config.prefix) else None

    def close(self) -> None:
        """Nothing to release."""
