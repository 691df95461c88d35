"""The client-id arbiter (pool/ownership.py): examples, then a storm under hypothesis.

The storm model: workers claim ids in any order, each granted claimant settles (or its
connection fails and it releases, or it declines without taking the session from the
previous owner) in any order, a previous owner's session ends while a grant is in transit,
workers die; whatever happens:
- at most one grant per id is ever in transit;
- every claim of a live worker is granted exactly once (no claimant is forgotten);
- each grant names the owner the workers know of;
- once everything settled, each claimed id has exactly one owner: the last one granted, or
  the owner a declined grant gives it back to.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pool.frames.ownership import Granted
from pool.ownership import ClientIdArbiter, home_of


def test_the_first_claim_is_granted_with_no_previous_owner() -> None:
    arbiter = ClientIdArbiter()
    assert arbiter.claim("c", 1) == [Granted("c", 1, None)]
    assert arbiter.owner("c") == 1


def test_a_claim_waits_until_the_grant_before_it_settles_and_names_the_previous_owner() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    assert arbiter.claim("c", 1) == []
    assert arbiter.settled("c", 0) == [Granted("c", 1, 0)]
    assert arbiter.owner("c") == 1


def test_granting_says_whether_a_claim_now_would_wait() -> None:
    arbiter = ClientIdArbiter()
    assert not arbiter.granting("c")
    arbiter.claim("c", 0)
    assert arbiter.granting("c")  # granted, not settled: the next claim waits
    arbiter.settled("c", 0)
    assert not arbiter.granting("c")  # owned and settled: the next claim is granted at once
    assert arbiter.claim("c", 1) == [Granted("c", 1, 0)]


def test_a_worker_waiting_twice_keeps_one_place() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.claim("c", 1)
    arbiter.claim("c", 1)
    assert arbiter.settled("c", 0) == [Granted("c", 1, 0)]
    assert arbiter.settled("c", 1) == []


def test_a_stale_settle_or_release_changes_nothing() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.settled("c", 0)
    arbiter.claim("c", 1)
    assert arbiter.release("c", 0) == []  # the previous owner, after the id moved on
    assert arbiter.settled("c", 0) == []
    assert arbiter.owner("c") == 1


def test_a_dead_owner_leaves_no_previous_owner_and_the_waiting_claim_goes() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.claim("c", 1)
    assert arbiter.worker_down(0) == [Granted("c", 1, None)]


def test_a_dead_worker_waiting_is_skipped() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.claim("c", 1)
    arbiter.claim("c", 2)
    assert arbiter.worker_down(1) == []
    assert arbiter.settled("c", 0) == [Granted("c", 2, 0)]


def test_adopt_after_a_home_restart_keeps_the_first_owner() -> None:
    arbiter = ClientIdArbiter()
    assert arbiter.adopt("c", 1)
    assert arbiter.adopt("c", 1)
    assert not arbiter.adopt("c", 2)
    assert arbiter.owner("c") == 1


def test_a_declined_grant_gives_the_id_back_to_the_owner_holding_its_session() -> None:
    # Worker 1's CONNECT was refused (a claim on another node fenced it) before it asked
    # worker 0 to hand its session over: worker 0 still holds it, and so owns the id.
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.settled("c", 0)
    assert arbiter.claim("c", 1) == [Granted("c", 1, 0)]
    assert arbiter.declined("c", 1) == []
    assert arbiter.owner("c") == 0
    assert not arbiter.granting("c")
    # The next claim hands the session over from worker 0, not from nobody.
    assert arbiter.claim("c", 1) == [Granted("c", 1, 0)]


def test_a_declined_grant_passes_the_id_to_the_next_waiting_claim_from_the_owner() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.settled("c", 0)
    arbiter.claim("c", 1)
    arbiter.claim("c", 2)
    assert arbiter.declined("c", 1) == [Granted("c", 2, 0)]


def test_a_declined_grant_leaves_no_owner_once_the_previous_one_released_or_died() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.settled("c", 0)
    arbiter.claim("c", 1)
    assert arbiter.release("c", 0) == []  # its session ended meanwhile
    assert arbiter.declined("c", 1) == []
    assert arbiter.owner("c") is None
    assert arbiter._records == {}
    arbiter.claim("d", 0)
    arbiter.settled("d", 0)
    arbiter.claim("d", 1)
    assert arbiter.worker_down(0) == []
    arbiter.declined("d", 1)
    assert arbiter.owner("d") is None


def test_a_stale_decline_changes_nothing() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.settled("c", 0)
    assert arbiter.declined("c", 0) == []  # settled: not a grant in transit any more
    arbiter.claim("c", 1)
    assert arbiter.declined("c", 2) == []  # not the claimant
    assert arbiter.owner("c") == 1


def test_released_ids_are_forgotten() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.settled("c", 0)
    arbiter.release("c", 0)
    assert arbiter.owner("c") is None
    assert arbiter._records == {}


def test_home_is_stable_and_spreads_ids() -> None:
    homes = Counter(home_of(f"client-{n}", 4) for n in range(4000))
    assert home_of("client-1", 4) == home_of("client-1", 4)
    assert set(homes) == {0, 1, 2, 3}
    assert min(homes.values()) > 800


WORKERS = 4
events = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(0, 4), st.integers(0, WORKERS - 1)),
        st.tuples(st.just("settle"), st.integers(0, 4), st.just(0)),
        st.tuples(st.just("fail"), st.integers(0, 4), st.just(0)),
        st.tuples(st.just("decline"), st.integers(0, 4), st.just(0)),
        st.tuples(st.just("end"), st.integers(0, 4), st.just(0)),
        st.tuples(st.just("down"), st.just(0), st.integers(0, WORKERS - 1)),
    ),
    max_size=80,
)


class StormModel:
    """What the workers know while the storm runs, checked against every grant received."""

    def __init__(self) -> None:
        self.arbiter = ClientIdArbiter()
        self.in_transit: dict[str, int] = {}  # id -> the granted claimant not yet settled
        self.outstanding: Counter[tuple[str, int]] = Counter()  # live claims not yet granted
        self.last_granted: dict[str, int] = {}
        # id -> the owner before the grant in transit, which holds the id's session until
        # the claimant takes it (None: nobody does, or it ended or died since)
        self.holder: dict[str, int | None] = {}
        self.dead: set[int] = set()

    def received(self, grants: list[Granted]) -> None:
        for grant in grants:
            key = (grant.client_id, grant.claimant)
            assert grant.client_id not in self.in_transit, "two grants in transit for one id"
            assert grant.claimant not in self.dead
            assert self.outstanding[key] > 0, "a grant nobody claimed"
            assert grant.previous == self.last_granted.get(grant.client_id), "a wrong previous"
            self.outstanding[key] = 0
            self.in_transit[grant.client_id] = grant.claimant
            self.holder[grant.client_id] = grant.previous
            self.last_granted[grant.client_id] = grant.claimant

    def claim(self, client_id: str, worker: int) -> None:
        if worker not in self.dead:
            self.outstanding[(client_id, worker)] = 1  # claiming while waiting: one place
            self.received(self.arbiter.claim(client_id, worker))

    def settle(self, client_id: str) -> None:
        if client_id in self.in_transit:
            self.received(self.arbiter.settled(client_id, self.in_transit.pop(client_id)))

    def fail(self, client_id: str) -> None:
        if client_id in self.in_transit:
            owner = self.in_transit.pop(client_id)
            del self.last_granted[client_id]
            self.received(self.arbiter.release(client_id, owner))

    def decline(self, client_id: str) -> None:
        """The claimant in transit refuses its CONNECT without taking the session."""
        if client_id in self.in_transit:
            claimant = self.in_transit.pop(client_id)
            holder = self.holder.pop(client_id)
            if holder is None:
                del self.last_granted[client_id]
            else:
                self.last_granted[client_id] = holder
            self.received(self.arbiter.declined(client_id, claimant))

    def end(self, client_id: str) -> None:
        """The session the previous owner still holds, while a grant is in transit, ends."""
        holder = self.holder.get(client_id)
        # The claimant's own earlier session ending is not told while it claims (the
        # registry releases the id only when no claim of it is under way there).
        if client_id in self.in_transit and holder not in (None, self.in_transit[client_id]):
            self.holder[client_id] = None
            self.received(self.arbiter.release(client_id, holder))

    def down(self, worker: int) -> None:
        if len(self.dead) == WORKERS - 1:
            return
        self.dead.add(worker)
        for table in (self.in_transit, self.last_granted):
            for client_id in [key for key, owner in table.items() if owner == worker]:
                del table[client_id]
        for client_id, holder in self.holder.items():
            if holder == worker:
                self.holder[client_id] = None
        for key in [key for key in self.outstanding if key[1] == worker]:
            del self.outstanding[key]
        self.received(self.arbiter.worker_down(worker))


@settings(max_examples=300, deadline=None)
@given(events)
def test_a_reconnect_storm_ends_with_one_owner_per_id(script: list[tuple[str, int, int]]) -> None:
    model = StormModel()
    for action, number, worker in script:
        client_id = f"id{number}"
        if action == "claim":
            model.claim(client_id, worker)
        elif action == "settle":
            model.settle(client_id)
        elif action == "fail":
            model.fail(client_id)
        elif action == "decline":
            model.decline(client_id)
        elif action == "end":
            model.end(client_id)
        else:
            model.down(worker)
    while model.in_transit:  # every grant settles: the waiting claims go one by one
        model.settle(next(iter(model.in_transit)))
    assert +model.outstanding == Counter(), "a live worker's claim was never granted"
    for client_id, owner in model.last_granted.items():
        assert model.arbiter.owner(client_id) == owner


def test_owned_by_lists_the_ids_a_worker_was_granted() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("a", 1)
    arbiter.claim("b", 2)
    arbiter.settled("b", 2)
    arbiter.claim("c", 1)
    arbiter.release("c", 1)
    assert sorted(arbiter.owned_by(1)) == ["a"]
    assert arbiter.owned_by(2) == ["b"]
    assert arbiter.worker_down(1) == []
    assert arbiter.owned_by(1) == []
