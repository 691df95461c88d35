"""Test plugin whose every hook callback, `reload()` and `close()` raise.

It registers on every `HookPoint` at a high priority (option `priority`, default 100), so it
runs first in each chain: the broker must isolate each failure, log it with this plugin's
name and carry on as if the callback had returned IGNORE / left the message unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginContext, parse_options

FAILURE_TEXT = "test plugin failure on purpose"


class PluginCallbackError(RuntimeError):
    """Raised on purpose by every callback of this plugin."""


@dataclass(frozen=True, slots=True)
class Config:
    priority: int = 100


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        self._priority = parse_options(Config, options, self._name).priority

    def register(self, bus: HookBus) -> None:
        for point in HookPoint:
            bus.register(point, self._fail, priority=self._priority, owner=self._name)

    @staticmethod
    def _fail(*_args: object) -> None:
        raise PluginCallbackError(FAILURE_TEXT)

    def reload(self) -> None:
        raise PluginCallbackError(f"{FAILURE_TEXT} (reload)")

    def close(self) -> None:
        raise PluginCallbackError(f"{FAILURE_TEXT} (close)")
