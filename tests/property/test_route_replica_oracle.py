"""Routes across workers (router/route_replica.py) against an oracle, under hypothesis.

Each worker subscribes and unsubscribes its sessions in any order and announces its changes
(in bursts: `changes()` whenever the script says so); an observer applies what it hears, and
sometimes a worker dies and comes back with a snapshot. After every announcement the
observer's `workers_for(topic)` equals the oracle: the workers with a live local route whose
filter matches the topic (`mqtt.topics.matches`).
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from mqtt.topics import matches
from router.route_replica import FilterChanges, RemoteRoutes, RouteAnnouncer

FILTERS = ["a/b", "a/+", "a/#", "#", "+/b", "c", "$SYS/x", "$SYS/#"]
TOPICS = ["a/b", "a/c", "c", "x/b", "$SYS/x", "a"]
WORKERS = 3

steps = st.lists(
    st.one_of(
        st.tuples(st.just("sub"), st.integers(0, WORKERS - 1), st.sampled_from(FILTERS)),
        st.tuples(st.just("unsub"), st.integers(0, WORKERS - 1), st.sampled_from(FILTERS)),
        st.tuples(st.just("announce"), st.integers(0, WORKERS - 1), st.just("")),
        st.tuples(st.just("restart"), st.integers(0, WORKERS - 1), st.just("")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_replica_matches_what_the_workers_announced(
    script: list[tuple[str, int, str]],
) -> None:
    announcers = [RouteAnnouncer() for _ in range(WORKERS)]
    local: list[Counter[str]] = [Counter() for _ in range(WORKERS)]  # filter -> sessions
    announced: list[set[str]] = [set() for _ in range(WORKERS)]  # as of the last announce
    replica = RemoteRoutes()

    def check() -> None:
        for topic in TOPICS:
            expected = {
                worker
                for worker in range(WORKERS)
                if any(matches(f, topic) for f in announced[worker])
            }
            assert replica.workers_for(topic) == expected, topic
            # The per-topic cache is dropped whenever the replica changes.
            assert replica.workers_cached(topic) == tuple(sorted(expected)), topic

    for action, worker, topic_filter in script:
        if action == "sub":
            local[worker][topic_filter] += 1
            announcers[worker].subscribed(topic_filter)
        elif action == "unsub" and local[worker][topic_filter]:
            local[worker][topic_filter] -= 1
            announcers[worker].unsubscribed(topic_filter)
        elif action == "announce":
            version = replica.version
            frame = announcers[worker].changes()
            now = {f for f, count in local[worker].items() if count}
            if frame is None:
                assert now == announced[worker]
            else:
                assert set(frame.added).isdisjoint(frame.removed)
                replica.changed(worker, frame)
                assert replica.version > version
            announced[worker] = now
            check()
        elif action == "restart":  # the link dropped and came back: a snapshot
            replica.drop_worker(worker)
            announced[worker] = set()
            check()
            replica.replace(worker, announcers[worker].snapshot())
            announced[worker] = {f for f, count in local[worker].items() if count}
            check()


def test_a_burst_that_adds_and_removes_a_filter_announces_nothing() -> None:
    announcer = RouteAnnouncer()
    announcer.subscribed("a/+")
    announcer.unsubscribed("a/+")
    assert announcer.changes() is None


def test_only_the_first_and_last_subscriber_of_a_filter_are_announced() -> None:
    announcer = RouteAnnouncer()
    announcer.subscribed("a/+")
    assert announcer.changes() == FilterChanges(("a/+",), ())
    announcer.subscribed("a/+")
    announcer.unsubscribed("a/+")
    assert announcer.changes() is None
    announcer.unsubscribed("a/+")
    assert announcer.changes() == FilterChanges((), ("a/+",))


def test_an_invalid_filter_from_a_peer_is_logged_and_skipped(caplog) -> None:  # type: ignore[no-untyped-def]
    replica = RemoteRoutes()
    replica.replace(1, ("a/#/b", "a/b"))
    assert replica.workers_for("a/b") == {1}
    assert "announced the invalid filter 'a/#/b'" in caplog.text
