"""Which member of a share group gets a message: the strategies of `[shared_subscriptions]`.

Pure: `SharePicker.pick` takes the group, what the message is (topic, publisher) and the
members to avoid, and returns a member; its only state is the round-robin position and the
sticky choice of each group (at most `MAX_REMEMBERED_GROUPS`), plus a seeded
`random.Random`. The names are EMQX's:

- `round_robin` (default): the members in turn, per group;
- `random`: uniformly at random;
- `hash_clientid`: by a stable hash (CRC-32) of the PUBLISHER's client id, so one publisher's
  messages go to one member while the group does not change (in a pool: the hash picks a
  worker, weighted by its members, then one of its members, so every worker agrees);
- `hash_topic`: the same by topic name;
- `sticky`: the member chosen first keeps getting the group's messages until it leaves (or
  is avoided), then another is chosen at random and sticks;
- `local`: members on this worker first (`ShareMember.worker == local_worker`), in turn;
  then, in a cluster, the members on this node's other workers; members on other workers
  (nodes) only when no nearer one can take it. With one process every member is local, so
  it behaves as `round_robin`.

In a process pool (and a cluster) the members of a group include stand-ins for the other
workers' members (`router.share_replica`; another node's workers have ids from
`PEER_SHARE_IDS` on): the picker treats them as members, and the dispatcher forwards a
message whose pick is a stand-in to that worker, which picks among its own members.

`avoid` holds client ids that must not get the message unless no one else can: the members
that already gave it back (see redispatch in `actors.dispatch`). When every member is to be
avoided the picker answers None.
"""

from __future__ import annotations

import random
import zlib
from enum import Enum

from router.share_replica import PEER_SHARE_IDS
from router.shared import ShareGroup, ShareMember


class Strategy(Enum):
    ROUND_ROBIN = "round_robin"
    RANDOM = "random"
    HASH_CLIENTID = "hash_clientid"
    HASH_TOPIC = "hash_topic"
    STICKY = "sticky"
    LOCAL = "local"


STRATEGY_NAMES = tuple(strategy.value for strategy in Strategy)

GroupKey = tuple[str, str]  # (share name, topic filter)
# Groups whose turn or sticky choice is remembered; beyond it the memory starts afresh (a
# round restarts, a sticky group chooses again), so groups that come and go cannot fill it.
MAX_REMEMBERED_GROUPS = 10_000


class SharePicker:
    """Picks one member per group and message; one picker per worker (the dispatcher's)."""

    __slots__ = ("_local_worker", "_next", "_random", "_sticky", "strategy")

    def __init__(
        self, strategy: Strategy, *, seed: int | None = None, local_worker: int = 0
    ) -> None:
        self.strategy = strategy
        self._random = random.Random(seed)
        self._local_worker = local_worker
        self._next: dict[GroupKey, int] = {}  # round robin: the position of the next turn
        self._sticky: dict[GroupKey, str] = {}  # sticky: the chosen member's client id

    def pick(
        self,
        group: ShareGroup,
        topic: str,
        publisher: str,
        avoid: frozenset[str] = frozenset(),
    ) -> ShareMember | None:
        """The member of `group` that gets a message published by `publisher` on `topic`."""
        members = group.members
        if avoid:
            members = tuple(m for m in members if m.client_id not in avoid)
        if not members:
            return None
        key = (group.group, group.topic_filter)
        strategy = self.strategy
        if strategy is Strategy.ROUND_ROBIN:
            return self._in_turn(key, members)
        if strategy is Strategy.RANDOM:
            return members[self._random.randrange(len(members))]
        if strategy is Strategy.HASH_CLIENTID:
            return _hashed(members, zlib.crc32(publisher.encode()))
        if strategy is Strategy.HASH_TOPIC:
            return _hashed(members, zlib.crc32(topic.encode()))
        if strategy is Strategy.STICKY:
            chosen = self._sticky.get(key)
            for member in members:
                if member.client_id == chosen:
                    return member
            member = members[self._random.randrange(len(members))]
            if len(self._sticky) >= MAX_REMEMBERED_GROUPS:
                self._sticky.clear()
            self._sticky[key] = member.client_id
            return member
        local = tuple(m for m in members if m.worker == self._local_worker)
        if not local:
            local = tuple(m for m in members if m.worker < PEER_SHARE_IDS)
        return self._in_turn(key, local or members)

    def _in_turn(self, key: GroupKey, members: tuple[ShareMember, ...]) -> ShareMember:
        position = self._next.get(key)
        if position is None:
            if len(self._next) >= MAX_REMEMBERED_GROUPS:
                self._next.clear()
            position = 0
        position %= len(members)
        self._next[key] = position + 1
        return members[position]


def _hashed(members: tuple[ShareMember, ...], digest: int) -> ShareMember:
    """The member `digest` points at: first the worker (each worker's share is its number of
    members), then, by the same digest, one of that worker's members. With one process that
    is `members[digest % len(members)]`; in a pool every worker, picking among its own
    members or stand-ins for the others', lands on the same member."""
    worker = members[digest % len(members)].worker
    on_worker = [member for member in members if member.worker == worker]
    return on_worker[digest % len(on_worker)]
