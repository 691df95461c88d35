"""The pool's forwarding and route replication joined with the cluster's (cluster.joined):
each side hears what it should, and a SUBACK's wait ends when both rounds are in."""

from __future__ import annotations

from collections.abc import Callable

from cluster.joined import JoinedForwarder, JoinedReplication
from cluster.member import FORWARD_BYTES, split_payloads
from core.message import Message
from router.share_replica import RemoteShares


class FakeSide:
    """Records what it is told; `wants` says which topics it forwards."""

    def __init__(self, wants: set[str]) -> None:
        self.wants = wants
        self.worker = 3
        self.shares = RemoteShares()
        self.added: list[str] = []
        self.flushed: list[list[Message]] = []
        self.changes: list[tuple[str, bool]] = []
        self.durable: list[tuple[str, bool]] = []
        self.waiting: list[Callable[[], object]] = []

    def add(self, message: Message) -> bool:
        self.added.append(message.topic)
        return message.topic in self.wants

    def needs_store(self, topic: str) -> bool:
        return topic == "stored"

    def flush(self, retained: list[Message], *_args: object) -> None:
        self.flushed.append(retained)

    def route_changed(self, topic_filter: str, added: bool) -> None:
        self.changes.append((topic_filter, added))

    def durable_route_changed(self, topic_filter: str, added: bool) -> None:
        self.durable.append((topic_filter, added))

    def when_routes_known(self, then: Callable[[], object]) -> None:
        self.waiting.append(then)


def test_each_side_sees_every_publish_and_either_wanting_it_counts() -> None:
    pool, member = FakeSide({"p"}), FakeSide({"m"})
    joined = JoinedForwarder(pool, member)  # type: ignore[arg-type]
    assert [joined.add(Message(topic=t, payload=b"")) for t in ("p", "m", "none")] == [
        True,
        True,
        False,
    ]
    assert pool.added == member.added == ["p", "m", "none"]
    kept = [Message(topic="r", payload=b"1", retain=True)]
    assert joined.flush(kept, None) is None
    assert pool.flushed == member.flushed == [kept]
    assert (joined.worker, joined.needs_store("stored")) == (3, True)


def test_without_a_pool_only_the_cluster_forwards() -> None:
    member = FakeSide({"m"})
    joined = JoinedForwarder(None, member)  # type: ignore[arg-type]
    assert joined.add(Message(topic="m", payload=b""))
    assert joined.flush([], None) is None
    assert (joined.worker, joined.needs_store("stored"), len(joined.shares)) == (0, False, 0)


def test_route_changes_and_durable_ones_go_to_both() -> None:
    # A persistent session's route is told to the other nodes too: their publishers' acks
    # wait for this node's commits (cluster.numbered_forwarding).
    pool, member = FakeSide(set()), FakeSide(set())
    joined = JoinedReplication(pool, member)  # type: ignore[arg-type]
    joined.route_changed("a/#", True)
    joined.durable_route_changed("a/#", True)
    assert pool.changes == member.changes == [("a/#", True)]
    assert pool.durable == member.durable == [("a/#", True)]
    joined = JoinedReplication(None, member)  # type: ignore[arg-type]
    joined.durable_route_changed("b/#", False)
    assert member.durable == [("a/#", True), ("b/#", False)]


class WaitingSide(FakeSide):
    """A side whose flush makes `on_durable` wait: it returns its own part, and calls
    `on_durable` once that part and `release` were both called."""

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__(set())
        self.name = name
        self.log = log
        self.release: Callable[[], None] = lambda: None

    def flush(  # type: ignore[override]
        self, retained: list[Message], on_durable: Callable[[], object] | None, *_args: object
    ) -> Callable[[], None] | None:
        assert on_durable is not None
        done: set[str] = set()

        def part(which: str) -> None:
            done.add(which)
            self.log.append(f"{self.name} {which}")
            if done == {"local", "others"}:
                on_durable()

        self.release = lambda: part("others")
        return lambda: part("local")


def test_a_qos1_ack_waits_for_this_node_then_its_pool_then_the_other_nodes() -> None:
    log: list[str] = []
    pool, member = WaitingSide("pool", log), WaitingSide("member", log)
    joined = JoinedForwarder(pool, member)  # type: ignore[arg-type]
    local_part = joined.flush([], lambda: log.append("acked"))
    assert local_part is not None
    member.release()  # the other nodes confirmed
    local_part()  # this worker's own commit: the pool's part
    assert "acked" not in log
    pool.release()  # the pool's workers confirmed: the member's local part, then the ack
    assert log == ["member others", "pool local", "pool others", "member local", "acked"]


def test_without_a_pool_the_ack_waits_for_the_other_nodes_only() -> None:
    log: list[str] = []
    member = WaitingSide("member", log)
    joined = JoinedForwarder(None, member)  # type: ignore[arg-type]
    local_part = joined.flush([], lambda: log.append("acked"))
    assert local_part is not None
    local_part()
    member.release()
    assert log == ["member local", "member others", "acked"]


def test_a_suback_waits_for_the_pool_and_the_cluster() -> None:
    pool, member = FakeSide(set()), FakeSide(set())
    joined = JoinedReplication(pool, member)  # type: ignore[arg-type]
    known: list[str] = []
    joined.when_routes_known(lambda: known.append("known"))
    pool.waiting.pop()()
    assert known == []
    member.waiting.pop()()
    assert known == ["known"]


def test_a_forward_is_split_into_frames_of_bounded_payload() -> None:
    small = Message(topic="t", payload=b"x" * 100)
    big = Message(topic="t", payload=b"x" * (FORWARD_BYTES + 1))
    assert split_payloads((small, small)) == [(small, small)]
    parts = split_payloads((small, big, small, small))
    assert parts == [(small,), (big,), (small, small)]
    assert split_payloads((big,)) == [(big,)]  # one message alone, however large
