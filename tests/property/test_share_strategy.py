"""The share-group strategies (router.share_strategy) against what each one promises."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from router.share_strategy import SharePicker, Strategy
from router.shared import ShareGroup, ShareMember

client_ids = st.lists(
    st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=8, unique=True
)
topics = st.text("abc/", min_size=1, max_size=10)


def group_of(ids: list[str], workers: list[int] | None = None) -> ShareGroup:
    members = tuple(
        ShareMember(client_id, route=None, worker=workers[i] if workers else 0)
        for i, client_id in enumerate(ids)
    )
    return ShareGroup("g", "t/#", members)


@given(ids=client_ids, strategy=st.sampled_from(Strategy), data=st.data())
def test_always_a_member_and_never_an_avoided_one(
    ids: list[str], strategy: Strategy, data: st.DataObject
) -> None:
    group = group_of(ids)
    picker = SharePicker(strategy, seed=1)
    avoid = frozenset(data.draw(st.lists(st.sampled_from(ids), unique=True)))
    for _ in range(5):
        picked = picker.pick(group, data.draw(topics), data.draw(st.text(max_size=5)), avoid)
        if avoid >= set(ids):
            assert picked is None  # nobody left to take it
        else:
            assert picked is not None
            assert picked in group.members and picked.client_id not in avoid


@given(ids=client_ids, rounds=st.integers(1, 4))
def test_round_robin_gives_each_member_its_turn(ids: list[str], rounds: int) -> None:
    picker = SharePicker(Strategy.ROUND_ROBIN)
    group = group_of(ids)
    picked = [picker.pick(group, "t", "p") for _ in range(rounds * len(ids))]
    counts = Counter(member.client_id for member in picked if member is not None)
    assert counts == {client_id: rounds for client_id in ids}


@given(ids=client_ids, publisher=st.text(max_size=8), topic=topics)
def test_hash_strategies_are_stable_per_publisher_and_per_topic(
    ids: list[str], publisher: str, topic: str
) -> None:
    group = group_of(ids)
    by_client = SharePicker(Strategy.HASH_CLIENTID)
    by_topic = SharePicker(Strategy.HASH_TOPIC)
    first = by_client.pick(group, topic, publisher)
    assert all(by_client.pick(group, f"{topic}/{n}", publisher) == first for n in range(5))
    first = by_topic.pick(group, topic, publisher)
    assert all(by_topic.pick(group, topic, f"{publisher}{n}") == first for n in range(5))


@given(ids=client_ids, seed=st.integers(0, 1000))
def test_sticky_keeps_its_member_until_it_leaves(ids: list[str], seed: int) -> None:
    picker = SharePicker(Strategy.STICKY, seed=seed)
    group = group_of(ids)
    chosen = picker.pick(group, "t", "p")
    assert chosen is not None
    assert all(picker.pick(group, "t", f"p{n}") == chosen for n in range(5))
    rest = [client_id for client_id in ids if client_id != chosen.client_id]
    if rest:
        smaller = group_of(rest)
        successor = picker.pick(smaller, "t", "p")
        assert successor is not None and successor.client_id in rest
        assert all(picker.pick(smaller, "t", "p") == successor for _ in range(3))


@given(
    ids=client_ids,
    data=st.data(),
)
def test_local_prefers_members_on_this_worker(ids: list[str], data: st.DataObject) -> None:
    workers = data.draw(st.lists(st.integers(0, 2), min_size=len(ids), max_size=len(ids)))
    group = group_of(ids, workers)
    picker = SharePicker(Strategy.LOCAL, local_worker=0)
    local = {m.client_id for m in group.members if m.worker == 0}
    picked = [picker.pick(group, "t", "p") for _ in range(2 * len(ids))]
    names = {member.client_id for member in picked if member is not None}
    assert names == (local or set(ids))


@given(ids=st.lists(st.text("xyz", min_size=1, max_size=3), min_size=2, max_size=6, unique=True))
def test_random_reaches_every_member(ids: list[str]) -> None:
    picker = SharePicker(Strategy.RANDOM, seed=7)
    group = group_of(ids)
    picked = {picker.pick(group, "t", "p") for _ in range(200)}
    assert {member.client_id for member in picked if member is not None} == set(ids)
