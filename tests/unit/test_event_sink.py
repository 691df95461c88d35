"""The event-sink plugin: records, atomic rotation, crash recovery, drops and write errors."""

from __future__ import annotations

import dataclasses
import errno
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gevent
import orjson
import pytest

from hooks.events import (
    ClientConnected,
    ClientDisconnected,
    ClientInfo,
    DisconnectReason,
    DropReason,
    Message,
    MessageAcked,
    MessageDelivered,
    MessageDropped,
    SessionSubscribed,
    SessionUnsubscribed,
)
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from plugins.base import PluginConfigError, PluginContext
from plugins.event_sink import Plugin
from spark.event_schema import FIELD_NAMES, SCHEMA_VERSION, SINK_DROPPED
from spark.file_sink import STAGING_DIR

NODE = "node1@127.0.0.1"
WORKER = 3
CLIENT = ClientInfo(
    client_id="pub-1",
    username="alice",
    peer="127.0.0.1:50000",
    protocol_version=4,
    clean_start=True,
    keepalive=60,
)


def _context(config_dir: Path) -> PluginContext:
    return PluginContext(
        config_dir=config_dir, node_name=NODE, worker_id=WORKER, plugin_name="plugins.event_sink"
    )


@pytest.fixture
def make_sink(tmp_path: Path) -> Iterator[Callable[..., tuple[Plugin, HookBus]]]:
    """Build registered sinks writing to tmp_path/events; unclosed ones are closed afterwards."""
    started: list[Plugin] = []

    def make(**options: object) -> tuple[Plugin, HookBus]:
        bus = HookBus()
        sink = Plugin({"directory": "events", **options}, _context(tmp_path))
        sink.register(bus)
        started.append(sink)
        return sink, bus

    yield make
    for sink in started:
        sink.close()


def _published_lines(directory: Path) -> list[dict[str, object]]:
    lines: list[dict[str, object]] = []
    for path in sorted(directory.glob("events-*.json")):
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"{path.name} ends in a partial line"
        lines.extend(orjson.loads(line) for line in data.splitlines())
    return lines


def _wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        gevent.sleep(0.01)


def _message(number: int, **changes: object) -> Message:
    fields: dict[str, object] = {
        "topic": f"sensors/{number % 7}",
        "payload": b"x" * (number % 50),
        "qos": number % 3,
        "publisher": CLIENT.client_id,
        "username": CLIENT.username,
        "message_id": number,
    }
    fields.update(changes)
    return Message(**fields)  # type: ignore[arg-type]


def test_every_hook_event_becomes_one_schema_line(
    make_sink: Callable[..., tuple[Plugin, HookBus]],
) -> None:
    sink, bus = make_sink(payload="utf8")
    message = _message(1, payload=b"hello", timestamp=1_700_000_000.5, retain=True)
    bus.run(HookPoint.CLIENT_CONNECTED, ClientConnected(client=CLIENT, session_present=False))
    assert bus.publish(message) is message
    bus.run(
        HookPoint.MESSAGE_DELIVERED,
        MessageDelivered(client_id="sub-1", username="bob", message=message, qos=0),
    )
    bus.run(
        HookPoint.MESSAGE_ACKED, MessageAcked(client_id="sub-1", username="bob", message=message)
    )
    bus.run(
        HookPoint.MESSAGE_DROPPED,
        MessageDropped(message=message, reason=DropReason.QUEUE_FULL, client_id="sub-2"),
    )
    bus.run(
        HookPoint.SESSION_SUBSCRIBED,
        SessionSubscribed(client_id="sub-1", topic_filter="s/#", qos=1),
    )
    bus.run(
        HookPoint.SESSION_UNSUBSCRIBED, SessionUnsubscribed(client_id="sub-1", topic_filter="s/#")
    )
    bus.run(
        HookPoint.CLIENT_DISCONNECTED,
        ClientDisconnected(client=CLIENT, reason=DisconnectReason.KEEPALIVE_TIMEOUT),
    )
    sink.close()

    lines = _published_lines(sink.directory)
    assert [line["event"] for line in lines] == [
        "client.connected",
        "message.publish",
        "message.delivered",
        "message.acked",
        "message.dropped",
        "session.subscribed",
        "session.unsubscribed",
        "client.disconnected",
    ]
    assert all(tuple(line) == FIELD_NAMES for line in lines)
    assert {(line["node"], line["worker"], line["schema"]) for line in lines} == {
        (NODE, WORKER, SCHEMA_VERSION)
    }
    connected, published, delivered, acked, dropped, subscribed, _, disconnected = lines
    assert (connected["client_id"], connected["username"], connected["peer"]) == (
        "pub-1",
        "alice",
        "127.0.0.1:50000",
    )
    assert published["ts"] == "2023-11-14T22:13:20.500000Z"  # the message's own timestamp
    assert (published["client_id"], published["publisher"], published["payload"]) == (
        "pub-1",
        "pub-1",
        "hello",
    )
    assert (published["topic"], published["qos"], published["retain"]) == ("sensors/1", 1, True)
    assert (published["payload_bytes"], published["message_id"]) == (5, 1)
    # delivered/acked: client_id is the subscriber, publisher stays the publisher
    assert (delivered["client_id"], delivered["username"], delivered["publisher"]) == (
        "sub-1",
        "bob",
        "pub-1",
    )
    assert delivered["qos"] == 0  # the QoS it was delivered with
    assert (acked["client_id"], acked["message_id"]) == ("sub-1", 1)
    assert (dropped["client_id"], dropped["reason"]) == ("sub-2", "queue_full")
    assert (subscribed["topic"], subscribed["qos"]) == ("s/#", 1)
    assert disconnected["reason"] == "keepalive_timeout"
    assert not list((sink.directory / STAGING_DIR).rglob("*.json"))


