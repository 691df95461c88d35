"""The hook bus in a running broker: which points fire, priorities, Stop, and failing plugins.

The test plugins live in tests/support/test_plugins and are loaded by the broker subprocess
through `[[plugins]]` like any other plugin:
- `recorder` writes one JSON line per hook event; a simple paho session must produce every
  hook point of docs/plugins.md with the right client ids and topics;
- `stop_connected` (priority 10, listed after the recorder at 0) returns Stop() on
  client.connected, so the recorder never sees those connects: priority beats listing order;
- `topic_rewrite` (priority 10) and `topic_drop` (priority 5, listed first) act on
  message.publish; the subscriber sees the rewritten topic, drops apply to the rewritten
  topic, and `Stop(message)` skips the drop;
- `raising` fails in every callback, reload() and close(): clients are unaffected and the
  log names the plugin.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mqtt.packets import Disconnect, PubAck, PubComp, Publish, PubRec, PubRel
from mqtt.reason_codes import SUBACK_FAILURE_V311
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import (
    PahoCollector,
    connect_raw,
    expect_publish,
    subscribe_raw,
    unique,
)
from tests.support.test_plugins.raising import FAILURE_TEXT

Event = dict[str, Any]
RECORDER = "tests.support.test_plugins.recorder"
RAISING = "tests.support.test_plugins.raising"
RECORDER_CONFIG = f"""\
[store]
kind = "memory"
[[plugins]]
module = "{RECORDER}"
path = "events.jsonl"
[[plugins]]
module = "tests.support.test_plugins.stop_connected"
prefix = "hidden-"
priority = 10
"""
PUBLISH_CHAIN_CONFIG = """\
[store]
kind = "memory"
[[plugins]]
module = "tests.support.test_plugins.topic_drop"
prefix = "out/secret/"
priority = 5
[[plugins]]
module = "tests.support.test_plugins.topic_rewrite"
from_prefix = "in/"
to_prefix = "out/"
priority = 10
stop_level = "final"
"""
RAISING_CONFIG = f"""\
[store]
kind = "memory"
[[plugins]]
module = "{RAISING}"
[[plugins]]
module = "plugins.acl_file"
acl_file = "acl"
"""
LOG_LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<logger>\S+): (?P<text>.*)$")


# ----- the recorder -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded_broker(
    tmp_path_factory: pytest.TempPathFactory, workers: int
) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("recorder"), RECORDER_CONFIG) as broker:
        yield broker


def recorded(broker: BrokerProcess) -> list[Event]:
    """The complete lines the recorder wrote so far (a line being written is left out)."""
    path = broker.log_path.parent / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n")[:-1]]


def wait_for_events(
    broker: BrokerProcess, done: Callable[[list[Event]], bool], timeout: float = 5.0
) -> list[Event]:
    deadline = time.monotonic() + timeout
    while True:
        events = recorded(broker)
        if done(events):
            return events
        if time.monotonic() >= deadline:
            raise AssertionError(f"recorded events incomplete after {timeout} s: {events}")
        time.sleep(0.02)


def terminated(*client_ids: str) -> Callable[[list[Event]], bool]:
    """True once session.terminated was recorded for every one of `client_ids`."""

    def done(events: list[Event]) -> bool:
        ended = {e["client_id"] for e in events if e["point"] == "session.terminated"}
        return ended >= set(client_ids)

    return done


def points_of(events: list[Event], client_id: str) -> list[str]:
    return [e["point"] for e in events if e["client_id"] == client_id]


def recorded_as(events: list[Event], point: str, client_id: str) -> list[Event]:
    return [e for e in events if e["point"] == point and e["client_id"] == client_id]


def one(events: list[Event], point: str, client_id: str) -> Event:
    matching = recorded_as(events, point, client_id)
    assert len(matching) == 1, (point, client_id, events)
    return matching[0]


def before(points: list[str], first: str, second: str) -> bool:
    return points.index(first) < points.index(second)


def test_hook_points_fire_for_a_paho_session(recorded_broker: BrokerProcess) -> None:
    sub_id, pub_id = unique("rec-sub"), unique("rec-pub")
    topic_filter = f"live/{sub_id}/#"
    topic = f"live/{sub_id}/temperature"
    subscriber = PahoCollector(recorded_broker, sub_id)
    assert subscriber.subscribe(topic_filter, 1) == [1]
    publisher = PahoCollector(recorded_broker, pub_id)
    publisher.publish(topic, b"21.5", qos=1)
    message = subscriber.next_message()
    assert (message.topic, message.payload, message.qos) == (topic, b"21.5", 1)
    # paho's network thread sends the PUBACK after on_message: wait for it before DISCONNECT.
    wait_for_events(
        recorded_broker, lambda events: bool(recorded_as(events, "message.acked", sub_id))
    )
    publisher.close()
    subscriber.close()
    events = wait_for_events(recorded_broker, terminated(sub_id, pub_id))

    for client_id in (sub_id, pub_id):
        points = points_of(events, client_id)
        for point in ("client.connect", "client.authenticate", "client.connected"):
            assert one(events, point, client_id)["username"] is None
        assert before(points, "client.connect", "client.authenticate")
        assert before(points, "client.authenticate", "client.connected")
        one(events, "session.created", client_id)
        assert one(events, "client.disconnected", client_id)["reason"] == "client_disconnect"
        assert one(events, "session.terminated", client_id)["reason"] == "clean_session"

    sub_points = points_of(events, sub_id)
    assert one(events, "client.subscribe", sub_id)["filters"] == [topic_filter]
    subscribed = one(events, "session.subscribed", sub_id)
    assert (subscribed["topic"], subscribed["qos"]) == (topic_filter, 1)
    assert before(sub_points, "client.subscribe", "session.subscribed")
    delivered = one(events, "message.delivered", sub_id)
    assert (delivered["topic"], delivered["qos"]) == (topic, 1)
    assert one(events, "message.acked", sub_id)["topic"] == topic  # QoS 1: PUBACK from paho
    assert before(sub_points, "message.delivered", "message.acked")

    published = one(events, "message.publish", pub_id)
    assert (published["topic"], published["qos"]) == (topic, 1)
    assert "message.delivered" not in points_of(events, pub_id)
    assert "message.publish" not in sub_points
    assert not [e for e in events if e["point"] == "message.dropped" and e["topic"] == topic]


def test_stop_from_a_higher_priority_plugin_hides_client_connected(
    recorded_broker: BrokerProcess,
) -> None:
    hidden_id, shown_id = unique("hidden-"), unique("shown")
    for client_id in (hidden_id, shown_id):
        client = connect_raw(recorded_broker, client_id)
        client.send(Disconnect())
        assert client.is_closed_by_broker(3)
        client.close()
    events = wait_for_events(recorded_broker, terminated(hidden_id, shown_id))
    hidden = points_of(events, hidden_id)
    assert "client.connected" not in hidden  # stop_connected (priority 10) returned Stop()
    assert {"client.connect", "client.authenticate", "client.disconnected"} <= set(hidden)
    one(events, "client.connected", shown_id)


# ----- message.publish: priorities, DROP and Stop ---------------------------------------------


def test_publish_chain_runs_by_priority_and_stop_skips_the_rest(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(PUBLISH_CHAIN_CONFIG)
    subscriber = connect_raw(broker, unique("chain-sub"))
    assert subscribe_raw(subscriber, 1, ("in/#", 0), ("out/#", 0)).reason_codes == [0, 0]
    publisher = connect_raw(broker, unique("chain-pub"))
    sent = [
        "in/public/a",  # rewritten to out/public/a
        "in/secret/b",  # rewritten first (priority 10), then dropped (5) as out/secret/b
        "in/secret/final",  # rewritten with Stop(message): the drop never sees it
        "out/secret/c",  # not rewritten, dropped
        "in/public/end",
    ]
    for packet_id, topic in enumerate(sent, start=1):
        publisher.send(Publish(topic, topic.encode(), qos=1, packet_id=packet_id))
        assert publisher.expect() == PubAck(packet_id)
    received = [expect_publish(subscriber) for _ in range(3)]
    assert [(p.topic, p.payload) for p in received] == [
        ("out/public/a", b"in/public/a"),
        ("out/secret/final", b"in/secret/final"),
        ("out/public/end", b"in/public/end"),
    ]
    subscriber.expect_nothing(0.2)
    publisher.close()
    subscriber.close()


# ----- a plugin that raises everywhere --------------------------------------------------------


def log_records(broker: BrokerProcess) -> list[tuple[str, str, str]]:
    """(level, logger, text) of every log line (traceback lines are not records)."""
    matches = (LOG_LINE.match(line) for line in broker.log().splitlines())
    return [(m["level"], m["logger"], m["text"]) for m in matches if m]


def wait_for_count(broker: BrokerProcess, text: str, count: int, timeout: float = 3.0) -> None:
    """Wait until `text` occurs `count` times in the broker's log."""
    deadline = time.monotonic() + timeout
    while broker.log().count(text) < count:
        assert time.monotonic() < deadline, f"{text!r} not {count} times in:\n{broker.log()}"
        time.sleep(0.02)


