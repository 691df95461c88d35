"""Event-sink plugin: writes hook events as JSON lines for the Spark jobs (docs/events.md).

    [[plugins]]
    module = "plugins.event_sink"
    directory = "events"          # relative to the config file's directory
    events = ["client.connected", "message.publish"]   # default: all of EVENT_POINTS
    rotate_seconds = 10           # publish the current file after this long...
    rotate_bytes = 67108864       # ...or this size
    payload = "none"              # "none" (size only) | "base64" | "utf8"
    queue_size = 100000           # events waiting for the writer; beyond, they are dropped
    retry_seconds = 5             # wait after a write error before trying the directory again

Hot path: a callback appends `(event name, event object, timestamp)` to a bounded deque and
wakes the writer greenlet; it never touches the disk. Event objects are frozen, so keeping a
reference is safe. When the deque is full the event is dropped and counted, never the MQTT
traffic. The writer greenlet turns queued events into lines (spark.event_schema), writes them
in batches (one write per batch) through spark.file_sink.RotatingFileSink and rotates files.
Losses (queue full, write errors) are logged at most once per DROP_REPORT_SECONDS and written
as `sink.dropped` events. A write error (disk full, directory gone or read-only) is logged with
what to do; the writer keeps running and retries after `retry_seconds` while events queue up.

Timestamps: message.publish uses the message's own `timestamp`; other events have none and use
the time of the hook call. The bus runs on one gevent loop, so the deque needs no lock.
"""

from __future__ import annotations

import base64
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import gevent
import gevent.event

from hooks.events import (
    ClientDisconnected,
    ClientInfo,
    Message,
    MessageAcked,
    MessageDelivered,
    MessageDropped,
    SessionSubscribed,
)
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginConfigError, PluginContext, parse_options
from spark.event_schema import SINK_DROPPED, event_record
from spark.file_sink import RotatingFileSink
from spark.json_lines import to_json_line

logger = logging.getLogger(__name__)

EVENT_POINTS: Final = (
    HookPoint.CLIENT_CONNECTED,
    HookPoint.CLIENT_DISCONNECTED,
    HookPoint.MESSAGE_PUBLISH,
    HookPoint.MESSAGE_DELIVERED,
    HookPoint.MESSAGE_ACKED,
    HookPoint.MESSAGE_DROPPED,
    HookPoint.SESSION_SUBSCRIBED,
    HookPoint.SESSION_UNSUBSCRIBED,
)
PAYLOAD_MODES: Final = ("none", "base64", "utf8")
# Observers: first in notify chains (a Stop further down cannot hide an event from the sink),
# last in message.publish (the sink records the message as the other plugins left it).
NOTIFY_PRIORITY: Final = 1000
PUBLISH_PRIORITY: Final = -1000
BATCH_EVENTS: Final = 4096  # events per write; the writer yields to the hub between batches
DROP_REPORT_SECONDS: Final = 1.0
CLOSE_TIMEOUT_SECONDS: Final = 10.0
QUEUE_FULL: Final = "queue_full"
WRITE_FAILED: Final = "write_failed"


@dataclass(frozen=True, slots=True)
class EventSinkConfig:
    """The plugin's options except `events` (a list, checked by `_event_points`)."""

    directory: Path = Path("events")
    rotate_seconds: float = 10.0
    rotate_bytes: int = 64 * 1024 * 1024
    payload: str = "none"
    queue_size: int = 100_000
    retry_seconds: float = 5.0


@dataclass(slots=True)
class SinkStats:
    """Counters since start: events written to files and events lost, by cause."""

    written: int = 0
    dropped_queue_full: int = 0
    dropped_write_failed: int = 0


def _parse_config(options: Mapping[str, object], plugin: str) -> EventSinkConfig:
    scalar_options = {key: value for key, value in options.items() if key != "events"}
    config = parse_options(EventSinkConfig, scalar_options, plugin)
    if config.payload not in PAYLOAD_MODES:
        raise PluginConfigError(
            f"plugin {plugin}: option 'payload' must be one of {', '.join(PAYLOAD_MODES)}, "
            f"got {config.payload!r}"
        )
    for name in ("rotate_seconds", "rotate_bytes", "queue_size", "retry_seconds"):
        if getattr(config, name) <= 0:
            raise PluginConfigError(f"plugin {plugin}: option {name!r} must be positive")
    return config


def _event_points(options: Mapping[str, object], plugin: str) -> tuple[HookPoint, ...]:
    names = options.get("events")
    if names is None:
        return EVENT_POINTS
    known = {point.value: point for point in EVENT_POINTS}
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise PluginConfigError(f"plugin {plugin}: option 'events' must be a list of strings")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise PluginConfigError(
            f"plugin {plugin}: option 'events' has unknown event(s) {', '.join(unknown)}; "
            f"known: {', '.join(known)}"
        )
    return tuple(known[name] for name in dict.fromkeys(names))


