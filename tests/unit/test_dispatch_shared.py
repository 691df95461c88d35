"""Dispatcher in-process for shared subscriptions: one delivery per group, the member's
options, stored copies for persistent members, and redispatch (no sockets, no actors)."""

from __future__ import annotations

import logging
from typing import Any

from actors.dispatch import Dispatcher
from actors.persistence import Persistence
from core.message import Message
from core.session_state import Delivery, SubscriptionOptions
from core.share_origin import ShareOrigin
from core.stats import BrokerStats
from hooks.hook_bus import HookBus
from net.rate_limited_log import RateLimitedLog
from router.fan_out import Route
from router.route_table import RouteTable
from router.share_strategy import SharePicker, Strategy
from router.shared import SharedSubscriptions
from store.base import PutMessage
from tests.unit.test_dispatch import Recorder, RecordingWriter

Sub = SubscriptionOptions


class Shared:
    """A dispatcher over a real route table and share table, with recording sessions."""

    def __init__(self, persistent_store: bool = False) -> None:
        self.table: RouteTable[str, Route] = RouteTable()
        self.shares = SharedSubscriptions()
        self.writer = RecordingWriter()
        self.sessions: dict[str, Recorder] = {}
        self.stats = BrokerStats()
        self.dispatcher = Dispatcher(
            self.table,
            Recorder("retainer"),
            HookBus(),
            self.stats,
            Persistence(self.writer if persistent_store else None),
            loss_log=RateLimitedLog(logging.getLogger("test.losses"), schedule=lambda *a: None),
            shares=self.shares,
            picker=SharePicker(Strategy.ROUND_ROBIN),
        )

    def session(self, client_id: str) -> Recorder:
        return self.sessions.setdefault(client_id, Recorder(client_id))

    def join(self, client_id: str, shared_filter: str, options: Sub, **route: Any) -> None:
        self.shares.add(shared_filter, client_id, Route(self.session(client_id), options, **route))

    def got(self, client_id: str) -> list[Delivery]:
        return self.session(client_id).deliveries()


def message(payload: bytes, qos: int = 1, retain: bool = False) -> Message:
    return Message(topic="jobs/1", payload=payload, qos=qos, retain=retain, publisher="p")


def test_one_delivery_per_group_with_the_members_options() -> None:
    broker = Shared()
    broker.join("a1", "$share/a/jobs/+", Sub(0))
    broker.join("a2", "$share/a/jobs/+", Sub(2, retain_as_published=True, subscription_id=7))
    broker.join("b1", "$share/b/jobs/#", Sub(1))
    broker.dispatcher.publish([message(b"1", retain=True), message(b"2", retain=True)])
    (first,) = broker.got("a1")
    (second,) = broker.got("a2")
    assert (first.message.payload, first.qos, first.retain) == (b"1", 0, False)
    # QoS capped by the message's; Retain As Published kept; the member's identifier.
    assert (second.message.payload, second.qos, second.retain) == (b"2", 1, True)
    assert second.subscription_ids == (7,)
    assert second.share == ShareOrigin("a", "jobs/+")
    assert [d.message.payload for d in broker.got("b1")] == [b"1", b"2"]
    assert broker.stats.messages_dropped == 0


def test_a_message_only_shared_subscribers_want_is_not_dropped() -> None:
    broker = Shared()
    broker.dispatcher.publish([message(b"nobody")])
    assert broker.stats.messages_dropped == 1
    broker.join("a1", "$share/a/jobs/1", Sub(1))
    broker.dispatcher.publish([message(b"someone")])
    assert broker.stats.messages_dropped == 1


def test_persistent_members_get_stored_copies() -> None:
    broker = Shared(persistent_store=True)
    broker.join("a1", "$share/a/jobs/1", Sub(1), persistent=True)
    broker.dispatcher.publish([message(b"kept")])
    (delivery,) = broker.got("a1")
    ((ops, _then),) = broker.writer.submitted
    assert [type(op) for op in ops] == [PutMessage]
    assert delivery.seq and ops[0].client_id == "a1"  # type: ignore[attr-defined]


def test_redispatch_goes_to_another_member_and_never_back() -> None:
    broker = Shared()
    members = ("a1", "a2", "a3")
    for client_id in members:
        broker.join(client_id, "$share/a/jobs/1", Sub(1))
    broker.dispatcher.publish([message(b"m")])
    holder, tried = "a1", {"a1"}
    (delivery,) = broker.got(holder)
    for _ in range(2):
        assert broker.dispatcher.redispatch([delivery], holder) == []
        (holder,) = [c for c in members if c not in tried and broker.got(c)]
        (delivery,) = broker.got(holder)
        assert delivery.share is not None and delivery.share.tried == frozenset(tried)
        tried.add(holder)
    # Every member has tried: nobody else can take it, it is handed back.
    assert broker.dispatcher.redispatch([delivery], holder) == [delivery]
    assert sum(len(broker.got(c)) for c in members) == 3  # one copy at a time


def test_redispatch_hands_back_what_has_no_group_any_more() -> None:
    broker = Shared()
    broker.join("a1", "$share/a/jobs/1", Sub(1))
    broker.dispatcher.publish([message(b"m")])
    (given,) = broker.got("a1")
    broker.shares.remove("$share/a/jobs/1", "a1")
    assert broker.dispatcher.redispatch([given], "a1") == [given]
