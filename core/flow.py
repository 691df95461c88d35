"""Flow control decisions, pure: when a session is too full for its publishers, and when the
worker's memory is too high for any publisher.

RabbitMQ's answer to a consumer slower than its publishers is to slow the publishers down,
never to throw away what it acknowledged ("credit flow"); this module is that decision for
one broker worker, with no I/O (the actors carry it out, see docs/overload.md):

- `SessionLoad` is what one session holds for its connected client: the messages in its
  in-flight window plus those waiting behind it, and their payload bytes. The session actor
  calls `update` after every batch it handled. Above the high-water mark the load is `over`;
  a publisher that routes to it is `hold`ed (its connection stops reading); once the load
  falls to the low-water mark every held publisher is released at once. The check on the
  publish path is the attribute `over`, read by the dispatcher; the session publishes it,
  and pauses and resumes happen once per transition, not per message.
- A session that is over its mark and makes no progress (no acknowledgement) for
  `max_stall` seconds is stuck: `stall` releases its publishers and marks it `stalled`, and
  the session falls back to its configured bound and drop policy until it drains.
- `MemoryAlarm` turns memory samples into alarm transitions with the same hold/release of
  publishers: every publisher is held while the alarm is raised.

What is held is a `Gate`: anything with `hold()` and `release()`, in practice a connection's
`channel.intake.Intake`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol


class FlowState(Enum):
    """A connection's flow state, named as RabbitMQ names them (docs/overload.md)."""

    RUNNING = "running"  # reading
    FLOW = "flow"  # paused: it publishes to a session over its high-water mark
    BLOCKED = "blocked"  # paused: the worker's memory is over its watermark


class Gate(Protocol):
    """A publisher that can be paused: `hold` once per holder, `release` once per holder;
    `why` is FLOW (a session) or BLOCKED (the memory alarm)."""

    def hold(self, why: FlowState) -> None: ...

    def release(self, why: FlowState) -> None: ...


class Transition(Enum):
    OVER = "over"  # went above the high-water mark: publishers that feed it will be held
    DRAINED = "drained"  # came down to the low-water mark: its publishers were released


@dataclass(frozen=True, slots=True)
class Watermarks:
    """The marks of a session's load; a load is over when EITHER high mark is reached and
    drained when BOTH low marks are."""

    high_messages: int = 1000
    low_messages: int = 500
    high_bytes: int = 16 * 1024 * 1024
    low_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 0 <= self.low_messages < self.high_messages:
            raise ValueError(
                f"low_messages ({self.low_messages}) must be at least 0 and below "
                f"high_messages ({self.high_messages})"
            )
        if not 0 <= self.low_bytes < self.high_bytes:
            raise ValueError(
                f"low_bytes ({self.low_bytes}) must be at least 0 and below "
                f"high_bytes ({self.high_bytes})"
            )


@dataclass(eq=False, slots=True)
class SessionLoad:
    """The load of one session, as its publishers see it (identity-hashed: one per session).

    `enabled` is False while flow control does not apply (the session is offline, or flow
    control is off): the load is then never over and holds no publisher.
    """

    marks: Watermarks
    enabled: bool = False
    messages: int = 0  # in flight + queued
    bytes: int = 0  # their payload bytes
    over: bool = False  # read by the dispatcher on every publish to this session
    stalled: bool = False  # stuck: back to the bound and drop policy (see `stall`)
    progress_at: float = 0.0  # when it last made progress (an acknowledgement), or went over
    # Publishers paused on this session; None while there are none (most sessions never
    # hold one, and an empty set per idle connection costs 216 bytes).
    held: set[Gate] | None = None

    def hold(self, gate: Gate) -> None:
        """`gate` routed to this session while it is over: pause it until the load drains."""
        held = self.held
        if held is None:
            held = self.held = set()
        if gate not in held:
            held.add(gate)
            gate.hold(FlowState.FLOW)

    def update(self, messages: int, size: int, now: float) -> Transition | None:
        """The session now holds `messages` messages of `size` payload bytes."""
        self.messages = messages
        self.bytes = size
        marks = self.marks
        if self.over or self.stalled:
            if messages <= marks.low_messages and size <= marks.low_bytes:
                self.stalled = False
                if self.over:
                    self.over = False
                    self._release()
                    return Transition.DRAINED
            return None
        if self.enabled and (messages >= marks.high_messages or size >= marks.high_bytes):
            self.over = True
            self.progress_at = now
            return Transition.OVER
        return None

    def progressed(self, now: float) -> None:
        """The client acknowledged something: it is slow, perhaps, but not stuck."""
        self.progress_at = now

    def stuck(self, now: float, max_stall: float) -> bool:
        """Over its mark with no progress for `max_stall` seconds."""
        return self.over and now - self.progress_at >= max_stall

    def stall(self) -> None:
        """Give up holding publishers for this session until it drains to its low marks."""
        self.stalled = True
        self.over = False
        self._release()

    def disable(self) -> None:
        """Flow control stops applying (the client went away): release every publisher."""
        self.enabled = False
        self.over = False
        self.stalled = False
        self._release()

    def _release(self) -> None:
        held, self.held = self.held, None
        for gate in held or ():
            gate.release(FlowState.FLOW)


@dataclass(slots=True)
class MemoryAlarm:
    """The worker's memory against `high_watermark` bytes.

    Raised when a sample reaches the watermark, cleared when a sample falls below it; while
    raised, every publisher that publishes is held (`hold`), and all are released on clear.
    """

    high_watermark: int
    raised: bool = False
    held: set[Gate] = field(default_factory=set)

    def sample(self, used: int) -> bool | None:
        """A new reading of the memory in use: True if the alarm was just raised, False if
        just cleared, None if nothing changed."""
        if not self.raised and used >= self.high_watermark:
            self.raised = True
            return True
        if self.raised and used < self.high_watermark:
            self.raised = False
            held, self.held = self.held, set()
            for gate in held:
                gate.release(FlowState.BLOCKED)
            return False
        return None

    def hold(self, gate: Gate) -> None:
        if gate not in self.held:
            self.held.add(gate)
            gate.hold(FlowState.BLOCKED)


def memory_watermark(setting: float, total_memory: int) -> int:
    """`[overload] memory_high_watermark` in bytes: a value up to 1.0 is a fraction of
    `total_memory` (as RabbitMQ's vm_memory_high_watermark), above 1 a number of bytes."""
    if setting <= 0:
        raise ValueError(f"memory_high_watermark must be above 0, got {setting}")
    if setting <= 1.0:
        return int(setting * total_memory)
    return int(setting)
