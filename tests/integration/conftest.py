"""Every integration test runs twice: against one broker process and against a pool of two
workers (docs/pool.md), as a client cannot tell them apart.

A test that cannot hold in pool mode yet is marked `@pytest.mark.pool_gap("what is
missing")`: its pool run is skipped with that reason, which `-ra` lists in every run.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _both_modes(request: pytest.FixtureRequest, workers: int) -> None:
    marker = request.node.get_closest_marker("pool_gap")
    if marker is not None and workers > 1:
        pytest.skip(f"pool mode: {marker.args[0]}")
