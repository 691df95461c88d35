"""Bans that hold across the cluster (docs/cluster.md "Bans"): a JetStream key-value bucket
of their own, `mqtt-<cluster>-bans`, which every worker of every node watches.

A ban is one key, its kind and its value (base64url, as keys allow few characters:
`clientid.Y2xpZW50LTE=`), holding the ban as JSON (`Ban.as_dict`); a lift deletes the key.

- `ClusterBans` is the worker's `BanReplica` (actors.admission), in front of the pool's
  (`pool.ops.PoolOps`, if any): a ban added or lifted here (the admin API, `ctl`, flapping
  detection) holds here at once, is broadcast to the node's other workers as on one node,
  and is written to the bucket, one write at a time in the order made, each within
  `[cluster] claim_timeout`. A write is conditional on the key's revision this worker knew
  when the change was made, so a change made meanwhile through another node holds over it
  (and reaches this node through the watch). One that cannot be written (NATS is down, or
  this node is cut off) holds on this node only for the time being, with a warning, and is
  tried again every RETRY_EVERY seconds until the bucket takes it, while the changes made
  after it wait behind it.
- Every worker watches the bucket and applies each put and delete to its own table without
  telling anyone (the watch tells every worker of every node). Its start waits, at most
  `claim_timeout`, for the watch's initial values, so a node opens its listeners with the
  cluster's bans.
- Worker 0 of each node imports the node's `bans.json` once, when it starts in a cluster:
  the bans the bucket has never held are created in it (a ban made elsewhere is never
  overwritten, and one lifted elsewhere, whose key's deletion the bucket keeps, is not
  brought back), and the file is renamed `bans.json.imported`, so that it brings back no ban
  lifted later elsewhere. The bucket is then the node's only record of its bans.
- Worker 0 of each node deletes the key of each ban as it expires (within SWEEP_PAUSE), at
  the revision it saw (a ban made again meanwhile stays); a table ignores expired bans
  anyway. Every node sweeps, so the key of a ban whose maker has stopped goes too; a
  deletion that fails is tried again SWEEP_EVERY seconds later.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import gevent
import gevent.event
import orjson
from nats.aio.client import Client
from nats.js.errors import (
    APIError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from actors.admission import Admission, BanReplica, read_bans
from cluster.config import ClusterConfig
from cluster.nats_link import Job, NatsLink
from cluster.registry import KvBucket, answered, key_of, text_of
from core.bans import Ban, BanKind, ban_from_dict, parse_network

logger = logging.getLogger(__name__)

SWEEP_EVERY = 60.0  # seconds worker 0's sweep sleeps at most, and before a deletion again
SWEEP_PAUSE = 1.0  # seconds worker 0's sweep sleeps at least
RETRY_EVERY = 1.0  # seconds between tries of a ban change the bucket did not take
IMPORTED = ".imported"  # what a node's bans file is renamed with once in the bucket
_WRONG_LAST = (10071, 10164)  # JetStream's errors: the key is not at the revision given
_DELETIONS = ("DEL", "PURGE")

# What the watch tells: a key and its value (None: deleted), at a revision.
Seen = Callable[[str, bytes | None, int], None]


class SupersededError(Exception):
    """The key was changed by someone else since the revision a write was conditional on."""


def wrong_last(error: APIError) -> bool:
    """Whether `error` says a key was not at the revision a write expected."""
    return isinstance(error, KeyWrongLastSequenceError) or error.err_code in _WRONG_LAST


def ban_key(kind: BanKind, value: str) -> str:
    """The bucket key of the ban of `kind` on `value`; a peer address as its normalised
    network, as the table keeps it."""
    if kind is BanKind.PEER:
        value = str(parse_network(value))
    return f"{kind.value}.{key_of(value)}"


def ban_of_key(key: str) -> tuple[BanKind, str]:
    """The kind and value `ban_key` made `key` of; ValueError if it made no such key."""
    kind, _, encoded = key.partition(".")
    return BanKind(kind), text_of(encoded)


class BanBucket(KvBucket):
    """The bans' bucket, on the NATS loop (coroutines run by `NatsLink.run`)."""

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config, "bans")

    async def write(self, client: Client, key: str, value: bytes | None, last: int) -> int:
        """Put `value` at `key` (None: delete it; a key already gone is fine) if the key is
        still at revision `last` (0: never written; a deletion at 0 is not conditional) or
        already holds `value` (an earlier try was taken but not answered: nats-py sends
        again what was published while it reconnected), and return the key's revision
        after; else `SupersededError`."""
        kv = await answered(lambda: self.open(client))
        try:
            if value is None:
                await answered(lambda: kv.delete(key, last=last))
            else:
                return await answered(lambda: kv.update(key, value, last=last))
        except APIError as error:
            if not wrong_last(error):
                raise
            held, revision = await self._held(kv, key)
            if held != value:
                raise SupersededError(f"it is at revision {revision}, not {last}") from None
            return revision
        return (await self._held(kv, key))[1]

    @staticmethod
    async def _held(kv: KeyValue, key: str) -> tuple[bytes | None, int]:
        """What `key` holds (None: deleted, or never written) and its revision (0: never)."""
        try:
            entry = await answered(lambda: kv.get(key))
        except KeyDeletedError as deleted:
            return None, deleted.entry.revision if deleted.entry is not None else 0
        except KeyNotFoundError:
            return None, 0
        return entry.value, entry.revision or 0

    async def delete_expired(self, client: Client, key: str, revision: int) -> bool:
        """Delete `key` if it is still at `revision`; whether it was."""
        kv = await answered(lambda: self.open(client))
        try:
            await answered(lambda: kv.delete(key, last=revision))
        except APIError as error:
            if wrong_last(error):
                return False  # lifted, or made again, meanwhile
            raise
        return True

    async def create(self, client: Client, bans: list[Ban]) -> int:
        """Create the key of each of `bans` that the bucket has never held; how many."""
        kv = await answered(lambda: self.open(client))
        created = 0
        for ban in bans:
            key, value = ban_key(ban.kind, ban.value), orjson.dumps(ban.as_dict())
            try:  # not `kv.create`, which writes over a deleted key: a ban lifted elsewhere
                await answered(partial(kv.update, key, value, last=0))
            except KeyWrongLastSequenceError:
                continue  # there, or lifted (made elsewhere, or by an earlier import)
            created += 1
        return created

    async def watch(
        self,
        client: Client,
        seen: Seen,
        read: Callable[[], None],
        reconnected: Callable[[], Awaitable[None]],
    ) -> None:
        """Tell `seen` (from the NATS loop) of every key, now and as it changes, until
        cancelled; `read()` once the keys the watch found are told. After each reconnection
        every key is told again, deleted ones included (`watch_entries`)."""

        def entry_seen(entry: KeyValue.Entry | None) -> None:
            if entry is None:
                read()  # the end of the initial values
            elif entry.revision is not None:
                deleted = entry.operation in _DELETIONS
                seen(entry.key, None if deleted else (entry.value or b""), entry.revision)

        await self.watch_entries(client, entry_seen, reconnected)


