"""Message id spaces (`core.message.message_id_floor`): every worker of every cluster node
counts in a space of its own, so a move between nodes or workers, or a dead worker's
orphans, never takes two messages for one by their ids."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from core.message import MESSAGE_ID_SPACE, message_id_floor

WORKERS = st.integers(min_value=0, max_value=1023)  # `--workers` allows 1..1024
NODES = st.none() | st.text(min_size=1, max_size=40)
SQLITE_MAX = (1 << 63) - 1


@given(WORKERS, NODES)
def test_a_workers_space_fits_in_the_stores_integers(worker: int, node: str | None) -> None:
    assert message_id_floor(worker, node) >= 0
    assert message_id_floor(worker, node) + MESSAGE_ID_SPACE - 1 <= SQLITE_MAX


@given(WORKERS, WORKERS, NODES)
def test_the_workers_of_one_node_never_share_ids(worker: int, other: int, node: str | None) -> None:
    if worker == other:
        return
    low, other_low = message_id_floor(worker, node), message_id_floor(other, node)
    assert abs(low - other_low) >= MESSAGE_ID_SPACE


def test_nodes_of_one_cluster_count_apart() -> None:
    names = ["a", "b", "c", "edge-a", "edge-b", "edge-c", "plant-7-1", "plant-7-2"]
    spaces = {message_id_floor(worker, node) for node in names for worker in range(1024)}
    assert len(spaces) == len(names) * 1024
    lows = sorted(spaces)
    assert all(high - low >= MESSAGE_ID_SPACE for low, high in pairwise(lows))
    # One process outside a cluster counts from 0, as it always did.
    assert message_id_floor(0) == 0
