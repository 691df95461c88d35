"""At-least-once forwarding to the other nodes' workers: what a worker keeps until another
node's worker confirms it stored it, and how a worker takes numbered batches once each
(docs/cluster.md "Forwarding a QoS 1/2 message"); pure.

A publish batch with QoS 1/2 messages for another node's worker is sent to that worker as a
numbered batch: `Numbered(seq, first, epoch, awaited, parts)`, the `Forward` frames (each
naming the batch), then the pool's `CommitSync(token, seq)`, answered `Committed(token)`
once the receiver's store has committed what it got before. The sender keeps:

- `SentBatches`: per peer, every batch not confirmed yet (its number, commit token,
  messages and when it was last sent), to send again after a lost NATS connection on either
  side. Numbers go 1, 2, ... per peer and the receiver takes them in order, so
  `Committed(token)` confirms every batch up to `token` (go-back-N).
- an `AckWaits` (pool.ack_waits, the pool's structure): per commit token, the peers a
  publisher's acknowledgement still waits for; a peer taken for gone is not waited for any
  more.

The receiver keeps `ReceivedBatches`: per sender, its life (epoch) and the next number it
expects. A batch with that number is taken once it has arrived whole (its `CommitSync`:
`taken`); an older one is a resend of a batch it has (skipped, but its `CommitSync`
answered, so the sender learns it is stored); a newer one follows a batch lost on the way
and is dropped unanswered until the sender resends from the missing one; a batch addressed
to another life of the receiver (it restarted since) is dropped unanswered.
"""

from __future__ import annotations

import enum
from collections import deque

from core.message import Message
from core.share_origin import ShareOrigin
from pool.frames.forwarding import Forward, ForwardShared, Unconfirmed


class Batch:
    """One numbered batch sent to one peer: its frame (a share group's picks marked in a
    `ForwardShared`; an `Unconfirmed` for a restarted peer's restored sessions); `awaited`:
    a publisher's acknowledgement waits for the peer's confirmation of it."""

    __slots__ = ("awaited", "frame", "sent_at", "seq", "token")

    def __init__(
        self,
        seq: int,
        token: int,
        frame: Forward | ForwardShared | Unconfirmed,
        sent_at: float,
        awaited: bool,
    ) -> None:
        self.seq = seq
        self.token = token
        self.frame = frame
        self.sent_at = sent_at
        self.awaited = awaited


class _Peer:
    __slots__ = ("batches", "epoch", "next_seq")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch  # the peer's life these batches are for
        self.next_seq = 1
        self.batches: deque[Batch] = deque()  # not confirmed, oldest first


class SentBatches:
    """The numbered batches sent to each peer and not confirmed yet."""

    __slots__ = ("_peers",)

    def __init__(self) -> None:
        self._peers: dict[int, _Peer] = {}

    def peer_up(self, peer: int, epoch: int) -> list[Batch]:
        """`peer` is linked in its life `epoch`. The batches it has not confirmed, to send
        again if it is the life they were sent to; forgotten if it restarted (returned by
        `forget` before this is called)."""
        state = self._peers.get(peer)
        if state is None or state.epoch != epoch:
            self._peers[peer] = _Peer(epoch)
            return []
        return list(state.batches)

    def forget(self, peer: int, epoch: int) -> tuple[Message, ...]:
        """The messages of the unconfirmed batches of `peer`'s life other than `epoch`
        (a restart lost them, if it had not stored them), dropped here."""
        state = self._peers.get(peer)
        if state is None or state.epoch == epoch:
            return ()
        del self._peers[peer]
        return tuple(m for batch in state.batches for m in batch.frame.messages)

    def take_picks(self, peer: int) -> list[tuple[Message, ShareOrigin]]:
        """The share groups' picks in `peer`'s unconfirmed batches (each message with the
        group it was picked for), in order, taken out of them: each batch keeps its number
        and the messages for `peer`'s ordinary subscribers, if any."""
        state = self._peers.get(peer)
        picks: list[tuple[Message, ShareOrigin]] = []
        if state is None:
            return picks
        for batch in state.batches:
            frame = batch.frame
            if type(frame) is not ForwardShared:
                continue
            ordinary: list[Message] = []
            for message, mark in zip(frame.messages, frame.marks, strict=True):
                picks += [(message, share) for share in mark.shares]
                if mark.ordinary:
                    ordinary.append(message)
            batch.frame = Forward(tuple(ordinary), frame.publisher)
        return picks

    def epoch_of(self, peer: int) -> int | None:
        state = self._peers.get(peer)
        return None if state is None else state.epoch

    def add(
        self,
        peer: int,
        token: int,
        frame: Forward | ForwardShared | Unconfirmed,
        now: float,
        *,
        awaited: bool,
    ) -> Batch:
        """Number a batch (`frame`) for `peer` (known from `peer_up`), kept until a
        `Committed` of `token` or later."""
        state = self._peers[peer]
        batch = Batch(state.next_seq, token, frame, now, awaited)
        state.next_seq += 1
        state.batches.append(batch)
        return batch

    def first(self, peer: int) -> int:
        """The number of `peer`'s oldest unconfirmed batch (the next one if none)."""
        state = self._peers[peer]
        return state.batches[0].seq if state.batches else state.next_seq

    def confirmed(self, peer: int, token: int) -> list[int]:
        """`peer` committed every batch up to the one of `token`: their tokens, dropped."""
        state = self._peers.get(peer)
        tokens: list[int] = []
        if state is None:
            return tokens
        batches = state.batches
        while batches and batches[0].token <= token:
            tokens.append(batches.popleft().token)
        return tokens

    def due(self, now: float, after: float, peers: set[int]) -> dict[int, list[Batch]]:
        """For each of `peers` whose oldest unconfirmed batch was last sent more than `after`
        seconds ago (`after` < 0: every peer with any), all its unconfirmed batches, to send
        again now (their time of sending becomes `now`)."""
        due: dict[int, list[Batch]] = {}
        for peer in peers:
            state = self._peers.get(peer)
            if state is None or not state.batches:
                continue
            if after >= 0 and now - state.batches[0].sent_at <= after:
                continue
            for batch in state.batches:
                batch.sent_at = now
            due[peer] = list(state.batches)
        return due


class Verdict(enum.Enum):
    TAKE = "take"  # the next batch: delivered, its CommitSync answered
    HAVE = "have"  # a resend of a batch taken before: skipped, its CommitSync answered
    DROP = "drop"  # after a missing batch, or for another life: skipped, not answered


class ReceivedBatches:
    """Per sender: its life and the number of the next batch expected from it."""

    __slots__ = ("_expected",)

    def __init__(self) -> None:
        self._expected: dict[int, tuple[int, int]] = {}  # sender -> (its epoch, next seq)

    def batch(self, sender: int, epoch: int, seq: int, first: int) -> Verdict:
        """What to do with batch `seq` of `sender` (in its life `epoch`), which will not
        send a batch older than `first` again; a new life numbers from scratch. A batch to
        take counts as taken once `taken` says it arrived whole."""
        known = self._expected.get(sender)
        expected = first if known is None or known[0] != epoch else max(known[1], first)
        self._expected[sender] = (epoch, expected)
        if seq == expected:
            return Verdict.TAKE
        return Verdict.HAVE if seq < expected else Verdict.DROP

    def taken(self, sender: int) -> None:
        """The batch `batch` said to take arrived whole (its `CommitSync`): the next one is
        expected."""
        epoch, expected = self._expected[sender]
        self._expected[sender] = (epoch, expected + 1)
