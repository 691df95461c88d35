"""Dispatcher.publish in-process: a real RouteTable, sessions and retainer that record what
they are told, and a store writer that records the ops it gets (no sockets, no actors).

The table pins the per-delivery decisions of the publish path: overlapping subscriptions
deliver once at the highest granted QoS capped by the message's [MQTT-3.3.5-1], No Local
[MQTT-3.8.3-3], Retain As Published [MQTT-3.3.1-12], subscription identifiers (5.0 3.3.4).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from actors.dispatch import Dispatcher
from actors.messages import Deliver, StoreRetained
from actors.persistence import Persistence
from core.message import Message
from core.reasons import DropReason
from core.session_state import Delivery, SubscriptionOptions
from core.stats import BrokerStats
from hooks.decisions import DROP
from hooks.events import MessageDropped
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt import PacketDecoder, Publish
from net.rate_limited_log import RateLimitedLog
from router.fan_out import Route
from router.route_table import RouteTable
from store.base import DeleteRetained, Op, PutMessage, PutRetained

Sub = SubscriptionOptions


class Recorder:
    """Stands for an actor ref: records what it is told."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.told: list[Any] = []

    def tell(self, message: Any) -> None:
        self.told.append(message)

    def deliveries(self) -> list[Delivery]:
        return [delivery for deliver in self.told for delivery in deliver.deliveries]


@dataclass
class RecordingWriter:
    """Stands for the StoreWriter: keeps each submission, commits when told to."""

    submitted: list[tuple[list[Op], Callable[[], object] | None]] = field(default_factory=list)

    def submit(
        self, ops: Sequence[Op], then: Callable[[], object] | None, *, lazy: bool = False
    ) -> None:
        assert not lazy
        self.submitted.append((list(ops), then))


@dataclass
class Broker:
    """A dispatcher over a real route table, with recording sessions."""

    persistent_store: bool = False
    table: RouteTable[str, Route] = field(default_factory=RouteTable)
    hooks: HookBus = field(default_factory=HookBus)
    stats: BrokerStats = field(default_factory=BrokerStats)
    retainer: Recorder = field(default_factory=lambda: Recorder("retainer"))
    writer: RecordingWriter = field(default_factory=RecordingWriter)
    sessions: dict[str, Recorder] = field(default_factory=dict)

    def __post_init__(self) -> None:
        persistence = Persistence(self.writer if self.persistent_store else None)
        self.dispatcher = Dispatcher(
            self.table,
            self.retainer,
            self.hooks,
            self.stats,
            persistence,
            loss_log=RateLimitedLog(logging.getLogger("test.losses"), schedule=lambda *a: None),
        )

    def subscribe(
        self, client_id: str, topic_filter: str, options: Sub, *, persistent: bool = False
    ) -> Recorder:
        session = self.sessions.setdefault(client_id, Recorder(client_id))
        self.table.add(topic_filter, client_id, Route(session, options, persistent))
        return session


def message(topic: str = "a/b", qos: int = 2, retain: bool = False, **fields: Any) -> Message:
    return Message(topic=topic, payload=b"x", qos=qos, retain=retain, **fields)


# (subscriptions of "sub": (filter, options); message QoS, RETAIN, publisher;
#  expected deliveries to "sub" as (qos, retain, sorted subscription ids))
CASES = [
    pytest.param([("a/b", Sub(1))], 2, False, "p", [(1, False, [])], id="sub qos caps"),
    pytest.param([("a/b", Sub(2))], 1, False, "p", [(1, False, [])], id="message qos caps"),
    pytest.param([("a/b", Sub(2))], 0, False, "p", [(0, False, [])], id="qos 0 message"),
    pytest.param(
        [("a/+", Sub(0)), ("a/#", Sub(2)), ("a/b", Sub(1))],
        2,
        False,
        "p",
        [(2, False, [])],
        id="overlap: once, highest [MQTT-3.3.5-1]",
    ),
    pytest.param(
        [("a/+", Sub(1)), ("#", Sub(2))], 1, False, "p", [(1, False, [])], id="overlap capped"
    ),
    pytest.param([("a/b", Sub(2, no_local=True))], 2, False, "sub", [], id="no local: own"),
    pytest.param(
        [("a/b", Sub(2, no_local=True))], 2, False, "p", [(2, False, [])], id="no local: other"
    ),
    pytest.param(
        [("a/b", Sub(2, no_local=True)), ("a/#", Sub(1))],
        2,
        False,
        "sub",
        [(1, False, [])],
        id="no local: own, via the other filter",
    ),
    pytest.param([("a/b", Sub(1))], 1, True, "p", [(1, False, [])], id="retain cleared"),
    pytest.param(
        [("a/b", Sub(1, retain_as_published=True))],
        1,
        True,
        "p",
        [(1, True, [])],
        id="retain as published",
    ),
    pytest.param(
        [("a/b", Sub(0)), ("a/+", Sub(0, retain_as_published=True))],
        0,
        True,
        "p",
        [(0, True, [])],
        id="retain as published on one of two",
    ),
    pytest.param(
        [("a/b", Sub(1, subscription_id=4)), ("a/#", Sub(0, subscription_id=2)), ("+/b", Sub(0))],
        1,
        False,
        "p",
        [(1, False, [2, 4])],
        id="subscription ids collected",
    ),
]


