"""Three cluster nodes' event files -> one Spark job: the totals of the whole cluster, exact.

Three brokers of one cluster over a real NATS server (docs/cluster.md) each run the event
sink into the same directory (docs/events.md, "Events of a cluster of brokers"). A publisher
on node a reaches subscribers on nodes b and c, and a persistent client moves from node a to
node b (a takeover across nodes). One `spark.stream` run over the directory must count each
message published once (on the publisher's node), delivered once per subscriber (on the
subscriber's node), and the moving client's two connects and two disconnects once each.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark.stream import StreamOptions, run
from tests.spark.test_broker_end_to_end import (
    SIGTERM_EXIT_CODE,
    Expected,
    Names,
    assert_tables_match,
)
from tests.support.broker_config import wait_for_log
from tests.support.clients import PahoCollector
from tests.support.cluster import needs_nats_server, nodes_of
from tests.support.nats_server import NatsServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, needs_nats_server]

MESSAGES = 20


def sink_config(events: Path) -> str:
    return (
        f'[[plugins]]\nmodule = "plugins.event_sink"\ndirectory = "{events}"\n'
        "rotate_seconds = 0.5\n"
        '[[plugins]]\nmodule = "plugins.examples.connection_logger"\n'
    )


def test_one_job_over_three_nodes_files_gives_the_cluster_totals(
    spark: SparkSession, tmp_path: Path, nats: NatsServer, workers: int
) -> None:
    events, output = tmp_path / "events", tmp_path / "analytics"
    names, expected = Names(), Expected()
    topic = names.topic("t")
    pub_id, sub_b_id, sub_c_id, mover_id = (names.client(n) for n in ("pub", "b", "c", "mover"))
    with nodes_of(tmp_path, nats, dict.fromkeys("abc", sink_config(events))) as nodes:
        mover = PahoCollector(nodes["a"], mover_id, clean_session=False)
        subscribers = {
            "b": PahoCollector(nodes["b"], sub_b_id),
            "c": PahoCollector(nodes["c"], sub_c_id),
        }
        for subscriber in subscribers.values():
            assert subscriber.subscribe(topic, 1) == [1]
        publisher = PahoCollector(nodes["a"], pub_id)
        for index in range(MESSAGES):
            publisher.publish(topic, str(index).encode(), qos=1)
        for subscriber in subscribers.values():
            for _ in range(MESSAGES):
                subscriber.next_message()
        expected.published[topic] += MESSAGES
        expected.delivered[topic] += 2 * MESSAGES
        expected.messages_in[pub_id] += MESSAGES
        expected.messages_out[sub_b_id] += MESSAGES
        expected.messages_out[sub_c_id] += MESSAGES
        # The mover resumes on node b: node a ends its connection (taken over).
        moved = PahoCollector(nodes["b"], mover_id, clean_session=False)
        wait_for_log(nodes["a"], f"client {mover_id} disconnected from", timeout=10)
        expected.session(mover_id, "taken_over")
        for client in (publisher, moved, *subscribers.values()):
            client.close()
        expected.session(mover_id, "client_disconnect")
        for client_id, node in ((pub_id, "a"), (sub_b_id, "b"), (sub_c_id, "c")):
            expected.session(client_id, "client_disconnect")
            wait_for_log(nodes[node], f"client {client_id} disconnected from", timeout=10)
        wait_for_log(nodes["b"], f"client {mover_id} disconnected from", timeout=10)
        mover.close()
        for broker in nodes.values():
            assert broker.stop(signal.SIGTERM) == SIGTERM_EXIT_CODE, broker.log()
            assert "event sink closed" in broker.log()
    files = sorted(path.name for path in events.glob("events-*.json"))
    assert {name.split("-")[2] for name in files} == {"a", "b", "c"}, files  # every node wrote
    run(spark, StreamOptions(input_dir=str(events), output_dir=str(output), once=True))
    assert_tables_match(spark, events, output, names, expected)
