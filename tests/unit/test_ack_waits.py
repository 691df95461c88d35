"""Publishers' acknowledgements waiting for commits (pool.ack_waits), as the pool's node and
the cluster's forwarding use them: this worker's commit, the peers' `Committed`, a peer that
goes, and in the pool the adoption of a dead worker's sessions (docs/pool.md "A worker
dies"); and, drawn by hypothesis, that an acknowledgement goes exactly once, when the last
thing it waits for is in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pool.ack_waits import AckWaits


def test_an_ack_waits_for_this_worker_and_every_peer_unless_it_is_gone() -> None:
    acks = AckWaits()
    done: list[str] = []
    local_one = acks.wait(1, {7, 8}, lambda: done.append("one"))
    local_two = acks.wait(2, {7}, lambda: done.append("two"))
    acks.committed(7, [1, 2])
    local_two()
    assert done == ["two"]
    local_one()
    assert done == ["two"]  # 8 has not confirmed
    assert acks.peer_gone(8) == 1  # taken for gone: not waited for any more
    assert done == ["two", "one"]
    assert len(acks) == 0
    local_three = acks.wait(3, {8}, lambda: done.append("three"))
    acks.peer_gone(8)
    assert done == ["two", "one"]  # this worker's own commit is still awaited
    local_three()
    assert done == ["two", "one", "three"]


def test_an_ack_waits_for_the_adoption_of_a_dead_workers_sessions() -> None:
    acks = AckWaits()
    done: list[int] = []
    local = acks.wait(1, {2}, lambda: done.append(1), orphans=[3])
    local()
    acks.committed(2, [1])
    assert done == []  # worker 3's sessions are not hosted again yet
    acks.adopted(3, [1])
    assert done == [1]
    acks.adopted(3, [1])
    local()
    assert done == [1]  # once


def test_a_peer_that_dies_unconfirmed_is_waited_for_as_orphans_not_released() -> None:
    acks = AckWaits()
    done: list[int] = []
    acks.wait(1, {2, 3}, lambda: done.append(1))()
    acks.wait(2, {3}, lambda: done.append(2))()
    acks.wait(3, {2}, lambda: done.append(3))()
    acks.committed(2, [1])
    # Worker 2 dies; it had not confirmed token 3 (token 1 it had): token 3 now waits for
    # its sessions' adoption, token 1 (waiting for 3 only) is not touched.
    assert acks.orphaned(2, [1, 3, 9]) == [3]
    assert acks.peer_gone(2) == 0  # nothing waits for its commit any more
    assert done == []
    acks.committed(3, [1, 2])
    assert done == [1, 2]
    acks.adopted(2, [3])
    assert done == [1, 2, 3]
    assert len(acks) == 0


def test_an_adopters_commit_alone_releases_a_wait_with_nothing_to_commit_here() -> None:
    acks = AckWaits()
    done: list[str] = []
    acks.wait(5, (4,), lambda: done.append("adopted"))()
    assert done == []
    acks.committed(4, (5,))
    assert done == ["adopted"]


PEERS = (1, 2, 3)
TOKENS = (1, 2, 3, 4)

events = st.one_of(
    st.tuples(st.just("local"), st.sampled_from(TOKENS)),
    st.tuples(st.just("committed"), st.sampled_from(PEERS), st.sets(st.sampled_from(TOKENS))),
    st.tuples(st.just("gone"), st.sampled_from(PEERS)),
    st.tuples(st.just("orphaned"), st.sampled_from(PEERS), st.sets(st.sampled_from(TOKENS))),
    st.tuples(st.just("adopted"), st.sampled_from(PEERS), st.sets(st.sampled_from(TOKENS))),
)


@given(
    st.lists(
        st.tuples(st.sets(st.sampled_from(PEERS)), st.sets(st.sampled_from(PEERS))),
        min_size=len(TOKENS),
        max_size=len(TOKENS),
    ),
    st.lists(events, max_size=40),
)
def test_an_ack_goes_once_when_the_last_thing_it_waits_for_is_in(
    waits: list[tuple[set[int], set[int]]], drawn: list[tuple[object, ...]]
) -> None:
    acks = AckWaits()
    released: list[int] = []
    # What each token still waits for, by the rules: its local commit, its peers, its orphans.
    local_left = set(TOKENS)
    peers_left = {token: set(peers) for token, (peers, _) in zip(TOKENS, waits, strict=True)}
    orphans_left = {token: set(dead) for token, (_, dead) in zip(TOKENS, waits, strict=True)}
    local = {
        token: acks.wait(token, peers, lambda token=token: released.append(token), dead)
        for token, (peers, dead) in zip(TOKENS, waits, strict=True)
    }
    for event in drawn:
        match event:
            case ("local", int(token)):
                local[token]()
                local_left.discard(token)
            case ("committed", int(peer), set(tokens)):
                acks.committed(peer, tokens)
                for token in tokens:
                    peers_left[token].discard(peer)
            case ("gone", int(peer)):
                acks.peer_gone(peer)
                for left in peers_left.values():
                    left.discard(peer)
            case ("orphaned", int(peer), set(tokens)):
                moved = acks.orphaned(peer, tokens)
                expected = [t for t in tokens if peer in peers_left[t]]
                assert sorted(moved) == sorted(expected)
                for token in moved:
                    peers_left[token].discard(peer)
                    orphans_left[token].add(peer)
            case ("adopted", int(dead), set(tokens)):
                acks.adopted(dead, tokens)
                for token in tokens:
                    orphans_left[token].discard(dead)
        due = {
            token
            for token in TOKENS
            if token not in local_left and not peers_left[token] and not orphans_left[token]
        }
        assert sorted(released) == sorted(due)  # each once, and none before it is due
        assert len(acks) == len(TOKENS) - len(due)
