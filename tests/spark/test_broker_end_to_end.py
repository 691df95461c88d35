"""Broker -> plugins.event_sink -> files -> spark.stream, end to end (docs/events.md).

A real broker (subprocess) runs the event-sink plugin into a temporary directory; paho
clients publish a known set of messages, other clients connect and disconnect; SIGTERM makes
the sink publish its last file. `spark.stream.run(once=True)` must then report, per topic,
exactly the messages published and delivered, and per client the connects, disconnects (by
reason) and messages in/out. A second broker run on the same event directory adds traffic;
the second Spark run must add only the new counts (file offsets come from the checkpoint, so
no file is read twice). One Spark run per phase; windows are summed per key, so a phase that
straddles a minute boundary still adds up. The tables are read with plain
`spark.read.parquet`. A reconnect storm (takeovers and closed sockets within milliseconds)
must show as many disconnects as connects.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mqtt.packets import Disconnect
from spark.stream import StreamOptions, run
from tests.spark.readers import CLIENT_SESSIONS, TOPIC_TRAFFIC, batch_totals, with_spark
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, connect_raw, unique

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

SINK_CONFIG = """\
[store]
kind = "memory"
[[plugins]]
module = "plugins.event_sink"
directory = "events"
rotate_seconds = 0.5
[[plugins]]
module = "plugins.examples.connection_logger"
"""
SIGTERM_EXIT_CODE = 0


@dataclass
class Expected:
    """Running totals the Spark tables must show for this test's topics and clients."""

    published: Counter[str] = field(default_factory=Counter)
    delivered: Counter[str] = field(default_factory=Counter)
    connects: Counter[str] = field(default_factory=Counter)
    disconnects: dict[str, Counter[str]] = field(default_factory=dict)
    messages_in: Counter[str] = field(default_factory=Counter)
    messages_out: Counter[str] = field(default_factory=Counter)

    def session(self, client_id: str, disconnect_reason: str) -> None:
        self.connects[client_id] += 1
        self.disconnects.setdefault(client_id, Counter())[disconnect_reason] += 1


