"""Admission at CONNECT on a pool worker: flapping detection counts at the client id's home.

In one process `Admission.check` counts every CONNECT of a client id. In a pool the kernel
spreads one client id's connections over the workers, so each worker would see only its
share of them. Here a client id's CONNECTs are all counted by its home worker
(`pool.ownership.home_of`), the one whose arbiter already decides who owns the id:

- a CONNECT homed on this worker is counted here, at once, as in one process;
- one homed elsewhere is told to the home in a `Connecting` frame (only with `[flapping]
  max_connects` set), and the home counts it. The `max_connects`-th there bans the id (the
  ban is replicated to every worker as any ban). The CONNECT that reached the count is
  refused all the same: its claim follows `Connecting` on the same link, and the home
  answers a claim for a banned id with `ClaimRefused`, which the claimant turns into
  CONNACK 0x8A (pool.registry). If the home is not linked, the CONNECT is counted
  here.

The bans in force are checked here, as in one process (every worker holds every ban).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from actors.admission import Admission
from actors.config import FlappingConfig
from core.client import ClientInfo
from pool.frames.admission import Connecting
from pool.frames.codec import Frame
from pool.ownership import home_of


class PoolAdmission(Admission):
    def __init__(
        self, flapping: FlappingConfig, path: Path | None, worker: int, workers: int
    ) -> None:
        super().__init__(flapping, path)
        self.worker = worker
        self.workers = workers
        # Set by the pool worker once its fabric is up: send a frame to a worker (False:
        # that worker is not linked). None: every CONNECT is counted here.
        self.send: Callable[[int, Frame], bool] | None = None

    def check(self, client: ClientInfo) -> str | None:
        flapping = self.flapping_on
        if not self.table and not flapping:
            return None
        now = time.time()
        if flapping and not self._told_home(client.client_id):
            self.count(client.client_id, now)
        return self.refusal(client, now)

    def _told_home(self, client_id: str) -> bool:
        """Whether the id's home is another worker and has been told of this CONNECT."""
        home = home_of(client_id, self.workers)
        send = self.send
        return home != self.worker and send is not None and send(home, Connecting(client_id))
