"""What a publisher's worker keeps for the persistent sessions of a worker that died, until
every worker hosts them again (docs/pool.md "A worker dies"); pure.

A QoS 1/2 message for a persistent session on another worker is stored by that worker, and
the publisher's acknowledgement waits for its commit (`CommitSync` / `Committed`). A worker
that dies takes with it what it had not committed, and until its sessions are hosted again
(their homes re-host them, the restarted worker restores its own) nothing stores what is
published to them. So the publisher's worker keeps, in memory:

- `DurableSends`: per worker, the QoS 1/2 messages sent to it for its persistent sessions,
  and those sent to its members of share groups (the picks), per commit token, until that
  worker confirms their commit; a dead worker's picks go to the groups' other members
  (docs/pool.md "Share groups span the workers");
- `OrphanedMessages`: per dead worker, the filters of its persistent sessions (from the
  `durable` replica), the messages it may not have stored (the unconfirmed ones) and every
  later QoS 1/2 message those filters match, and the acknowledgements that wait. Every
  worker adopts part of the dead worker's sessions (the homes, and the dead worker's next
  life) and says so (`Adopted`); it is then given the messages (`Orphans`), and once it has
  committed them it is done. When every worker is done, the acknowledgements go; the
  messages are kept a little longer for a late adopter (a CONNECT that was waiting for the
  dead worker to hand its session over loads it from the store instead).

A message the adopter already has (the dead worker committed it) is known by its message
id there (`core.move_in.MoveIn.orphaned`), so QoS 2 stays exactly once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from core.message import Message
from core.share_origin import ShareOrigin
from router.route_table import RouteTable

# A QoS 1/2 message sent to a worker for one of its members of a share group.
Pick = tuple[Message, ShareOrigin]


class Lost(NamedTuple):
    """What a dead worker never confirmed: the commit tokens, the messages for its
    persistent sessions and its members' picks, each in the order sent."""

    tokens: list[int]
    messages: list[Message]
    picks: list[Pick]


class DurableSends:
    """Per worker: (commit token, QoS 1/2 messages sent to it for its persistent sessions,
    picks for its share groups' members) not yet confirmed, oldest first."""

    __slots__ = ("_sent",)

    def __init__(self) -> None:
        self._sent: dict[int, deque[tuple[int, list[Message], list[Pick]]]] = {}

    def sent(self, worker: int, token: int, messages: list[Message], picks: list[Pick]) -> None:
        """`messages` and `picks` went to `worker` before `CommitSync(token)`."""
        queue = self._sent.get(worker)
        if queue is None:
            queue = self._sent[worker] = deque()
        queue.append((token, messages, picks))

    def confirmed(self, worker: int, token: int) -> None:
        """`worker` committed everything it got before `CommitSync(token)` (links are FIFO,
        so every earlier token is confirmed too)."""
        queue = self._sent.get(worker)
        while queue and queue[0][0] <= token:
            queue.popleft()

    def lost(self, worker: int) -> Lost:
        """`worker` died (or left): what it never confirmed."""
        lost = Lost([], [], [])
        for token, messages, picks in self._sent.pop(worker, ()):
            lost.tokens.append(token)
            lost.messages.extend(messages)
            lost.picks.extend(picks)
        return lost


class _Orphan:
    __slots__ = ("acks", "filters", "messages", "serving", "since", "waiting")

    def __init__(self, workers: Iterable[int], since: float) -> None:
        self.filters: RouteTable[int, bool] = RouteTable()
        self.messages: list[Message] = []
        self.waiting = set(workers)  # workers that have not adopted their part yet
        self.serving: set[int] = set()  # given the messages, their commit not confirmed
        self.acks: list[int] = []  # tokens of the acknowledgements waiting
        self.since = since  # when the worker died; once resolved, when that happened


