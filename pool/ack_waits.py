"""Publishers' acknowledgements waiting for commits, by commit token (docs/pool.md
"Persistence and the publisher's PUBACK", docs/cluster.md "Forwarding a QoS 1/2 message");
pure.

A QoS 1/2 publish batch's PUBACK/PUBREC goes once this worker's store has committed it (the
callback `wait` returns) and every peer sent messages for its persistent sessions confirmed
their commit (`Committed` of the batch's token). A peer that goes does not hold it (the
cluster: taken for gone; the pool: a worker that stopped, or one that died, whose part
then becomes an orphan wait). In the pool, a batch also waits for the dead workers whose
persistent sessions are not all hosted again (`orphans`, pool.orphans): a message for
them is kept until each worker has adopted its part. The pool's node (pool.node) and the
cluster's forwarding (cluster.numbered_forwarding) keep one `AckWaits` each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class _Ack:
    __slots__ = ("local_done", "orphans", "remaining", "then")

    def __init__(self, remaining: set[int], orphans: set[int], then: Callable[[], object]):
        self.remaining = remaining  # peers whose commit it waits for
        self.orphans = orphans  # dead workers whose sessions' adoption it waits for
        self.then = then
        self.local_done = False


class AckWaits:
    """Acknowledgements waiting for this worker's commit, its peers' and the adoption of
    dead workers' sessions, by commit token."""

    __slots__ = ("_acks",)

    def __init__(self) -> None:
        self._acks: dict[int, _Ack] = {}

    def __len__(self) -> int:
        return len(self._acks)

    def wait(
        self,
        token: int,
        peers: Iterable[int],
        then: Callable[[], object],
        orphans: Iterable[int] = (),
    ) -> Callable[[], None]:
        """`then` once every one of `peers` confirmed `token` (or is gone), every one of
        the dead workers `orphans` has its sessions hosted again (`adopted`), and the
        callback returned was called (this worker's own commit)."""
        self._acks[token] = _Ack(set(peers), set(orphans), then)

        def local_part() -> None:
            ack = self._acks.get(token)
            if ack is not None:
                ack.local_done = True
                self._release_if_done(token, ack)

        return local_part

    def committed(self, peer: int, tokens: Iterable[int]) -> None:
        """`peer` confirmed its commit of what it got before each of `tokens`."""
        for token in tokens:
            ack = self._acks.get(token)
            if ack is not None:
                ack.remaining.discard(peer)
                self._release_if_done(token, ack)

    def peer_gone(self, peer: int) -> int:
        """`peer` is gone: no acknowledgement waits for its commit. How many did."""
        released = 0
        for token, ack in list(self._acks.items()):
            if peer in ack.remaining:
                released += 1
                ack.remaining.discard(peer)
                self._release_if_done(token, ack)
        return released

    def orphaned(self, dead: int, tokens: Iterable[int]) -> list[int]:
        """The worker `dead` died before it confirmed `tokens`: those of them whose
        acknowledgement waited for its commit wait for its sessions' adoption instead."""
        moved: list[int] = []
        for token in tokens:
            ack = self._acks.get(token)
            if ack is not None and dead in ack.remaining:
                ack.remaining.discard(dead)
                ack.orphans.add(dead)
                moved.append(token)
        return moved

    def adopted(self, dead: int, tokens: Iterable[int]) -> None:
        """Every worker hosts the sessions of `dead` again (or the wait for that is given
        up): the acknowledgements `tokens` no longer wait for it."""
        for token in tokens:
            ack = self._acks.get(token)
            if ack is not None:
                ack.orphans.discard(dead)
                self._release_if_done(token, ack)

    def _release_if_done(self, token: int, ack: _Ack) -> None:
        if ack.local_done and not ack.remaining and not ack.orphans:
            del self._acks[token]
            ack.then()
