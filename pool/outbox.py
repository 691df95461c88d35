"""What one publish batch sends to each other worker: one frame per worker, pure.

`ForwardOutbox` collects, per worker and in order, the messages of a batch that worker wants
for its ordinary subscribers (`add`) and those it was picked for on behalf of a share group
(`add_share`, docs/pool.md). A message wanted both ways travels once, marked with both.
`frames()` gives one `Forward` per worker, or a `ForwardShared` when any of its messages is
for a share group, and empties the outbox.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.message import Message
from core.share_origin import ShareMark, ShareOrigin
from pool.frames.forwarding import Forward, ForwardShared


class ForwardOutbox:
    __slots__ = ("_marks", "_messages")

    def __init__(self) -> None:
        self._messages: dict[int, list[Message]] = {}
        self._marks: dict[int, dict[int, ShareMark]] = {}  # worker -> {index: its mark}

    def __bool__(self) -> bool:
        return bool(self._messages)

    def add(self, workers: Iterable[int], message: Message) -> None:
        """`message` goes to the ordinary subscribers of each of `workers`."""
        outgoing = self._messages
        for worker in workers:
            batch = outgoing.get(worker)
            if batch is None:
                outgoing[worker] = [message]
            else:
                batch.append(message)

    def add_share(self, worker: int, message: Message, share: ShareOrigin) -> None:
        """`message` goes to one member on `worker` of the group `share` names (avoiding
        `share.tried`); added just after `add` of the same message, it rides on that."""
        batch = self._messages.setdefault(worker, [])
        marks = self._marks.setdefault(worker, {})
        if batch and batch[-1] is message:
            index = len(batch) - 1
            mark = marks.get(index, ShareMark(True, ()))
        else:
            index = len(batch)
            batch.append(message)
            mark = ShareMark(False, ())
        marks[index] = ShareMark(mark.ordinary, (*mark.shares, share))

    def frames(self, publisher: int = 0) -> list[tuple[int, Forward | ForwardShared]]:
        """(worker, frame) for every worker with messages, naming the sender's `publisher`
        (0: none, see `pool.flow_control`); the outbox is empty after."""
        frames: list[tuple[int, Forward | ForwardShared]] = []
        for worker, messages in self._messages.items():
            marks = self._marks.get(worker)
            if marks is None:
                frames.append((worker, Forward(tuple(messages), publisher)))
            else:
                plain = ShareMark(True, ())
                every = tuple(marks.get(index, plain) for index in range(len(messages)))
                frames.append((worker, ForwardShared(tuple(messages), every, publisher)))
        self._messages.clear()
        self._marks.clear()
        return frames