class _Write:
    """A put (`value`) or a delete (None) of the bucket, and when its first try is over."""

    __slots__ = ("done", "key", "known", "retried", "value", "what")

    def __init__(self, key: str, value: bytes | None, what: str, known: int) -> None:
        self.key = key
        self.value = value
        self.what = what  # "the ban of clientid 'x'", for the log
        self.done = gevent.event.Event()
        # The key's latest revision this worker knew when the change was made (or wrote
        # since, itself): every try is conditional on it, and the watch's news of it or
        # older do not undo the change meanwhile.
        self.known = known
        self.retried = False


class ClusterBans:
    """This worker's bans in the cluster; see the module docstring."""

    def __init__(
        self,
        config: ClusterConfig,
        link: NatsLink,
        worker: int,
        admission: Admission,
        bans_file: Path | None,
    ) -> None:
        self._config = config
        self._link = link
        self._worker = worker
        self._admission = admission
        self._file = bans_file  # worker 0's: the node's bans file, imported once
        self._bucket = BanBucket(config)
        self._pool: BanReplica | None = None  # the node's other workers (`PoolOps`)
        self._writes: deque[_Write] = deque()  # in the order made; the first is under way
        self._revisions: dict[str, int] = {}  # key -> its latest revision this worker knows
        self._read = gevent.event.Event()  # set: the watch's initial values are applied
        # Worker 0: key -> (until, revision) of the bans with an end that the bucket holds.
        self._ending: dict[str, tuple[float, int]] = {}
        self._sweeping: set[str] = set()  # keys whose deletion is under way or failed lately
        self._ending_added = gevent.event.Event()  # set: the sweep may be due sooner
        self._sweeper: gevent.Greenlet[[], None] | None = None
        self._retry: gevent.Greenlet[[_Write], None] | None = None  # the next try, if due

    def start(self) -> None:
        """Stand in front of the pool's replica, import the node's bans file (worker 0),
        watch the bucket, and wait at most `claim_timeout` for the bans it holds."""
        admission = self._admission
        self._pool, admission.replica = admission.replica, self
        bans = None if self._file is None else read_bans(self._file)
        if bans is None:
            self._watch()
        else:
            self._link.run(
                lambda client: self._bucket.create(client, bans),
                partial(self._imported, len(bans)),
                timeout=None,
            )
        if self._worker == 0:
            self._sweeper = gevent.spawn(self._sweep)
        if not self._read.wait(self._config.claim_timeout):
            logger.warning(
                "cluster: the bans in bucket %s were not read within %s s ([cluster] "
                "claim_timeout); CONNECTs are checked against them once they are. Is NATS "
                "(with JetStream) reachable?",
                self._bucket.name,
                self._config.claim_timeout,
            )

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.kill()
        if self._retry is not None:
            self._retry.kill()
        if self._writes:
            logger.error(
                "cluster: %d ban changes (the first: %s) were never written to bucket %s: "
                "they are lost with this stop; make them again through a node linked to NATS",
                len(self._writes),
                self._writes[0].what,
                self._bucket.name,
            )

    # ----- BanReplica: bans made or lifted on this worker -----------------------------------

    def ban_added(self, ban: Ban) -> None:
        if self._pool is not None:
            self._pool.ban_added(ban)
        what = f"the ban of {ban.kind.value} {ban.value!r}"
        self._write(ban_key(ban.kind, ban.value), orjson.dumps(ban.as_dict()), what)

    def ban_removed(self, kind: BanKind, value: str) -> None:
        if self._pool is not None:
            self._pool.ban_removed(kind, value)
        what = f"the lift of the ban of {kind.value} {value!r}"
        self._write(ban_key(kind, value), None, what)

    def settle(self) -> None:
        """Wait until the writes made so far are over, at most `claim_timeout`."""
        if self._writes:
            self._writes[-1].done.wait(self._config.claim_timeout)

    def _write(self, key: str, value: bytes | None, what: str) -> None:
        write = _Write(key, value, what, self._revisions.get(key, 0))
        self._writes.append(write)
        if len(self._writes) == 1:
            self._send(write)

    def _send(self, write: _Write) -> None:
        last = write.known
        self._link.run(
            lambda client: self._bucket.write(client, write.key, write.value, last),
            partial(self._written, write),
            timeout=self._config.claim_timeout,
        )

    def _written(self, write: _Write, revision: int | None, error: BaseException | None) -> None:
        """The end of a try of `write`, the first of `_writes`: the next one's turn, unless
        the bucket did not take it (it is tried again, the next ones wait)."""
        retried = write.retried
        if revision is not None:
            self._known(write.key, revision)
            for later in self._writes:  # made before this one was taken: it is theirs too
                if later.key == write.key and later.known < revision:
                    later.known = revision
            if retried:
                logger.info(
                    "cluster: %s is written to bucket %s now that it is reachable: it holds "
                    "on every node",
                    write.what,
                    self._bucket.name,
                )
        elif isinstance(error, SupersededError):
            logger.warning(
                "cluster: %s is not written to bucket %s: another node changed that ban "
                "meanwhile (%s), and its change holds on every node, this one included",
                write.what,
                self._bucket.name,
                error,
            )
        else:
            if not retried:
                write.retried = True
                logger.warning(
                    "cluster: %s holds on this node only for now: bucket %s could not be "
                    "written within %s s ([cluster] claim_timeout): %s; it is tried again "
                    "every %.0f s and written once NATS is back (unless that ban is changed "
                    "through another node meanwhile)",
                    write.what,
                    self._bucket.name,
                    self._config.claim_timeout,
                    str(error) or type(error).__name__,
                    RETRY_EVERY,
                )
                write.done.set()
            self._retry = gevent.spawn_later(RETRY_EVERY, self._send, write)
            return
        self._writes.popleft()
        write.done.set()
        if self._writes:
            self._send(self._writes[0])

    def _known(self, key: str, revision: int) -> None:
        if revision > self._revisions.get(key, 0):
            self._revisions[key] = revision

    # ----- the bucket's content -------------------------------------------------------------

    def _imported(self, count: int, created: int | None, error: BaseException | None) -> None:
        path = self._file
        assert path is not None
        if created is None:
            logger.warning(
                "cluster: the %d bans of %s could not be put in bucket %s (%s); the file is "
                "kept and imported at the next start",
                count,
                path,
                self._bucket.name,
                str(error) or type(error).__name__,
            )
        else:
            target = path.with_name(path.name + IMPORTED)
            try:
                path.replace(target)
            except OSError as rename_error:
                logger.error(
                    "cluster: cannot rename %s to %s after importing its bans: %s; rename or "
                    "remove it, or its bans are imported again at the next start",
                    path,
                    target.name,
                    rename_error,
                )
            else:
                logger.info(
                    "cluster: imported the bans of %s into bucket %s (%d put, %d there or "
                    "lifted already); the file is renamed %s: the bucket keeps the cluster's "
                    "bans",
                    path,
                    self._bucket.name,
                    created,
                    count - created,
                    target.name,
                )
        self._watch()

    def _watch(self) -> None:
        self._link.run(
            lambda client: self._bucket.watch(
                client, self._seen_on_nats_loop, self._was_read, self._link.reconnected
            ),
            self._watch_ended,
            timeout=None,
        )

    def _seen_on_nats_loop(self, key: str, value: bytes | None, revision: int) -> None:
        self._link.post(partial(self._seen, key, value, revision))

    def _was_read(self) -> None:
        self._link.post(self._read.set)

    def _seen(self, key: str, value: bytes | None, revision: int) -> None:
        """The bucket's `key` holds `value` (None: deleted) at `revision`: the same in this
        worker's table, unless it is so already."""
        try:
            kind, text = ban_of_key(key)
            ban = None if value is None else ban_from_dict(orjson.loads(value))
            if ban is not None and (ban.kind, ban.value) != (kind, text):
                raise ValueError(f"it holds the ban of {ban.kind.value} {ban.value!r}")
        except (ValueError, TypeError, AttributeError) as error:
            logger.warning(
                "cluster: key %r of bucket %s holds no ban of the broker's (%s): skipped; "
                "delete it (nats kv del %s %r)",
                key,
                self._bucket.name,
                error,
                self._bucket.name,
                key,
            )
            return
        self._known(key, revision)
        if any(write.key == key and revision <= write.known for write in self._writes):
            return  # news this worker had when it made a change not written yet: it holds
        admission = self._admission
        if ban is None:
            self._ending.pop(key, None)
            if admission.table.get(kind, text) is not None:
                admission.remove(kind, text, replicate=False)
            return
        if ban.until is not None and self._worker == 0:
            self._ending[key] = (ban.until, revision)
            self._ending_added.set()
        else:
            self._ending.pop(key, None)
        if not ban.expired(time.time()) and admission.table.get(kind, text) != ban:
            admission.add(ban, replicate=False)

    def _watch_ended(self, _result: None, error: BaseException | None) -> None:
        logger.error(
            "cluster: the watch of bucket %s ended (%s): bans made or lifted on other nodes "
            "reach this worker no more until it restarts",
            self._bucket.name,
            error,
        )

    def _sweep(self) -> None:
        """Delete the keys of the bans that have expired, each once it has (waking at least
        every SWEEP_EVERY and at most every SWEEP_PAUSE seconds)."""
        while True:
            now = time.time()
            ending = (
                until for key, (until, _) in self._ending.items() if key not in self._sweeping
            )
            due = min(ending, default=now + SWEEP_EVERY)
            self._ending_added.clear()
            self._ending_added.wait(min(max(due - now, 0.0), SWEEP_EVERY))
            gevent.sleep(SWEEP_PAUSE)
            now = time.time()
            for key, (until, revision) in list(self._ending.items()):
                if until <= now and key not in self._sweeping:
                    self._sweeping.add(key)
                    self._link.run(
                        self._deletion(key, revision),
                        partial(self._swept, key),
                        timeout=self._config.claim_timeout,
                    )

    def _deletion(self, key: str, revision: int) -> Job[bool]:
        return lambda client: self._bucket.delete_expired(client, key, revision)

    def _swept(self, key: str, _deleted: bool | None, error: BaseException | None) -> None:
        """A deletion is over: the watch tells what the key holds now (deleted, or a ban
        made again), which `_ending` follows; one that failed is tried again later."""
        if error is None:
            self._sweeping.discard(key)
        else:
            gevent.spawn_later(SWEEP_EVERY, self._sweeping.discard, key)
            logger.warning(
                "cluster: the key %r of an expired ban could not be deleted from bucket %s "
                "(%s); tried again in %.0f s",
                key,
                self._bucket.name,
                str(error) or type(error).__name__,
                SWEEP_EVERY,
            )