class _RecordBuilder:
    """Turns a queued hook event into an event_schema record."""

    def __init__(self, node: str, worker: int, payload_mode: str) -> None:
        self._node = node
        self._worker = worker
        self._payload_mode = payload_mode
        self._builders: dict[str, Callable[[Any], dict[str, Any]]] = {
            HookPoint.CLIENT_CONNECTED.value: lambda e: self._client(e.client),
            HookPoint.CLIENT_DISCONNECTED.value: self._disconnected,
            HookPoint.MESSAGE_PUBLISH.value: lambda m: self._message(m, m.publisher),
            HookPoint.MESSAGE_DELIVERED.value: self._delivered,
            HookPoint.MESSAGE_ACKED.value: self._acked,
            HookPoint.MESSAGE_DROPPED.value: self._dropped,
            HookPoint.SESSION_SUBSCRIBED.value: self._subscribed,
            HookPoint.SESSION_UNSUBSCRIBED.value: lambda e: {
                "client_id": e.client_id,
                "topic": e.topic_filter,
            },
        }

    def build(self, kind: str, event: Any, ts: float) -> dict[str, object]:
        fields = self._builders[kind](event)
        return event_record(kind, ts, node=self._node, worker=self._worker, **fields)

    def sink_dropped(self, reason: str, count: int, ts: float) -> dict[str, object]:
        return event_record(
            SINK_DROPPED, ts, node=self._node, worker=self._worker, reason=reason, dropped=count
        )

    @staticmethod
    def _client(client: ClientInfo) -> dict[str, Any]:
        return {"client_id": client.client_id, "username": client.username, "peer": client.peer}

    def _disconnected(self, event: ClientDisconnected) -> dict[str, Any]:
        return {**self._client(event.client), "reason": event.reason.value}

    def _message(self, message: Message, client_id: str | None) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "client_id": client_id,
            "username": message.username,
            "topic": message.topic,
            "qos": message.qos,
            "retain": message.retain,
            "payload_bytes": len(message.payload),
            "message_id": message.message_id,
            "publisher": message.publisher,
        }
        if self._payload_mode == "base64":
            fields["payload"] = base64.b64encode(message.payload).decode("ascii")
        elif self._payload_mode == "utf8":
            fields["payload"] = message.payload.decode("utf-8", errors="replace")
        return fields

    def _delivered(self, event: MessageDelivered) -> dict[str, Any]:
        fields = self._message(event.message, event.client_id)
        return {**fields, "username": event.username, "qos": event.qos}

    def _acked(self, event: MessageAcked) -> dict[str, Any]:
        return {**self._message(event.message, event.client_id), "username": event.username}

    def _dropped(self, event: MessageDropped) -> dict[str, Any]:
        return {**self._message(event.message, event.client_id), "reason": event.reason.value}

    @staticmethod
    def _subscribed(event: SessionSubscribed) -> dict[str, Any]:
        return {"client_id": event.client_id, "topic": event.topic_filter, "qos": event.qos}


