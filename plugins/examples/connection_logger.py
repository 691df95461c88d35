"""Example plugin: log one line when a client connects and one when it disconnects.

The smallest useful plugin: no options, two notify callbacks. Enable it with

    [[plugins]]
    module = "plugins.examples.connection_logger"
    level = "info"        # optional: the logging level of the lines (default "info")

Both callbacks run in the client's own actor, on the broker's gevent loop: they only format
a log line, which is cheap. A callback that wrote to a slow disk or a remote service would
stall that client (see docs/plugins.md, "Blocking calls").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from hooks.events import ClientConnected, ClientDisconnected
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginConfigError, PluginContext, parse_options

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Config:
    level: str = "info"


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name or __name__
        config = parse_options(Config, options, self._name)
        level = logging.getLevelName(config.level.upper())
        if not isinstance(level, int):
            raise PluginConfigError(
                f"plugin {self._name}: option 'level' must be debug, info, warning or error, "
                f"got {config.level!r}"
            )
        self._level = level

    def register(self, bus: HookBus) -> None:
        bus.register(HookPoint.CLIENT_CONNECTED, self.on_connected, owner=self._name)
        bus.register(HookPoint.CLIENT_DISCONNECTED, self.on_disconnected, owner=self._name)

    def on_connected(self, event: ClientConnected) -> None:
        client = event.client
        logger.log(
            self._level,
            "client %s connected from %s (user %s, protocol level %d, session present %s)",
            client.client_id,
            client.peer,
            client.username,
            client.protocol_version,
            event.session_present,
        )

    def on_disconnected(self, event: ClientDisconnected) -> None:
        logger.log(
            self._level,
            "client %s disconnected from %s: %s",
            event.client.client_id,
            event.client.peer,
            event.reason.value,
        )

    def close(self) -> None:
        """Nothing to release."""
