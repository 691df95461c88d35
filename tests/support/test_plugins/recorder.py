"""Test plugin that appends one JSON line per hook event to the file named by option `path`.

Every hook point is recorded except client.authorize: a callback there answering IGNORE
would turn the broker's "no ACL configured, allow" into "deny". Each line is
`{"point", "client_id", "username", "topic", "qos", "reason", "filters",
"protocol_version", "properties"}` (null when the event has no such field; `properties` are
the MQTT 5 property ids of the event's packet, or of its message, as strings). For message
events `client_id` is the subscriber (delivered, acked, dropped) or the publisher
(message.publish), as in the event sink. Lines are written and flushed one by one (a
blocking write on the broker's loop: acceptable in tests only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from hooks.decisions import Decision
from hooks.events import Message
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginContext, parse_options


@dataclass(frozen=True, slots=True)
class Config:
    path: Path
    priority: int = 0


def summary(point: HookPoint, event: Any) -> dict[str, Any]:
    """The recorded fields of `event` (never the password)."""
    client = getattr(event, "client", None)
    message = event if isinstance(event, Message) else getattr(event, "message", None)
    client_id = getattr(event, "client_id", None)
    if client is not None:
        client_id = client.client_id
    elif isinstance(event, Message):
        client_id = event.publisher
    topic = getattr(event, "topic_filter", None)
    if message is not None:
        topic = message.topic
    reason = getattr(event, "reason", None)
    filters = getattr(event, "filters", None)
    return {
        "point": point.value,
        "client_id": client_id,
        "username": client.username if client is not None else getattr(event, "username", None),
        "topic": topic,
        "qos": getattr(event, "qos", None),
        "reason": reason.value if isinstance(reason, Enum) else reason,
        "filters": [f.topic_filter for f in filters] if filters is not None else None,
        "protocol_version": client.protocol_version if client is not None else None,
        "properties": _property_ids(event, message),
    }


def _property_ids(event: Any, message: Message | None) -> list[str] | None:
    properties = getattr(event, "properties", None)
    if properties is None and message is not None:
        properties = message.properties
    return sorted(f"0x{key:02x}" for key in properties) if properties is not None else None


class Plugin:
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name
        config = parse_options(Config, options, self._name)
        self._priority = config.priority
        self._file: TextIO = context.resolve(config.path).open("a", encoding="utf-8")

    def register(self, bus: HookBus) -> None:
        for point in HookPoint:
            if point is not HookPoint.CLIENT_AUTHORIZE:
                bus.register(
                    point, self._recorder(point), priority=self._priority, owner=self._name
                )

    def _recorder(self, point: HookPoint) -> Callable[[Any], Decision | None]:
        def record(event: Any) -> Decision | None:
            self._file.write(json.dumps(summary(point, event)) + "\n")
            self._file.flush()
            return Decision.IGNORE if point is HookPoint.CLIENT_AUTHENTICATE else None

        return record

    def close(self) -> None:
        self._file.close()