@pytest.mark.parametrize(("subscriptions", "qos", "retain", "publisher", "expected"), CASES)
def test_delivery_to_one_subscriber(
    subscriptions: list[tuple[str, Sub]],
    qos: int,
    retain: bool,
    publisher: str,
    expected: list[tuple[int, bool, list[int]]],
) -> None:
    broker = Broker()
    for topic_filter, options in subscriptions:
        session = broker.subscribe("sub", topic_filter, options)
    published = message(qos=qos, retain=retain, publisher=publisher)
    assert broker.dispatcher.publish([published]) is False  # nothing for the store
    deliveries = session.deliveries()
    assert [(d.qos, d.retain, sorted(d.subscription_ids)) for d in deliveries] == expected
    assert all(d.message is published for d in deliveries)
    assert len(session.told) == (1 if expected else 0)  # one Deliver per session and batch


def test_each_session_gets_one_deliver_with_the_batch_in_order() -> None:
    broker = Broker()
    first = broker.subscribe("s1", "a/#", Sub(1))
    second = broker.subscribe("s2", "a/b", Sub(0))
    batch = [message("a/b", 1), message("a/c", 1), message("a/b", 0)]
    broker.dispatcher.publish(batch)
    assert len(first.told) == 1 and isinstance(first.told[0], Deliver)
    assert [d.message for d in first.deliveries()] == batch
    assert [d.message for d in second.deliveries()] == [batch[0], batch[2]]
    assert [d.qos for d in second.deliveries()] == [0, 0]
    assert broker.stats.messages_received == 3


def test_qos_0_deliveries_share_one_3_x_encoding() -> None:
    broker = Broker()
    sessions = [broker.subscribe(f"s{index}", "a/b", Sub(0)) for index in range(3)]
    broker.dispatcher.publish([message(qos=1)])
    wires = [session.deliveries()[0].wire for session in sessions]
    assert wires[0] is not None
    assert all(wire is wires[0] for wire in wires)  # encoded once, shared
    assert PacketDecoder(protocol_version=4).feed(wires[0]) == [Publish("a/b", b"x")]


def test_a_fan_out_to_subscribers_of_one_kind_makes_one_delivery() -> None:
    broker = Broker()
    sessions = [broker.subscribe(f"s{index}", "a/b", Sub(1)) for index in range(100)]
    broker.dispatcher.publish([message(qos=2)])
    deliveries = [delivery for session in sessions for delivery in session.deliveries()]
    assert len(deliveries) == 100
    assert len({id(delivery) for delivery in deliveries}) == 1  # an immutable tuple, shared
    assert deliveries[0] == Delivery(deliveries[0].message, 1, False, ())


# subscriber kinds: options, persistent session; what each gets of a QoS 1 retained message
# as (qos, retain, subscription ids, stored)
KINDS: dict[str, tuple[Sub, bool, tuple[int, bool, tuple[int, ...], bool]]] = {
    "qos0": (Sub(0), False, (0, False, (), False)),
    "qos1": (Sub(1), False, (1, False, (), False)),
    "qos2": (Sub(2), False, (1, False, (), False)),
    "as published": (Sub(1, retain_as_published=True), False, (1, True, (), False)),
    "id 7": (Sub(1, subscription_id=7), False, (1, False, (7,), False)),
    "id 8": (Sub(1, subscription_id=8), False, (1, False, (8,), False)),
    "stored": (Sub(1), True, (1, False, (), True)),
}


@pytest.mark.parametrize("seed", range(5))
def test_subscribers_of_every_kind_mixed_get_their_own_delivery(seed: int) -> None:
    """However the kinds interleave in a fan-out, each subscriber's delivery is its own
    (sharing an equal delivery never hands one subscriber another's QoS, flag or ids)."""
    order = [kind for kind in KINDS for _ in range(4)]
    random.Random(seed).shuffle(order)
    broker = Broker(persistent_store=True)
    sessions = [
        (kind, broker.subscribe(f"{index}", "a/b", KINDS[kind][0], persistent=KINDS[kind][1]))
        for index, kind in enumerate(order)
    ]
    published = message(qos=1, retain=True)
    broker.dispatcher.publish([published])
    for kind, session in sessions:
        (delivery,) = session.deliveries()
        got = (delivery.qos, delivery.retain, delivery.subscription_ids, delivery.seq != 0)
        assert got == KINDS[kind][2], kind
        assert delivery.message is published
        assert (delivery.wire is not None) == (kind == "qos0")  # the shared 3.x encoding


