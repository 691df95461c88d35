"""Admission at CONNECT: the banned table and flapping detection, with the clock and the file.

`Admission.check` is what every channel calls for a CONNECT (`ChannelSettings.admit`) once
its client id is known, before authentication: it records the connect for flapping detection
(banning a flapping client id for `[flapping] ban_time`) and answers why the CONNECT is
refused, or None. The admin API adds and removes bans here.

Bans are kept in `bans.json` in the store's data directory, rewritten whole (write, fsync,
rename) on every change, and read at start-up. Not in the store itself: the store is an
ordered log of message and session operations with its own process, codec and migrations,
written in group commits on the publish path; bans change a few times a day, are read
once at start, and a JSON file keeps them readable and editable by an operator. With
`[store] kind = "none"` bans live in memory only.

In a pool every worker holds every ban: a change made here is told to `replica`
(`pool.ops.PoolOps`), which broadcasts it, and a change a peer made arrives with
`replicate=False`. Only worker 0 is given the file's path, so the workers never overwrite
each other's bans. In a cluster the replica is the cluster's (`cluster.bans`), which also
writes the change to the cluster's bucket; the bucket keeps the bans, so no worker is given
the file's path (worker 0 imports the file into the bucket once, `read_bans`).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Protocol

import orjson

from actors.config import FlappingConfig
from core.bans import Ban, BanError, BanKind, BanTable, FlappingDetector, ban_from_dict
from core.client import ClientInfo

logger = logging.getLogger(__name__)

BANS_FILE = "bans.json"
FORGET_EVERY = 1000  # connects between sweeps of idle flapping histories


class BanReplica(Protocol):
    """Who tells the other workers of a pool (and the other nodes of a cluster) about a ban
    added or lifted on this one."""

    def ban_added(self, ban: Ban) -> None: ...

    def ban_removed(self, kind: BanKind, value: str) -> None: ...

    def settle(self) -> None:
        """Block this greenlet until the changes told so far are recorded beyond this
        worker, or the replica's own bound has passed (the admin API answers then)."""


class Admission:
    def __init__(self, flapping: FlappingConfig, path: Path | None) -> None:
        self.table = BanTable()
        self._flapping = FlappingDetector(flapping.max_connects, flapping.window)
        self._ban_time = flapping.ban_time
        self._path = path  # None: bans are not kept across restarts
        self._connects = 0
        self.refused = 0  # CONNECTs refused by a ban (a counter for the metrics)
        self.replica: BanReplica | None = None  # a pool's other workers
        if path is not None:
            self._load(path)

    def check(self, client: ClientInfo) -> str | None:
        """Why this CONNECT is refused (banned), or None; records it for flapping detection."""
        if not self.table and not self._flapping.max_connects:
            return None  # no bans, no flapping detection (the default): nothing to look at
        now = time.time()
        self.count(client.client_id, now)
        return self.refusal(client, now)

    @property
    def flapping_on(self) -> bool:
        return self._flapping.max_connects > 0

    def count(self, client_id: str, now: float) -> None:
        """Record a CONNECT of `client_id` for flapping detection; the `max_connects`-th
        within `window` bans the client id for `ban_time`."""
        self._connects += 1
        if self._connects % FORGET_EVERY == 0:
            self._flapping.forget_idle(now)
        if self._flapping.connect(client_id, now):
            logger.warning(
                "client %r flapping: %d CONNECTs within %g s; banned for %g s ([flapping])",
                client_id,
                self._flapping.max_connects,
                self._flapping.window,
                self._ban_time,
            )
            self.add(Ban(BanKind.CLIENT_ID, client_id, now + self._ban_time, "flapping", now))

    def refusal(self, client: ClientInfo, now: float) -> str | None:
        """Why the bans in force refuse this CONNECT at `now`, or None."""
        ban = self.table.match(client.client_id, client.username, client.peer, now)
        if ban is None:
            return None
        self.refused += 1
        return _why(ban)

    def client_id_refusal(self, client_id: str, now: float) -> str | None:
        """Why a ban of `client_id` itself refuses it at `now`, or None (a pool's home
        worker answers a claim with it, pool.node)."""
        ban = self.table.get(BanKind.CLIENT_ID, client_id) if self.table else None
        if ban is None or ban.expired(now):
            return None
        self.refused += 1
        return _why(ban)

    def add(self, ban: Ban, *, replicate: bool = True) -> None:
        """Add `ban` (replacing one of its kind and value); `replicate=False`: it comes
        from another worker, which told the rest of the pool already."""
        self.table.add(ban)
        logger.info("ban added: %s %s until %s", ban.kind.value, ban.value, ban.until or "lifted")
        self._save()
        if replicate and self.replica is not None:
            self.replica.ban_added(ban)

    def remove(self, kind: BanKind, value: str, *, replicate: bool = True) -> bool:
        removed = self.table.remove(kind, value)
        if removed:
            logger.info("ban removed: %s %s", kind.value, value)
            self._save()
        if replicate and self.replica is not None:
            # Told even when this worker had none: another one may (a flapping ban that
            # arrived here after the operator's list was read).
            self.replica.ban_removed(kind, value)
        return removed

    def settle(self) -> None:
        """Wait until the bans added or lifted here are recorded beyond this worker (a
        cluster's bucket), within the replica's bound; at once without a replica."""
        if self.replica is not None:
            self.replica.settle()

    def _load(self, path: Path) -> None:
        bans = read_bans(path)
        if bans is None:
            return
        for ban in bans:
            self.table.add(ban)
        logger.info("bans: %d in force, from %s", len(self.table), path)

    def _save(self) -> None:
        path = self._path
        if path is None:
            return
        bans = [ban.as_dict() for ban in self.table.bans(time.time())]
        temporary = path.with_suffix(".tmp")
        try:
            with temporary.open("wb") as file:
                file.write(orjson.dumps(bans, option=orjson.OPT_INDENT_2))
                file.flush()
                os.fsync(file.fileno())
            temporary.replace(path)
        except OSError as error:
            logger.error(
                "cannot write the bans to %s: %s; they hold until a restart (check the data "
                "directory's permissions and free space)",
                path,
                error,
            )


def read_bans(path: Path) -> list[Ban] | None:
    """The bans in force in the bans file `path`; None if there is none or it cannot be read
    (logged). A malformed entry is skipped with an error line."""
    try:
        raw = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as error:
        logger.error("cannot read the bans in %s: %s; starting with no bans", path, error)
        return None
    now = time.time()
    bans = []
    for entry in raw if isinstance(raw, list) else []:
        try:
            ban = ban_from_dict(entry)
        except (BanError, TypeError, AttributeError) as error:
            logger.error("%s: skipped a malformed ban %r: %s", path, entry, error)
            continue
        if not ban.expired(now):
            bans.append(ban)
    return bans


def _why(ban: Ban) -> str:
    """The Reason String of a CONNACK 0x8A for `ban`."""
    return f"banned ({ban.kind.value} {ban.value}{': ' + ban.reason if ban.reason else ''})"