class Plugin:
    """Queues hook events and writes them to rotating files from one writer greenlet."""

    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name or __name__
        self._config = _parse_config(options, self._name)
        self._points = _event_points(options, self._name)
        self._files = RotatingFileSink(
            context.resolve(self._config.directory),
            node=context.node_name,
            worker=context.worker_id,
            rotate_seconds=self._config.rotate_seconds,
            rotate_bytes=self._config.rotate_bytes,
        )
        self._records = _RecordBuilder(context.node_name, context.worker_id, self._config.payload)
        self._queue: deque[tuple[str, Any, float]] = deque()
        self._wakeup = gevent.event.Event()
        self._writer: gevent.Greenlet[..., Any] | None = None
        self._stopping = gevent.event.Event()  # set by close(): ends a retry pause early
        self._closing = False
        self._recovered = False
        self._retry_at = 0.0
        self._unreported = {QUEUE_FULL: 0, WRITE_FAILED: 0}
        self._last_drop_report = float("-inf")
        self.stats = SinkStats()

    @property
    def directory(self) -> Path:
        return self._files.directory

    @property
    def files_published(self) -> int:
        return self._files.files_published

    def register(self, bus: HookBus) -> None:
        for point in self._points:
            if point is HookPoint.MESSAGE_PUBLISH:
                bus.register(point, self._on_publish, priority=PUBLISH_PRIORITY, owner=self._name)
            else:
                notify = self._notifier(point.value)
                bus.register(point, notify, priority=NOTIFY_PRIORITY, owner=self._name)
        self._writer = gevent.spawn(self._run)

    def close(self) -> None:
        """Stop the writer, write what is queued and publish the current file."""
        self._closing = True
        self._stopping.set()
        self._wakeup.set()
        if self._writer is not None:
            self._writer.join(timeout=CLOSE_TIMEOUT_SECONDS)
            self._writer.kill()
        self._retry_at = 0.0
        self._cycle()
        try:
            self._files.rotate()
        except OSError as error:
            logger.error(
                "event sink could not publish its last file from %s at shutdown (%s); it is "
                "recovered at the next start",
                self._files.staging,
                error,
            )
        if self._queue:
            self._count_lost(WRITE_FAILED, len(self._queue))
            self._queue.clear()
        logger.info(
            "event sink closed: %d events written, %d dropped (queue full), %d lost (write errors)",
            self.stats.written,
            self.stats.dropped_queue_full,
            self.stats.dropped_write_failed,
        )

    # -- hot path: hook callbacks -------------------------------------------------------------

    def _enqueue(self, kind: str, event: object, ts: float) -> None:
        if len(self._queue) >= self._config.queue_size:
            self.stats.dropped_queue_full += 1
            self._unreported[QUEUE_FULL] += 1
            return
        self._queue.append((kind, event, ts))
        if not self._wakeup.is_set():
            self._wakeup.set()

    def _on_publish(self, message: Message) -> None:
        self._enqueue(HookPoint.MESSAGE_PUBLISH.value, message, message.timestamp)

    def _notifier(self, kind: str) -> Callable[[object], None]:
        def on_event(event: object) -> None:
            self._enqueue(kind, event, time.time())

        on_event.__qualname__ = f"EventSink.on_{kind.replace('.', '_')}"
        return on_event

    # -- writer greenlet -----------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing:
            pause = self._retry_at - time.time()
            if pause > 0:  # the directory failed: let events queue up (or drop) meanwhile
                self._stopping.wait(pause)
                continue
            self._wakeup.wait(self._wait_seconds())
            self._wakeup.clear()
            if not self._closing:
                self._cycle()

    def _wait_seconds(self) -> float | None:
        now = time.time()
        deadlines = [self._files.seconds_until_rotation()]
        if any(self._unreported.values()):
            deadlines.append(max(0.0, self._last_drop_report + DROP_REPORT_SECONDS - now))
        known = [deadline for deadline in deadlines if deadline is not None]
        return min(known) if known else None

    def _cycle(self) -> None:
        """Write everything queued, report drops, rotate if due; never raises."""
        if time.time() < self._retry_at:
            return
        try:
            if not self._recovered:
                self._files.recover_staging()
                self._recovered = True
            self._write_batch()
            while self._queue:
                if not self._closing:
                    gevent.sleep(0)
                self._write_batch()
            if self._files.rotation_due():
                self._files.rotate()
        except OSError as error:
            self._write_failed(error)
        except Exception:
            logger.exception("event sink writer failed unexpectedly; it keeps running")

    def _write_batch(self) -> None:
        now = time.time()
        reports = self._due_drop_reports(now)
        count = min(len(self._queue), BATCH_EVENTS)
        if not count and not reports:
            return
        items = [self._queue.popleft() for _ in range(count)]
        lines = [to_json_line(self._records.sink_dropped(r, n, now)) for r, n in reports]
        try:
            lines.extend(to_json_line(self._records.build(*item)) for item in items)
            self._files.write(b"".join(lines))
        except OSError:
            self._count_lost(WRITE_FAILED, count)
            raise
        except Exception:
            self._count_lost(WRITE_FAILED, count)
            logger.exception("event sink could not encode %d events; they are dropped", count)
            return
        self.stats.written += count
        for reason, dropped in reports:
            self._unreported[reason] -= dropped
        if reports:
            self._last_drop_report = now
            self._log_drops(reports)
        if self._files.rotation_due():
            self._files.rotate()

    def _due_drop_reports(self, now: float) -> list[tuple[str, int]]:
        if now < self._last_drop_report + DROP_REPORT_SECONDS and not self._closing:
            return []
        return [(reason, count) for reason, count in self._unreported.items() if count]

    def _log_drops(self, reports: list[tuple[str, int]]) -> None:
        for reason, count in reports:
            if reason == QUEUE_FULL:
                logger.warning(
                    "event sink dropped %d events: its queue was full (queue_size=%d); the "
                    "writer cannot keep up: raise queue_size, turn payloads off, or check %s",
                    count,
                    self._config.queue_size,
                    self._files.directory,
                )
            else:
                logger.warning(
                    "event sink lost %d events to write errors in %s", count, self._files.directory
                )

    def _count_lost(self, reason: str, count: int) -> None:
        self._unreported[reason] += count
        if reason == QUEUE_FULL:
            self.stats.dropped_queue_full += count
        else:
            self.stats.dropped_write_failed += count

    def _write_failed(self, error: OSError) -> None:
        self._files.discard_unwritten()
        self._recovered = False
        self._retry_at = time.time() + self._config.retry_seconds
        logger.error(
            "event sink cannot write to %s: %s; events are counted as lost until it is "
            "writable again (free disk space or fix the directory's permissions); retrying "
            "in %.1f s",
            self._files.directory,
            error,
            self._config.retry_seconds,
        )
