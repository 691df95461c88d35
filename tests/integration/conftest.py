"""Every integration test runs twice: against one broker process and against a pool of two
workers (docs/pool.md), as a client cannot tell them apart.

The autouse fixture below makes each test depend on the module-scoped `workers` fixture,
so a test that starts its own broker (or none) is parametrised like one that uses `broker`.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _both_modes(workers: int) -> None:
    """Run the test once per pool mode (`workers`: 1, then 2)."""
