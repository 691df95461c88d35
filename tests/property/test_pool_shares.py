"""Share groups across the workers of a pool, in-process under hypothesis: the real
dispatchers, share tables, announcers, replicas (router/share_replica.py) and outbox
(pool/outbox.py) of several workers, joined by the real frame codec instead of sockets.

- over random memberships across workers and publishes from any worker, every share group
  matching a message gets it exactly once, at one of its members;
- the pool-wide pick keeps each strategy's promise: round robin gives every member of the
  pool its turn, `local` serves the publisher's worker's members while it has some,
  `hash_topic` sends one topic to one member whichever worker publishes;
- a member that gives a delivery back (its session ended) has it taken by a member on
  another worker when its own worker has no other.
"""

from __future__ import annotations

import logging
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.dispatch import Dispatcher
from actors.persistence import Persistence
from core.message import Message
from core.session_state import Delivery, SubscriptionOptions
from core.share_origin import ShareOrigin
from core.stats import BrokerStats
from hooks.hook_bus import HookBus
from mqtt.topics import matches
from net.rate_limited_log import RateLimitedLog
from pool.frames.codec import FrameDecoder, encode_frame
from pool.frames.forwarding import ForwardShared
from pool.frames.routes import SharesChanged
from pool.outbox import ForwardOutbox
from router.fan_out import Route
from router.route_table import RouteTable
from router.share_replica import GroupCounts, RemoteShares, ShareAnnouncer
from router.share_strategy import SharePicker, Strategy
from router.shared import SharedSubscriptions
from tests.unit.test_dispatch import Recorder

WORKERS = 3
GROUPS = ["a", "b"]
FILTERS = ["t/#", "t/+", "t/1", "u"]
TOPICS = ["t/1", "t/2", "u"]


class Worker:
    """One worker: its dispatcher, share table and announcer; the dispatcher's forwarder."""

    def __init__(self, pool: Pool, worker: int, strategy: Strategy) -> None:
        self.pool = pool
        self.worker = worker
        self.shares = RemoteShares()  # the forwarder's replica of the others' groups
        self.table = SharedSubscriptions()
        self.announcer = ShareAnnouncer()
        self.outbox = ForwardOutbox()
        self.stats = BrokerStats()
        self.dispatcher = Dispatcher(
            RouteTable(),
            Recorder("retainer"),
            HookBus(),
            self.stats,
            Persistence(None),
            loss_log=RateLimitedLog(logging.getLogger("test.losses"), schedule=lambda *a: None),
            shares=self.table,
            picker=SharePicker(strategy, seed=worker, local_worker=worker),
        )
        self.dispatcher.remote = self

    # The dispatcher's RemoteForwarder (no ordinary routes cross workers in these tests).
    def add(self, message: Message) -> bool:
        return False

    def add_share(self, worker: int, message: Message, share: ShareOrigin) -> None:
        assert worker != self.worker
        self.outbox.add_share(worker, message, share)

    def flush(self, retained: list[Message], on_durable: object, publisher: object = None) -> None:
        for worker, frame in self.outbox.frames():
            (received,) = FrameDecoder().feed(encode_frame(frame))
            assert isinstance(received, ForwardShared)
            self.pool.workers[worker].dispatcher.publish_forwarded(
                received.messages, received.marks
            )


class Pool:
    def __init__(self, strategy: Strategy = Strategy.ROUND_ROBIN) -> None:
        self.workers = [Worker(self, worker, strategy) for worker in range(WORKERS)]
        self.sessions: dict[str, Recorder] = {}
        self.groups: dict[tuple[str, str], set[str]] = {}  # the oracle: (group, filter) -> ids

    def join(self, worker: int, client_id: str, group: str, topic_filter: str) -> None:
        session = self.sessions.setdefault(client_id, Recorder(client_id))
        here = self.workers[worker]
        shared_filter = f"$share/{group}/{topic_filter}"
        route = Route(session, SubscriptionOptions(1))
        if here.table.add(shared_filter, client_id, route, worker):
            here.announcer.joined(shared_filter)
            self.groups.setdefault((group, topic_filter), set()).add(client_id)
        self.announce(worker)

    def leave(self, worker: int, client_id: str, group: str, topic_filter: str) -> None:
        here = self.workers[worker]
        if here.table.remove(f"$share/{group}/{topic_filter}", client_id):
            here.announcer.left(f"$share/{group}/{topic_filter}")
            self.groups[(group, topic_filter)].discard(client_id)
        self.announce(worker)

    def announce(self, worker: int) -> None:
        """What a flush and its RoutesSync round (before the SUBACK) do."""
        counts = self.workers[worker].announcer.changes()
        if counts is not None:
            sent = SharesChanged(counts.filters, counts.counts)
            (received,) = FrameDecoder().feed(encode_frame(sent))
            assert isinstance(received, SharesChanged)
            for other in self.workers:
                if other.worker != worker:
                    other.shares.changed(worker, GroupCounts(received.filters, received.counts))

    def publish(self, worker: int, topic: str, publisher: str = "p") -> dict[str, list[Delivery]]:
        """Publish from `worker`; what each session got from it."""
        before = {cid: len(session.deliveries()) for cid, session in self.sessions.items()}
        message = Message(topic=topic, payload=b"x", qos=1, publisher=publisher)
        self.workers[worker].dispatcher.publish([message])
        return {
            cid: session.deliveries()[before[cid] :]
            for cid, session in self.sessions.items()
            if len(session.deliveries()) > before[cid]
        }