def exchange_through_failing_plugin(broker: BrokerProcess) -> None:
    """Subscribe, publish QoS 0/1/2, receive all, DISCONNECT: as if no plugin failed."""
    sub_id = unique("boom-sub")
    subscriber = connect_raw(broker, sub_id, clean=False)
    assert subscribe_raw(subscriber, 1, ("boom/#", 1)).reason_codes == [1]
    publisher = connect_raw(broker, unique("boom-pub"))
    publisher.send(Publish("boom/0", b"zero"))
    publisher.send(Publish("boom/1", b"one", qos=1, packet_id=1))
    assert publisher.expect() == PubAck(1)
    publisher.send(Publish("boom/2", b"two", qos=2, packet_id=2))
    assert publisher.expect() == PubRec(2)
    publisher.send(PubRel(2))
    assert publisher.expect() == PubComp(2)
    received = []
    for _ in range(3):
        message = expect_publish(subscriber)
        received.append((message.topic, message.payload))
        if message.qos:
            subscriber.send(PubAck(message.packet_id))
    assert received == [("boom/0", b"zero"), ("boom/1", b"one"), ("boom/2", b"two")]
    for client in (publisher, subscriber):
        client.send(Disconnect())
        assert client.is_closed_by_broker(3), "DISCONNECT did not close the connection"
        client.close()
    # The persistent session survived the failures: it is resumed, then discarded.
    again = connect_raw(broker, sub_id, clean=False, session_present=True)
    again.close()
    connect_raw(broker, sub_id, clean=True, session_present=False).close()


