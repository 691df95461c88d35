"""Runs the cyclic garbage collector in the broker's quiet moments (`core.gc_schedule`).

`start_idle_gc` freezes what start-up made (it lives as long as the process), raises
CPython's own trigger to the schedule's backstop, and checks every `period` seconds, from a
timer of the event loop, how much CPU the process used since the last check; when it was
quiet and enough young objects piled up, it collects the generation the schedule names.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import gevent

from core.gc_schedule import GcSchedule

logger = logging.getLogger(__name__)

CHECK_PERIOD = 0.25  # seconds between two looks at the CPU used and the young generation


@dataclass(slots=True)
class IdleGc:
    """The periodic check; `collections` counts what it collected, per generation."""

    schedule: GcSchedule
    period: float
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    _cpu: float = 0.0
    _wall: float = 0.0
    _timer: Any = None

    def start(self) -> None:
        self._cpu, self._wall = time.process_time(), time.monotonic()
        self._timer = gevent.get_hub().loop.timer(self.period, self.period)
        self._timer.start(self.check)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def check(self) -> None:
        cpu, wall = time.process_time(), time.monotonic()
        share = (cpu - self._cpu) / max(wall - self._wall, 1e-6)
        generation = self.schedule.generation_due(gc.get_count(), share)
        if generation is not None:
            gc.collect(generation)
            self.collections[generation] += 1
            cpu = time.process_time()  # the collection's own CPU does not make the next look busy
        self._cpu, self._wall = cpu, time.monotonic()


def start_idle_gc(schedule: GcSchedule | None = None, period: float = CHECK_PERIOD) -> IdleGc:
    """Freeze start-up's objects, set the backstop, and start the quiet-moment check."""
    schedule = GcSchedule() if schedule is None else schedule
    gc.freeze()
    gc.set_threshold(*schedule.backstop)
    idle_gc = IdleGc(schedule, period)
    idle_gc.start()
    logger.debug(
        "garbage collection in quiet moments: from %d young objects below %.0f%% of a CPU, "
        "every %.2f s; CPython's own trigger at %s",
        schedule.idle_young,
        schedule.busy_share * 100,
        period,
        schedule.backstop,
    )
    return idle_gc
