"""pool.connection_counts: the other workers' listener counts, summed; when a change is
urgent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pool.connection_counts import PeerCounts, urgent


def test_the_sum_per_listener_is_over_the_last_report_of_each_worker() -> None:
    peers = PeerCounts(2)
    peers.report(1, (3, 0))
    peers.report(2, (1, 4))
    assert peers.elsewhere == [4, 4]
    peers.report(1, (0, 2))  # a later report replaces the earlier one
    assert peers.elsewhere == [1, 6]


def test_a_worker_that_goes_down_takes_its_connections_with_it() -> None:
    peers = PeerCounts(2)
    peers.report(1, (3, 5))
    peers.report(2, (1, 1))
    peers.drop_worker(1)
    assert peers.elsewhere == [1, 1]
    peers.drop_worker(2)
    assert peers.elsewhere == [0, 0]
    peers.drop_worker(7)  # never reported
    assert peers.elsewhere == [0, 0]


def test_a_peer_with_other_listeners_counts_for_the_ones_both_have() -> None:
    peers = PeerCounts(2)
    peers.report(1, (2,))
    peers.report(2, (1, 1, 9))
    assert peers.elsewhere == [3, 1]


@given(st.dictionaries(st.integers(0, 7), st.lists(st.integers(0, 1000), min_size=3, max_size=3)))
def test_elsewhere_is_the_column_sums(reports: dict[int, list[int]]) -> None:
    peers = PeerCounts(3)
    for worker, counts in reports.items():
        peers.report(worker, tuple(counts))
    assert peers.elsewhere == [sum(c[i] for c in reports.values()) for i in range(3)]


def test_a_change_is_urgent_from_half_the_limit_pool_wide() -> None:
    assert not urgent(10, 39, 100)
    assert urgent(10, 40, 100)
    assert urgent(1, 0, 1)  # a limit of 1: the first connection already
    assert not urgent(0, 0, 100_000)