def test_retained_messages_go_to_the_retainer_in_one_tell() -> None:
    broker = Broker()
    kept, cleared = message("r/1", retain=True), message("r/2", retain=True)
    plain = message("r/3")
    broker.dispatcher.publish([kept, plain, cleared])
    assert broker.retainer.told == [StoreRetained([kept, cleared])]


def test_no_subscriber_counts_a_drop_and_tells_the_hook() -> None:
    broker = Broker()
    dropped: list[MessageDropped] = []
    broker.hooks.register(HookPoint.MESSAGE_DROPPED, dropped.append)
    lonely = message("nobody/here")
    assert broker.dispatcher.publish([lonely]) is False
    assert broker.stats.messages_dropped == 1
    assert dropped == [MessageDropped(message=lonely, reason=DropReason.NO_SUBSCRIBERS)]


def test_a_message_publish_hook_may_drop_or_replace() -> None:
    broker = Broker()
    session = broker.subscribe("sub", "#", Sub(1))
    dropped: list[MessageDropped] = []
    broker.hooks.register(HookPoint.MESSAGE_DROPPED, dropped.append)

    def filter_messages(incoming: Message) -> Message | object:
        if incoming.topic == "secret":
            return DROP
        return Message(topic="rewritten/" + incoming.topic, payload=incoming.payload, qos=1)

    broker.hooks.register(HookPoint.MESSAGE_PUBLISH, filter_messages)
    secret = message("secret")
    broker.dispatcher.publish([secret, message("open")])
    assert [d.message.topic for d in session.deliveries()] == ["rewritten/open"]
    assert dropped == [MessageDropped(message=secret, reason=DropReason.BY_PLUGIN)]


def test_persistent_qos_1_and_2_deliveries_are_stored_before_the_ack() -> None:
    broker = Broker(persistent_store=True)
    kept = broker.subscribe("kept", "a/#", Sub(2), persistent=True)
    clean = broker.subscribe("clean", "a/#", Sub(2))
    qos0 = broker.subscribe("kept0", "a/#", Sub(0), persistent=True)
    acks: list[str] = []
    published = message(qos=1, retain=True)
    assert broker.dispatcher.publish([published], lambda: acks.append("puback")) is True
    ((ops, then),) = broker.writer.submitted
    assert acks == []  # not before the commit
    (stored,) = kept.deliveries()
    assert stored.seq > 0
    assert ops == [
        PutRetained(published),
        PutMessage("kept", stored.seq, ops[1].entry),
    ]
    entry = ops[1].entry
    assert (entry.message, entry.qos, entry.packet_id, entry.stage) == (published, 1, None, None)
    assert clean.deliveries()[0].seq == 0  # clean sessions are never stored
    assert qos0.deliveries()[0].seq == 0  # nor QoS 0 deliveries
    assert then is not None
    then()
    assert acks == ["puback"]


def test_an_empty_retained_message_deletes_the_stored_one() -> None:
    broker = Broker(persistent_store=True)
    broker.dispatcher.publish([Message(topic="r", payload=b"", retain=True)])
    ((ops, _then),) = broker.writer.submitted
    assert ops == [DeleteRetained("r")]


def test_nothing_for_the_store_means_no_submission_and_no_callback() -> None:
    broker = Broker(persistent_store=True)
    broker.subscribe("clean", "a/b", Sub(1))
    acks: list[str] = []
    assert broker.dispatcher.publish([message(qos=1)], lambda: acks.append("puback")) is False
    assert broker.writer.submitted == []
    assert acks == []  # the caller acknowledges at once itself


def test_deliveries_follow_route_changes_between_publishes() -> None:
    broker = Broker()
    session = broker.subscribe("sub", "a/+", Sub(1))
    broker.dispatcher.publish([message()])
    broker.table.add("a/b", "sub", Route(session, Sub(2, subscription_id=5)))
    broker.dispatcher.publish([message()])
    broker.table.remove("a/+", "sub")
    broker.table.remove("a/b", "sub")
    broker.dispatcher.publish([message()])
    assert [(d.qos, d.subscription_ids) for d in session.deliveries()] == [(1, ()), (2, (5,))]