class OrphanedMessages:
    """The dead workers' persistent sessions as this worker keeps messages for them; see
    the module docstring."""

    __slots__ = ("active", "resolved")

    def __init__(self) -> None:
        # Dead workers whose sessions are not all adopted yet: read directly on the publish
        # path (empty: nothing to keep).
        self.active: dict[int, _Orphan] = {}
        # Dead workers every worker has adopted from, kept for `RESOLVED_GRACE` seconds: a
        # CONNECT that was waiting for the dead worker's hand-over adopts its session late.
        self.resolved: dict[int, _Orphan] = {}

    def died(
        self,
        dead: int,
        filters: Iterable[str],
        *,
        lost: list[Message],
        tokens: list[int],
        workers: Iterable[int],
        now: float,
    ) -> None:
        """`dead` went down with persistent sessions subscribed to `filters`; `lost`
        were sent to it and not confirmed, and the acknowledgements `tokens` waited on
        them. Every one of `workers` adopts a part of its sessions."""
        self.resolved.pop(dead, None)
        orphan = self.active.get(dead)
        if orphan is None:
            orphan = self.active[dead] = _Orphan(workers, now)
        else:  # it died again before every worker adopted its sessions
            orphan.waiting.update(workers)
        for topic_filter in filters:
            orphan.filters.add(topic_filter, dead, True)
        orphan.messages += lost
        orphan.acks += tokens

    def keep(self, message: Message) -> list[int]:
        """The dead workers with a persistent session that `message` (QoS 1/2) is for, not
        all adopted yet; it is kept for each of them."""
        kept: list[int] = []
        for dead, orphan in self.active.items():
            if orphan.filters.match(message.topic):
                orphan.messages.append(message)
                kept.append(dead)
        return kept

    def wait(self, dead: int, token: int) -> None:
        """The acknowledgement `token` waits until every worker adopted `dead`'s sessions."""
        self.active[dead].acks.append(token)

    def adopted(self, dead: int, adopter: int) -> tuple[Message, ...] | None:
        """`adopter` hosts a part of `dead`'s sessions, their routes known here: the
        messages to give it (also to a late adopter, within the grace). None: nothing is
        kept for `dead`."""
        orphan = self.active.get(dead)
        if orphan is not None:
            orphan.waiting.discard(adopter)
            orphan.serving.add(adopter)
        else:
            orphan = self.resolved.get(dead)
            if orphan is None:
                return None
        return tuple(orphan.messages)

    def committed(self, dead: int, adopter: int, now: float) -> list[int] | None:
        """`adopter` committed what it was given: the acknowledgements to release if every
        worker is now done with `dead`; else None."""
        orphan = self.active.get(dead)
        if orphan is None:
            return None
        orphan.serving.discard(adopter)
        return self._done(dead, orphan, now)

    def gone(self, worker: int, now: float) -> list[tuple[int, list[int]]]:
        """`worker` went down too: it adopts nothing more. The (dead worker, tokens) whose
        acknowledgements that leaves nobody to wait for."""
        released = []
        for dead, orphan in list(self.active.items()):
            orphan.waiting.discard(worker)
            orphan.serving.discard(worker)
            tokens = self._done(dead, orphan, now)
            if tokens is not None:
                released.append((dead, tokens))
        return released

    def expired(self, now: float, timeout: float, grace: float) -> list[tuple[int, _Orphan]]:
        """The dead workers whose sessions were not all adopted within `timeout` seconds,
        given up: (worker, what was kept: its `acks`, `messages`, `waiting`, `serving`).
        Resolved ones older than `grace` are forgotten."""
        late = [(dead, o) for dead, o in self.active.items() if now - o.since >= timeout]
        for dead, _orphan in late:
            del self.active[dead]
        for dead in [d for d, o in self.resolved.items() if now - o.since >= grace]:
            del self.resolved[dead]
        return late

    def _done(self, dead: int, orphan: _Orphan, now: float) -> list[int] | None:
        if orphan.waiting or orphan.serving:
            return None
        del self.active[dead]
        self.resolved[dead] = orphan
        orphan.since = now
        acks, orphan.acks = orphan.acks, []
        return acks
