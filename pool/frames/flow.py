"""The frames of flow control across workers: hold and release another worker's publisher
(docs/pool.md "Flow control across workers")."""

from __future__ import annotations

from dataclasses import dataclass

# The reasons of `FlowHold`/`FlowRelease`: core.flow.FlowState's values for a held publisher.
FLOW_REASONS = ("flow", "blocked")


@dataclass(frozen=True, slots=True)
class FlowHold:
    """Flow control across workers (docs/overload.md): stop reading from the sender's
    publisher `publisher` (a `Forward`'s), because `why` ("flow": a session here over its
    high-water mark; "blocked": this worker's memory alarm). One `FlowRelease` undoes one."""

    publisher: int
    why: str

    def __post_init__(self) -> None:
        _check_flow(self.why)


@dataclass(frozen=True, slots=True)
class FlowRelease:
    """Undo one `FlowHold` of the same publisher and reason."""

    publisher: int
    why: str

    def __post_init__(self) -> None:
        _check_flow(self.why)


def _check_flow(why: str) -> None:
    if why not in FLOW_REASONS:
        raise ValueError(f"a flow frame's reason is {why!r}, not one of {FLOW_REASONS}")
