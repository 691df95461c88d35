"""Carrying out flow control for one broker worker: the sessions' loads, the memory alarm,
the stuck-subscriber sweep (the decisions are `core.flow`'s; docs/overload.md).

- Every session actor gets its `SessionLoad` from `new_load` and publishes its state there;
  the dispatcher reads `loads` on the publish path and holds the publisher's intake on a
  load that is `over`.
- A periodic check (every `[overload] memory_check_interval` seconds, a gevent greenlet)
  samples the worker's resident memory into the `MemoryAlarm` and tells every session that
  has been over its high-water mark without progress for `max_stall` seconds that it is
  stuck (`Stalled`): the session then falls back to its bound and drop policy.

Transitions are logged, one line each, and counted in `BrokerStats`.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import gevent

from actors.config import OverloadConfig
from actors.messages import Stalled
from actors.runtime import tell_if_alive
from core.flow import MemoryAlarm, SessionLoad, Watermarks, memory_watermark
from core.stats import BrokerStats

logger = logging.getLogger(__name__)

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class ResidentMemory:
    """This process's resident set size in bytes, from /proc/self/statm kept open: reading it
    needs no new descriptor, so it works when the process is out of them."""

    def __init__(self) -> None:
        self._fd = os.open("/proc/self/statm", os.O_RDONLY)

    def read(self) -> int:
        return int(os.pread(self._fd, 256, 0).split()[1]) * _PAGE_SIZE

    def close(self) -> None:
        os.close(self._fd)


def total_memory() -> int:
    return int(os.sysconf("SC_PHYS_PAGES")) * _PAGE_SIZE


class FlowControl:
    def __init__(self, config: OverloadConfig, stats: BrokerStats, workers: int = 1) -> None:
        """`workers`: the processes of the broker (a pool's), which share the memory
        watermark evenly: each worker's alarm is at its 1/`workers` part, so the pool as a
        whole stays under `memory_high_watermark` as one process does."""
        self.config = config
        self.enabled = config.flow_control
        self.marks = Watermarks(
            config.high_water_messages,
            config.low_water_messages,
            config.high_water_bytes,
            config.low_water_bytes,
        )
        self.loads: dict[Any, SessionLoad] = {}  # session ActorRef -> its load
        self.over: dict[SessionLoad, Any] = {}  # loads over their mark -> session ActorRef
        watermark = memory_watermark(config.memory_high_watermark, total_memory())
        self.alarm = MemoryAlarm(watermark // workers)
        self._stats = stats
        self._checker: gevent.Greenlet[..., Any] | None = None

    # ----- sessions ---------------------------------------------------------------------

    def new_load(self, session: Any) -> SessionLoad:
        load = SessionLoad(self.marks)
        self.loads[session] = load
        return load

    def forget(self, session: Any) -> None:
        """The session ended."""
        load = self.loads.pop(session, None)
        if load is not None:
            self.over.pop(load, None)
            load.disable()

    def went_over(self, session: Any, load: SessionLoad, client_id: str) -> None:
        self.over[load] = session
        self._stats.flow_pauses += 1
        logger.info(
            "flow: session %r holds %d messages / %d bytes (high water %d / %d): pausing "
            "reads from the publishers that feed it",
            client_id,
            load.messages,
            load.bytes,
            self.marks.high_messages,
            self.marks.high_bytes,
        )

    def drained(self, load: SessionLoad, client_id: str) -> None:
        self.over.pop(load, None)
        logger.info(
            "flow: session %r drained to %d messages: its publishers run again",
            client_id,
            load.messages,
        )

    # ----- the periodic check -------------------------------------------------------------

    def start(self) -> None:
        logger.info(
            "flow control %s; memory high watermark %d MB (resident), checked every %.1f s",
            "on" if self.enabled else "off",
            self.alarm.high_watermark // 1_048_576,
            self.config.memory_check_interval,
        )
        self._checker = gevent.spawn(self._check_forever, ResidentMemory())

    def stop(self) -> None:
        # The checker closes its descriptor as it ends: closing it here instead raced with
        # a check already woken ("cannot read the resident memory ([Errno 9] ...)").
        if self._checker is not None:
            self._checker.kill(block=False)
            self._checker = None

    def _check_forever(self, memory: ResidentMemory) -> None:
        try:
            self._check_every_interval(memory)
        finally:
            memory.close()

    def _check_every_interval(self, memory: ResidentMemory) -> None:
        interval = self.config.memory_check_interval
        while True:
            gevent.sleep(interval)
            try:
                used = memory.read()
            except OSError as error:
                logger.warning("cannot read the resident memory (%s): no memory check", error)
                continue
            try:
                self.check(used, time.monotonic())  # the sessions' clock
            except Exception:  # a bug: say so, keep checking
                logger.exception("the overload check failed; it runs again in %.1f s", interval)

    def check(self, used_memory: int, now: float) -> None:
        """One sample of the memory in use; tell stuck sessions."""
        alarm = self.alarm
        changed = alarm.sample(used_memory)
        if changed is True:
            self._stats.memory_alarms += 1
            logger.warning(
                "memory alarm: %d MB resident >= memory_high_watermark %d MB: every publishing "
                "connection is blocked until memory falls below it (consumers continue)",
                used_memory // 1_048_576,
                alarm.high_watermark // 1_048_576,
            )
        elif changed is False:
            logger.warning(
                "memory alarm cleared: %d MB resident < %d MB: publishers run again",
                used_memory // 1_048_576,
                alarm.high_watermark // 1_048_576,
            )
        max_stall = self.config.max_stall
        for load, session in list(self.over.items()):
            if load.stuck(now, max_stall):
                del self.over[load]
                tell_if_alive(session, Stalled())
