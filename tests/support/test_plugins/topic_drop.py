"""Test plugin on message.publish: drops every message whose topic starts with `prefix`.

Options: `prefix` and `priority` (default 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hooks.decisions import DROP, Drop
from hooks.events import Message
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginContext, parse_options


@dataclass(frozen=True, slots=True)
class Config:
    prefix: str
    priority: int = 0


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        self._config = parse_options(Config, options, self._name)

    def register(self, bus: HookBus) -> None:
        bus.register(
            HookPoint.MESSAGE_PUBLISH, self.drop, priority=self._config.priority, owner=self._name
        )

    def drop(self, message: Message) -> Drop | None:
        return DROP if message.topic.startswith(self._config.prefix) else None

    def close(self) -> None:
        """Nothing to release."""
