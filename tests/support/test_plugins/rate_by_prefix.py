"""Test plugin for client.rate_limit: clients whose id starts with `prefix` get
`messages_rate` PUBLISH packets a second; every other client keeps the configured limits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hooks.events import ClientRateLimit, RateLimits
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginContext, parse_options


@dataclass(frozen=True, slots=True)
class Config:
    prefix: str = "limited-"
    messages_rate: float = 100.0


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        self._config = parse_options(Config, options, self._name)

    def register(self, bus: HookBus) -> None:
        bus.register(HookPoint.CLIENT_RATE_LIMIT, self.limits, owner=self._name)

    def limits(self, event: ClientRateLimit) -> RateLimits | None:
        if event.client.client_id.startswith(self._config.prefix):
            return RateLimits(messages_rate=self._config.messages_rate)
        return None

    def close(self) -> None:
        pass