@dataclass(frozen=True)
class Names:
    """Topics and client ids unique to this test run."""

    prefix: str = field(default_factory=lambda: unique("e2e"))

    def topic(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def client(self, name: str) -> str:
        return f"{self.prefix}-{name}"


def run_traffic(broker: BrokerProcess, names: Names, rounds: int, expected: Expected) -> None:
    """`rounds` messages on topic a, one on b, one on c (no subscriber), a few sessions.

    Returns once connection_logger has logged every disconnect: it runs after the sink on
    client.disconnected (priority 0 < 1000), so by then the sink has queued every event.
    """
    wide_id, narrow_id, pub_id, extra_id = (names.client(n) for n in ("wide", "narrow", "pub", "x"))
    wide = PahoCollector(broker, wide_id)
    assert wide.subscribe(f"{names.prefix}/+", 1) == [1]
    narrow = PahoCollector(broker, narrow_id)
    assert narrow.subscribe(names.topic("a"), 0) == [0]
    publisher = PahoCollector(broker, pub_id)
    sends = [("a", rounds), ("b", 1), ("unheard/c", 1)]
    for name, count in sends:
        for index in range(count):
            publisher.publish(names.topic(name), f"{name}-{index}".encode(), qos=1)
        expected.published[names.topic(name)] += count
        expected.messages_in[pub_id] += count
    expected.delivered[names.topic("a")] += 2 * rounds
    expected.delivered[names.topic("b")] += 1
    expected.messages_out[wide_id] += rounds + 1
    expected.messages_out[narrow_id] += rounds
    for _ in range(rounds + 1):
        wide.next_message()
    for _ in range(rounds):
        narrow.next_message()
    for client in (publisher, narrow, wide):
        client.close()
    for client_id in (wide_id, narrow_id, pub_id):
        expected.session(client_id, "client_disconnect")
    extra = connect_raw(broker, extra_id)  # DISCONNECT, then a dropped socket
    first_peer = "{}:{}".format(*extra.sock.getsockname())
    extra.send(Disconnect())
    assert extra.is_closed_by_broker(3)
    extra.close()
    expected.session(extra_id, "client_disconnect")
    extra = connect_raw(broker, extra_id)
    second_peer = "{}:{}".format(*extra.sock.getsockname())
    extra.close()
    expected.session(extra_id, "socket_closed")
    for client_id in (wide_id, narrow_id, pub_id):
        wait_for_log(broker, f"client {client_id} disconnected from")
    wait_for_log(broker, f"client {extra_id} disconnected from {first_peer}: client_disconnect")
    wait_for_log(broker, f"client {extra_id} disconnected from {second_peer}: socket_closed")


def broker_phase(
    broker_factory: Callable[..., BrokerProcess], names: Names, rounds: int, expected: Expected
) -> None:
    broker = broker_factory(SINK_CONFIG)
    run_traffic(broker, names, rounds, expected)
    assert broker.stop(signal.SIGTERM) == SIGTERM_EXIT_CODE, broker.log()
    assert "event sink closed" in broker.log()


def topic_totals(spark: SparkSession, output: Path, names: Names) -> dict[str, tuple[int, int]]:
    totals: dict[str, tuple[int, int]] = {}
    for (_, topic), values in with_spark(spark, output, TOPIC_TRAFFIC).items():
        if topic.startswith(names.prefix + "/"):
            published, delivered = totals.get(topic, (0, 0))
            totals[topic] = (published + values[0], delivered + values[1])
    return totals


def client_totals(
    spark: SparkSession, output: Path, names: Names
) -> dict[str, tuple[int, dict[str, int], int, int]]:
    totals: dict[str, tuple[int, Counter[str], int, int]] = {}
    for (_, client_id), values in with_spark(spark, output, CLIENT_SESSIONS).items():
        if not client_id.startswith(names.prefix + "-"):
            continue
        connects, disconnects, by_reason, messages_in, messages_out = values
        assert disconnects == sum(by_reason.values())
        total_connects, reasons, total_in, total_out = totals.get(client_id, (0, Counter(), 0, 0))
        totals[client_id] = (
            total_connects + connects,
            reasons + Counter(by_reason),
            total_in + messages_in,
            total_out + messages_out,
        )
    return {key: (c, dict(r), i, o) for key, (c, r, i, o) in totals.items()}


def assert_tables_match(
    spark: SparkSession, events: Path, output: Path, names: Names, expected: Expected
) -> None:
    topics = set(expected.published) | set(expected.delivered)
    assert topic_totals(spark, output, names) == {
        topic: (expected.published[topic], expected.delivered[topic]) for topic in topics
    }
    assert client_totals(spark, output, names) == {
        client_id: (
            expected.connects[client_id],
            dict(expected.disconnects[client_id]),
            expected.messages_in[client_id],
            expected.messages_out[client_id],
        )
        for client_id in expected.connects
    }
    lines = sum(len(path.read_bytes().splitlines()) for path in events.glob("events-*.json"))
    assert batch_totals(output) == (lines, 0, 0)  # every line read exactly once


def test_broker_events_reach_spark_tables_and_a_rerun_adds_only_new_traffic(
    spark: SparkSession, tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    events, output = tmp_path / "events", tmp_path / "analytics"
    options = StreamOptions(input_dir=str(events), output_dir=str(output), once=True)
    names = Names()
    expected = Expected()

    broker_phase(broker_factory, names, rounds=3, expected=expected)
    first_files = set(events.glob("events-*.json"))
    assert first_files, "the sink published no file"
    assert not list((events / "_staging").rglob("*.json*")), "data left in staging"
    run(spark, options)
    assert_tables_match(spark, events, output, names, expected)

    broker_phase(broker_factory, names, rounds=2, expected=expected)
    assert set(events.glob("events-*.json")) > first_files
    run(spark, options)
    assert_tables_match(spark, events, output, names, expected)


def test_a_reconnect_storm_shows_as_many_disconnects_as_connects(
    spark: SparkSession, tmp_path: Path, broker_factory: Callable[..., BrokerProcess]
) -> None:
    events, output = tmp_path / "events", tmp_path / "analytics"
    names = Names()
    client_id = names.client("storm")
    broker = broker_factory(SINK_CONFIG)
    connections = []
    for attempt in range(24):
        if attempt % 2 and connections:  # every other time the old socket is closed first
            connections[-1].close()
        connections.append(connect_raw(broker, client_id))  # else the new one takes over
    connections[-1].close()
    deadline = time.monotonic() + 10
    while broker.log().count(f"client {client_id} disconnected from") < 24:
        assert time.monotonic() < deadline, broker.log()
        time.sleep(0.05)
    for connection in connections:
        connection.close()
    assert broker.stop(signal.SIGTERM) == SIGTERM_EXIT_CODE, broker.log()

    run(spark, StreamOptions(input_dir=str(events), output_dir=str(output), once=True))
    connects, reasons, _, _ = client_totals(spark, output, names)[client_id]
    assert connects == 24
    assert sum(reasons.values()) == 24
    # a closed socket the broker notices only after the next CONNECT counts as a takeover
    assert set(reasons) <= {"taken_over", "socket_closed"}
    assert reasons.get("taken_over", 0) >= 11
