"""ShareOrigin: the share group a delivery came through, so it can go to another member.

A delivery made for a shared subscription (`$share/{group}/{filter}`, see `router.shared`)
carries one. When its member's session cannot take it (the client is offline) or ends
before the client acknowledged it, the session gives it back and the dispatcher picks
another member of the same group, avoiding the ones in `tried` (as EMQX redispatches the
QoS 1 in-flight and queued messages of a terminated shared subscriber).
"""

from __future__ import annotations

from typing import NamedTuple


class ShareOrigin(NamedTuple):
    group: str
    topic_filter: str  # the filter inside `$share/{group}/`
    # Client ids of the members that gave it back; in a pool also the stand-in id of a
    # worker that had no member left to take it (`router.share_replica.stand_in`).
    tried: frozenset[str] = frozenset()


class ShareMark(NamedTuple):
    """What the receiver of a `ForwardShared` does with one of its messages: fan it out to
    its ordinary subscribers (`ordinary`), and give it to one local member of each group of
    `shares`, avoiding the members in each one's `tried` (docs/pool.md)."""

    ordinary: bool
    shares: tuple[ShareOrigin, ...]
