"""Test plugin on message.publish: moves topics from one prefix to another.

Options: `from_prefix`, `to_prefix`, `priority` (default 0) and `stop_level` (default ""):
when the rewritten topic has a level equal to `stop_level`, the callback returns
`Stop(rewritten message)`, so plugins after it in the chain do not see the message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from hooks.decisions import Stop
from hooks.events import Message
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginContext, parse_options


@dataclass(frozen=True, slots=True)
class Config:
    from_prefix: str
    to_prefix: str
    priority: int = 0
    stop_level: str = ""


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        self._config = parse_options(Config, options, self._name)

    def register(self, bus: HookBus) -> None:
        bus.register(
            HookPoint.MESSAGE_PUBLISH,
            self.rewrite,
            priority=self._config.priority,
            owner=self._name,
        )

    def rewrite(self, message: Message) -> Message | Stop | None:
        config = self._config
        if not message.topic.startswith(config.from_prefix):
            return None
        topic = config.to_prefix + message.topic[len(config.from_prefix) :]
        rewritten = dataclasses.replace(message, topic=topic)
        if config.stop_level and config.stop_level in topic.split("/"):
            return Stop(rewritten)
        return rewritten

    def close(self) -> None:
        """Nothing to release."""
