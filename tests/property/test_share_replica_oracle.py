"""Share groups across workers (router/share_replica.py) against an oracle, under hypothesis.

Each worker's members join and leave groups in any order and the worker announces its
counts (in bursts: `changes()` whenever the script says so); an observer applies what it
hears, and sometimes a worker's link drops and comes back with a snapshot. After every
announcement the observer's pool-wide groups for each topic hold, per worker, one stand-in
per member the worker had at its last announcement, for each group whose filter matches.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from mqtt.topics import matches
from router.share_replica import GroupCounts, RemoteShares, ShareAnnouncer, stand_in
from router.shared import ShareGroup, ShareMember

SHARED = ["$share/a/x/+", "$share/b/x/+", "$share/a/#", "$share/a/y"]
TOPICS = ["x/1", "y", "z"]
WORKERS = 3  # the observer is worker 0, the announcers 1 and 2

steps = st.lists(
    st.tuples(
        st.sampled_from(["join", "leave", "announce", "restart"]),
        st.integers(1, WORKERS - 1),
        st.sampled_from(SHARED),
    ),
    max_size=50,
)


def stand_ins(group: ShareGroup) -> Counter[int]:
    return Counter(m.worker for m in group.members if m.route is None)


def check(replica: RemoteShares, announced: dict[int, Counter[str]]) -> None:
    for topic in TOPICS:
        expected: dict[tuple[str, str], Counter[int]] = {}
        for worker, counts in announced.items():
            for shared_filter, count in counts.items():
                _, group, inner = shared_filter.split("/", 2)
                if count and matches(inner, topic):
                    expected.setdefault((group, inner), Counter())[worker] = count
        got = replica.pool_groups(topic, (), 0)
        assert {(g.group, g.topic_filter): stand_ins(g) for g in got} == expected, topic
        for (group, inner), counts in expected.items():
            one = replica.pool_group(group, inner, None)
            assert one is not None and stand_ins(one) == counts


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_replica_holds_what_the_workers_announced(script: list[tuple[str, int, str]]) -> None:
    announcers = {w: ShareAnnouncer() for w in range(1, WORKERS)}
    members: dict[int, Counter[str]] = {w: Counter() for w in range(1, WORKERS)}
    announced: dict[int, Counter[str]] = {w: Counter() for w in range(1, WORKERS)}
    replica = RemoteShares()

    for action, worker, shared_filter in script:
        if action == "join":
            members[worker][shared_filter] += 1
            announcers[worker].joined(shared_filter)
        elif action == "leave" and members[worker][shared_filter]:
            members[worker][shared_filter] -= 1
            announcers[worker].left(shared_filter)
        elif action == "announce":
            frame = announcers[worker].changes()
            if frame is not None:
                replica.changed(worker, frame)
            announced[worker] = +members[worker]
            check(replica, announced)
        elif action == "restart":
            replica.drop_worker(worker)
            announced[worker] = Counter()
            check(replica, announced)
            replica.replace(worker, announcers[worker].snapshot())
            announced[worker] = +members[worker]
            check(replica, announced)


def test_a_join_and_a_leave_within_a_burst_announce_nothing() -> None:
    announcer = ShareAnnouncer()
    announcer.joined("$share/g/t")
    assert announcer.changes() == GroupCounts(("$share/g/t",), (1,))
    announcer.joined("$share/g/t")
    announcer.left("$share/g/t")
    assert announcer.changes() is None
    announcer.left("$share/g/t")
    assert announcer.changes() == GroupCounts(("$share/g/t",), (0,))


def test_local_members_sit_at_their_workers_place_among_the_stand_ins() -> None:
    replica = RemoteShares()
    replica.changed(0, GroupCounts(("$share/g/t",), (1,)))
    replica.changed(2, GroupCounts(("$share/g/t",), (2,)))
    mine = ShareGroup("g", "t", (ShareMember("m", route="route", worker=1),))
    (group,) = replica.pool_groups("t", (mine,), 1)
    assert [(m.client_id, m.worker) for m in group.members] == [
        (stand_in(0), 0),
        ("m", 1),
        (stand_in(2), 2),
        (stand_in(2), 2),
    ]
    replica.drop_worker(2)
    (group,) = replica.pool_groups("t", (mine,), 1)
    assert [m.client_id for m in group.members] == [stand_in(0), "m"]


def test_an_invalid_shared_filter_from_a_peer_is_logged_and_skipped(caplog) -> None:  # type: ignore[no-untyped-def]
    replica = RemoteShares()
    replica.replace(1, GroupCounts(("$share/g", "$share/g/t"), (1, 1)))
    assert [g.topic_filter for g in replica.pool_groups("t", (), 0)] == ["t"]
    assert "announced the invalid shared subscription '$share/g'" in caplog.text