def test_publish_is_recorded_as_the_other_plugins_left_it(
    make_sink: Callable[..., tuple[Plugin, HookBus]],
) -> None:
    sink, bus = make_sink(events=["message.publish"], payload="base64")
    bus.register(
        HookPoint.MESSAGE_PUBLISH,
        lambda message: dataclasses.replace(message, topic="rewritten/" + message.topic),
        owner="rewriter",
    )
    result = bus.publish(_message(2, payload=b"\x00\xff"))
    sink.close()
    assert result is not None
    assert result.topic == "rewritten/sensors/2"
    [line] = _published_lines(sink.directory)
    assert (line["topic"], line["payload"]) == ("rewritten/sensors/2", "AP8=")


def test_only_configured_events_are_registered(
    make_sink: Callable[..., tuple[Plugin, HookBus]],
) -> None:
    _, bus = make_sink(events=["client.connected"])
    assert bus.has(HookPoint.CLIENT_CONNECTED)
    assert not bus.has(HookPoint.MESSAGE_PUBLISH)
    assert not bus.has(HookPoint.MESSAGE_DELIVERED)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"payload": "hex"}, "'payload'"),
        ({"events": ["message.published"]}, "message.published"),
        ({"events": "message.publish"}, "'events'"),
        ({"queue_size": 0}, "'queue_size'"),
        ({"rotate_bytes": "1MB"}, "'rotate_bytes'"),
        ({"rotate_secs": 3}, "'rotate_secs'"),
    ],
)
def test_bad_options_are_refused_with_the_option_named(
    tmp_path: Path, options: dict[str, object], named: str
) -> None:
    with pytest.raises(PluginConfigError, match=named):
        Plugin(options, _context(tmp_path))


def test_rotation_under_load_publishes_only_whole_files_and_loses_nothing(
    make_sink: Callable[..., tuple[Plugin, HookBus]],
) -> None:
    sink, bus = make_sink(events=["message.publish"], rotate_bytes=16_384, rotate_seconds=0.05)
    seen_incomplete: list[str] = []

    def watch_directory() -> None:  # what a Spark file source would list meanwhile
        while True:
            for path in sink.directory.glob("events-*.json"):
                data = path.read_bytes()
                if not data.endswith(b"\n") or not all(orjson.loads(x) for x in data.splitlines()):
                    seen_incomplete.append(path.name)
            gevent.sleep(0.002)

    watcher = gevent.spawn(watch_directory)
    total = 20_000
    for number in range(total):
        bus.publish(_message(number))
        if number % 500 == 0:
            gevent.sleep(0.001)
    sink.close()
    watcher.kill()

    lines = _published_lines(sink.directory)
    ids = [line["message_id"] for line in lines]
    assert len(ids) == total  # none lost...
    assert set(ids) == set(range(total))  # ...none duplicated
    assert sink.files_published > 5
    assert sink.stats.written == total
    assert seen_incomplete == []
    in_name_order = sorted(sink.directory.glob("events-*.json"), key=lambda path: path.name)
    first_ids = [
        orjson.loads(path.read_bytes().split(b"\n", 1)[0])["message_id"] for path in in_name_order
    ]
    assert first_ids == sorted(first_ids), "file names do not sort in writing order"


