"""Packets take effect in the order the broker reads them (docs/channel.md, "Routes in read
order"): a SUBSCRIBE or UNSUBSCRIBE is in force for a PUBLISH read after it, from the same
connection (even in the same read, hence one `send` for both) or from another connection on
the same worker.

Each round uses a new topic; a marker message published after the acknowledgements tells a
message that was not delivered from one that is late (per-publisher order holds), so a miss
costs no timeout.
"""

from __future__ import annotations

import pytest

from mqtt import encode
from mqtt.packets import (
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, subscribe_raw, unique
from tests.support.raw_client import RawClient
from tests.support.workers import connect_on_worker

ROUNDS = 100


def _collect(client: RawClient, acks: int, marker: bytes | None = None) -> list[bytes]:
    """The payloads delivered to `client` until it has seen `acks` acknowledgements (SUBACK,
    UNSUBACK, and the end of each QoS 1/2 exchange of its own publishes, answered here) and,
    if given, the message whose payload is `marker`."""
    payloads: list[bytes] = []
    while acks or (marker is not None and marker not in payloads):
        packet = client.expect()
        if isinstance(packet, Publish):
            payloads.append(packet.payload)
        elif isinstance(packet, SubAck | UnsubAck | PubAck | PubComp):
            acks -= 1
        else:
            assert isinstance(packet, PubRec), packet
            client.send(PubRel(packet.packet_id))
    return payloads


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_a_publish_in_the_read_of_its_subscribe_is_delivered(
    broker: BrokerProcess, qos: int, version: int
) -> None:
    client = connect_raw(broker, unique("order-self"), version=version)
    missed = []
    for index in range(ROUNDS):
        topic = unique("order/self")
        packet_id = 2 * index + 1
        client.send_bytes(
            encode(Subscribe(packet_id, [Subscription(topic, 0)]), version)
            + encode(Publish(topic, b"first", qos=qos, packet_id=packet_id + 1), version)
        )
        # SUBACK and the end of the PUBLISH's own exchange (PUBACK, PUBCOMP), perhaps the
        # delivery; then the marker, in a read of its own.
        seen = _collect(client, 2 if qos else 1)
        client.send(Publish(topic, b"marker"))
        seen += _collect(client, 0, b"marker")
        if seen != [b"first", b"marker"]:
            missed.append((index, seen))
    client.close()
    assert missed == [], f"{len(missed)} of {ROUNDS} rounds: {missed[:5]}"


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_a_publish_in_the_read_of_its_unsubscribe_is_not_delivered(
    broker: BrokerProcess, version: int
) -> None:
    client = connect_raw(broker, unique("order-unsub"), version=version)
    marker_topic = unique("order/marker")
    subscribe_raw(client, 1, (marker_topic, 0))
    delivered = []
    for index in range(ROUNDS // 2):
        topic = unique("order/unsub")
        subscribe_raw(client, 2, (topic, 0))
        client.send_bytes(
            encode(Unsubscribe(3, [topic]), version)
            + encode(Publish(topic, b"after"), version)
            + encode(Publish(marker_topic, b"marker"), version)
        )
        seen = _collect(client, 1, b"marker")
        if seen != [b"marker"]:
            delivered.append((index, seen))
    client.close()
    assert delivered == [], f"{len(delivered)} of {ROUNDS // 2} rounds: {delivered[:5]}"


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_a_qos2_publish_before_a_subscribe_in_one_read_is_not_delivered_to_it(
    broker: BrokerProcess, version: int
) -> None:
    # QoS 2 messages are routed by the session, after the client actor has carried out the
    # whole read: the SUBSCRIBE's routes must still come after them.
    client = connect_raw(broker, unique("order-before"), version=version)
    delivered = []
    for index in range(ROUNDS // 2):
        topic = unique("order/before")
        packet_id = 2 * index + 1
        client.send_bytes(
            encode(Publish(topic, b"before", qos=2, packet_id=packet_id + 1), version)
            + encode(Subscribe(packet_id, [Subscription(topic, 0)]), version)
        )
        seen = _collect(client, 2)  # SUBACK, PUBCOMP
        client.send(Publish(topic, b"marker"))
        seen += _collect(client, 0, b"marker")
        if seen != [b"marker"]:
            delivered.append((index, seen))
    client.close()
    assert delivered == [], f"{len(delivered)} of {ROUNDS // 2} rounds: {delivered[:5]}"


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_a_subscribe_read_before_another_connections_publish_is_in_force_for_it(
    broker: BrokerProcess, workers: int, version: int
) -> None:
    # B writes SUBSCRIBE, A writes PUBLISH right after, both on worker 0: the worker reads
    # B's packet first, so the route is in its table when A's message is routed (a pool's
    # other workers see it one replication hop later, docs/pool.md "The window").
    subscriber, _ = connect_on_worker(broker, unique("order-b"), 0, workers, version=version)
    publisher, _ = connect_on_worker(broker, unique("order-a"), 0, workers, version=version)
    missed = []
    for index in range(ROUNDS):
        topic = unique("order/across")
        subscriber.send(Subscribe(index + 1, [Subscription(topic, 0)]))
        publisher.send(Publish(topic, b"first"))
        seen = _collect(subscriber, 1)  # SUBACK, perhaps the delivery
        publisher.send(Publish(topic, b"marker"))
        seen += _collect(subscriber, 0, b"marker")
        if seen != [b"first", b"marker"]:
            missed.append((index, seen))
    subscriber.close()
    publisher.close()
    assert missed == [], f"{len(missed)} of {ROUNDS} rounds: {missed[:5]}"