def test_plugin_raising_everywhere_is_isolated_and_named(tmp_path: Path) -> None:
    (tmp_path / "acl").write_text("pattern readwrite #\n", encoding="utf-8")
    with running_broker(tmp_path, RAISING_CONFIG) as broker:
        exchange_through_failing_plugin(broker)
        for point in (
            "client.connect",
            "client.authenticate",
            "client.connected",
            "client.authorize",
            "client.subscribe",
            "session.created",
            "session.resumed",
            "session.subscribed",
            "message.publish",
            "message.delivered",
            "message.acked",
            "client.disconnected",
            "session.terminated",
        ):
            wait_for_log(broker, f"hook {point}: callback Plugin._fail (plugin {RAISING}) raised")
        broker.process.send_signal(signal.SIGHUP)
        wait_for_log(broker, f"plugin {RAISING}: reload failed; it keeps its previous state")
        ended_before = broker.log().count("hook session.terminated: callback Plugin._fail")
        client = connect_raw(broker, unique("after-hup"))  # still serving
        client.send(Disconnect())
        assert client.is_closed_by_broker(3)
        client.close()
        wait_for_count(broker, "hook session.terminated: callback Plugin._fail", ended_before + 1)
    assert "shutting down: closing 0 connections" in broker.log()  # no client actor leaked
    assert f"plugin {RAISING}: close() failed" in broker.log()
    records = log_records(broker)
    problems = [r for r in records if r[0] in ("WARNING", "ERROR", "CRITICAL")]
    assert problems, "the failures were not logged"
    assert all(RAISING in text for _level, _logger, text in problems), problems
    assert FAILURE_TEXT in broker.log()  # the traceback shows the plugin's own exception


def test_failing_authorize_callback_grants_nothing(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """The raising plugin alone on client.authorize counts as IGNORE, and all-IGNORE denies."""
    broker = broker_factory(f'[store]\nkind = "memory"\n[[plugins]]\nmodule = "{RAISING}"\n')
    client = connect_raw(broker, unique("closed"))  # authenticate failed: allow_anonymous decides
    assert subscribe_raw(client, 1, ("any/topic", 0)).reason_codes == [SUBACK_FAILURE_V311]
    client.close()


def test_message_dropped_fires_for_denied_and_unrouted_publishes(tmp_path: Path) -> None:
    (tmp_path / "acl").write_text("topic readwrite open/#\n", encoding="utf-8")
    config = f"""\
[store]
kind = "memory"
[[plugins]]
module = "plugins.acl_file"
acl_file = "acl"
[[plugins]]
module = "{RECORDER}"
path = "events.jsonl"
"""
    with running_broker(tmp_path, config) as broker:
        publisher = connect_raw(broker, unique("dropper"))
        publisher.send(Publish("locked/x", b"no", qos=1, packet_id=1))
        assert publisher.expect() == PubAck(1)  # 3.1.1: acknowledged, not routed
        publisher.send(Publish("open/nobody-listens", b"lost", qos=0))
        publisher.send(Disconnect())

        def dropped_twice(events: list[Event]) -> bool:
            return len([e for e in events if e["point"] == "message.dropped"]) >= 2

        events = wait_for_events(broker, dropped_twice)
    drops = {(e["topic"], e["reason"]) for e in events if e["point"] == "message.dropped"}
    assert drops == {("locked/x", "not_authorized"), ("open/nobody-listens", "no_subscribers")}