def client_of(worker: int, number: int) -> str:
    return f"w{worker}c{number}"  # a client lives on one worker


memberships = st.lists(
    st.tuples(
        st.integers(0, WORKERS - 1),
        st.integers(0, 3),
        st.sampled_from(GROUPS),
        st.sampled_from(FILTERS),
        st.booleans(),  # join (True) or leave
    ),
    max_size=25,
)
publishes = st.lists(
    st.tuples(st.integers(0, WORKERS - 1), st.sampled_from(TOPICS)), min_size=1, max_size=8
)


@settings(max_examples=150, deadline=None)
@given(memberships, publishes, st.sampled_from(Strategy))
def test_every_group_gets_each_message_once_at_one_of_its_members(
    script: list[tuple[int, int, str, str, bool]],
    sent: list[tuple[int, str]],
    strategy: Strategy,
) -> None:
    pool = Pool(strategy)
    for worker, number, group, topic_filter, joins in script:
        change = pool.join if joins else pool.leave
        change(worker, client_of(worker, number), group, topic_filter)
    for worker, topic in sent:
        got = pool.publish(worker, topic)
        per_group: Counter[tuple[str, str]] = Counter()
        for client_id, deliveries in got.items():
            for delivery in deliveries:
                assert delivery.share is not None
                key = (delivery.share.group, delivery.share.topic_filter)
                assert client_id in pool.groups[key]  # a member of the group it came through
                per_group[key] += 1
        expected = {key: 1 for key, ids in pool.groups.items() if ids and matches(key[1], topic)}
        assert per_group == expected, (worker, topic)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=WORKERS, max_size=WORKERS).filter(any),
    st.integers(0, WORKERS - 1),
    st.integers(1, 3),
)
def test_round_robin_gives_every_member_of_the_pool_its_turn(
    per_worker: list[int], publisher: int, rounds: int
) -> None:
    pool = Pool(Strategy.ROUND_ROBIN)
    for worker, count in enumerate(per_worker):
        for number in range(count):
            pool.join(worker, client_of(worker, number), "g", "t/#")
    turns: Counter[str] = Counter()
    for _ in range(rounds * sum(per_worker)):
        for client_id, deliveries in pool.publish(publisher, "t/1").items():
            turns[client_id] += len(deliveries)
    assert turns == {
        client_of(worker, number): rounds
        for worker, count in enumerate(per_worker)
        for number in range(count)
    }


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=WORKERS, max_size=WORKERS).filter(any))
def test_local_serves_the_publishers_worker_first(per_worker: list[int]) -> None:
    pool = Pool(Strategy.LOCAL)
    for worker, count in enumerate(per_worker):
        for number in range(count):
            pool.join(worker, client_of(worker, number), "g", "t/#")
    for publisher in range(WORKERS):
        got = set()
        for _ in range(6):
            got.update(pool.publish(publisher, "t/1"))
        if per_worker[publisher]:
            assert got == {client_of(publisher, n) for n in range(per_worker[publisher])}
        else:
            assert got and all(not cid.startswith(f"w{publisher}") for cid in got)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=WORKERS, max_size=WORKERS).filter(any),
    st.sampled_from(["t/1", "t/2", "t/x/y"]),
)
def test_hash_topic_sends_a_topic_to_one_member_whichever_worker_publishes(
    per_worker: list[int], topic: str
) -> None:
    pool = Pool(Strategy.HASH_TOPIC)
    for worker, count in enumerate(per_worker):
        for number in range(count):
            pool.join(worker, client_of(worker, number), "g", "t/#")
    receivers = set()
    for publisher in range(WORKERS):
        for n in range(3):
            receivers.update(pool.publish(publisher, topic, publisher=f"p{n}"))
    assert len(receivers) == 1


def test_a_delivery_given_back_goes_to_a_member_on_another_worker() -> None:
    pool = Pool(Strategy.ROUND_ROBIN)
    pool.join(0, "leaving", "g", "t/#")
    pool.join(1, "staying", "g", "t/#")
    got = pool.publish(0, "t/1")
    if "leaving" not in got:  # round robin: the next one goes to the other member
        got = pool.publish(0, "t/1")
    (given_back,) = got["leaving"]
    left = pool.workers[0].dispatcher.redispatch([given_back], "leaving")
    assert left == []
    taken = pool.sessions["staying"].deliveries()[-1]
    assert taken.message is not given_back.message  # it crossed the codec
    assert taken.message.topic == "t/1"
    assert taken.share == ShareOrigin("g", "t/#", frozenset({"leaving"}))


def test_a_message_for_a_member_that_left_meanwhile_goes_on_to_another_worker() -> None:
    pool = Pool(Strategy.ROUND_ROBIN)
    pool.join(1, "gone", "g", "t/#")
    pool.join(2, "there", "g", "t/#")
    # Worker 1's member leaves before worker 0 hears of it.
    pool.workers[1].table.remove("$share/g/t/#", "gone")
    got: dict[str, int] = Counter()
    for _ in range(4):
        for client_id, deliveries in pool.publish(0, "t/1").items():
            got[client_id] += len(deliveries)
    assert got == {"there": 4}  # two directly, two through worker 1


def test_nobody_left_anywhere_drops_the_message() -> None:
    pool = Pool(Strategy.ROUND_ROBIN)
    pool.join(1, "gone", "g", "t/#")
    pool.workers[1].table.remove("$share/g/t/#", "gone")
    assert pool.publish(0, "t/1") == {}
    assert pool.workers[1].stats.messages_dropped == 1