def test_staging_left_by_a_crash_is_published_without_its_partial_line(
    make_sink: Callable[..., tuple[Plugin, HookBus]],
) -> None:
    crashed, bus = make_sink(events=["message.publish"], rotate_seconds=3600)
    for number in range(100):
        bus.publish(_message(number))
    _wait_until(lambda: crashed.stats.written == 100)
    assert crashed._writer is not None
    crashed._writer.kill()  # the process dies: no close(), the file stays in staging
    [staged] = list((crashed.directory / STAGING_DIR).rglob("events-*.json"))
    with staged.open("ab") as stream:
        stream.write(b'{"event": "message.publish", "ts": "2023-11-')  # torn last write
    assert list(crashed.directory.glob("events-*.json")) == []

    restarted, bus = make_sink(events=["message.publish"])
    bus.publish(_message(100))
    restarted.close()
    ids = sorted(line["message_id"] for line in _published_lines(restarted.directory))
    assert ids == list(range(101))
    assert not staged.exists()


def test_a_full_queue_drops_and_counts_events_and_reports_them(
    make_sink: Callable[..., tuple[Plugin, HookBus]], caplog: pytest.LogCaptureFixture
) -> None:
    sink, bus = make_sink(events=["message.publish"], queue_size=10)
    for number in range(25):  # no yield: the writer greenlet cannot run meanwhile
        assert bus.publish(_message(number)) is not None  # the MQTT message itself goes on
    assert sink.stats.dropped_queue_full == 15
    with caplog.at_level(logging.WARNING, logger="plugins.event_sink"):
        sink.close()
    lines = _published_lines(sink.directory)
    assert [line["message_id"] for line in lines if line["event"] == "message.publish"] == list(
        range(10)
    )
    reports = [line for line in lines if line["event"] == SINK_DROPPED]
    assert [(r["reason"], r["dropped"]) for r in reports] == [("queue_full", 15)]
    assert "dropped 15 events: its queue was full (queue_size=10)" in caplog.text


def test_an_unwritable_directory_is_logged_retried_and_counted(
    make_sink: Callable[..., tuple[Plugin, HookBus]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    blocker = tmp_path / "events"
    blocker.write_text("a file where the event directory should be")
    with caplog.at_level(logging.ERROR, logger="plugins.event_sink"):
        sink, bus = make_sink(events=["message.publish"], queue_size=50, retry_seconds=0.1)
        for number in range(20):
            bus.publish(_message(number))
        gevent.sleep(0.05)
        for number in range(20, 100):  # the directory is still broken
            bus.publish(_message(number))
        assert "event sink cannot write to" in caplog.text
        assert "retrying" in caplog.text
    assert sink._writer is not None
    assert not sink._writer.dead  # the writer survives

    blocker.unlink()  # the operator fixes the directory
    _wait_until(lambda: sink.stats.written > 0)
    sink.close()
    lines = _published_lines(tmp_path / "events")
    written = [line["message_id"] for line in lines if line["event"] == "message.publish"]
    reported = sum(int(line["dropped"]) for line in lines if line["event"] == SINK_DROPPED)  # type: ignore[call-overload]
    stats = sink.stats
    assert len(written) == len(set(written)) == stats.written > 0
    assert stats.written + stats.dropped_queue_full + stats.dropped_write_failed == 100
    assert reported == stats.dropped_queue_full + stats.dropped_write_failed > 0


def test_a_failing_write_loses_only_its_batch_and_the_file_stays_whole(
    make_sink: Callable[..., tuple[Plugin, HookBus]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sink, bus = make_sink(events=["message.publish"], retry_seconds=0.05)
    files = sink._files
    real_write = files.write
    calls = {"n": 0}

    def disk_full_on_second_write(lines: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            staging_file = files._stream  # the open staging file
            assert staging_file is not None
            staging_file.write(lines[: len(lines) // 2])  # part of the batch reached the disk
            staging_file.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(lines)

    monkeypatch.setattr(files, "write", disk_full_on_second_write)
    for batch in range(3):
        for number in range(batch * 10, batch * 10 + 10):
            bus.publish(_message(number))
        _wait_until(
            lambda b=batch: sink.stats.written + sink.stats.dropped_write_failed >= b * 10 + 10
        )
    sink.close()
    lines = _published_lines(sink.directory)
    written = [line["message_id"] for line in lines if line["event"] == "message.publish"]
    assert written == [*range(10), *range(20, 30)]
    assert sink.stats.dropped_write_failed == 10
    assert [
        (line["reason"], line["dropped"]) for line in lines if line["event"] == SINK_DROPPED
    ] == [("write_failed", 10)]
