"""The tests' port picker (tests/support/ports.py): under pytest-xdist, each worker process
picks from a slice of its own, so servers of tests running side by side never get one port."""

from __future__ import annotations

import pytest

from tests.support import ports


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_the_workers_slices_are_disjoint_and_inside_the_range(
    monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    slices = []
    for number in range(workers):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{number}")
        slices.append(ports._slice(10000, 32767))
    taken = [set(range(low, high + 1)) for low, high in slices]
    assert all(10000 <= low <= high <= 32767 for low, high in slices)
    assert sum(map(len, taken)) == len(set().union(*taken))  # no port in two slices
    assert min(map(len, taken)) >= (32767 - 10000) // workers


def test_without_xdist_the_whole_range_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert ports._slice(10000, 32767) == (10000, 32767)


def test_a_picked_port_is_in_this_worker_s_slice_and_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    low, high = ports._slice(ports._LOWEST, ports._ephemeral_low() - 1)
    port = ports.free_port()
    assert low <= port <= high
    assert port not in {ports.free_port() for _ in range(20)}  # handed out once
