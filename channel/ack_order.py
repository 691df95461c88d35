"""The order of a connection's acknowledgements across its reads [MQTT-4.6.0-2] [MQTT-4.6.0-3].

The server must send PUBACKs in the order of the QoS 1 PUBLISHes they answer, and PUBRECs in
the order of the QoS 2 ones. A batch (one read's PUBLISHes, `channel.pubacks`) is answered
in order, but batches are answered when their outcome is known: at once, or after a store
commit (a message for a persistent subscriber is written ahead), or by the session (QoS 2,
which records the packet id first). So a later batch could be answered before an earlier one.

`AckOrder` is the connection's queue of answers, pure: the channel reserves a slot
(`reserve`) for each batch's PUBACKs and for each batch's PUBRECs, in the order of the
PUBLISHes; whoever learns a batch's answer fills its slot with the bytes (`AckSlot.fill`, an
empty answer included); the bytes of filled slots are released (`take`) only once every
earlier slot is filled, so they leave in slot order whichever commit completes first. Who
writes them (`actors.client_actor`) takes everything released, so bytes released by
different writers cannot overtake each other either.

A slot that is never filled holds every later one, until the connection ends: a batch whose
commit never comes (the store fails for good), or one whose session went away. A slot filled
as the `last` (a 3.x client refused because the store fails, whose connection is closed
instead of answered) is released in its turn, and nothing after it ever is. The answers
behind such a slot are never sent, which MQTT allows (the client sends the PUBLISHes again
on its next connection if it keeps its session; a QoS 1 message may arrive twice), whereas
sending them would acknowledge later PUBLISHes before an earlier one.
"""

from __future__ import annotations


class AckOrder:
    """One connection's acknowledgements, released in the order their slots were reserved."""

    __slots__ = ("_filled", "_head", "_last", "_next", "_ready")

    def __init__(self) -> None:
        self._next = 0  # the number of the next slot reserved
        self._head = 0  # the first slot not yet released
        self._filled: dict[int, bytes] = {}  # slots filled behind an unfilled one
        self._ready: list[bytes] = []  # released, not yet taken
        self._last: int | None = None  # the last slot ever released (`fill(last=True)`)

    def reserve(self) -> AckSlot:
        """The slot of the next batch's acknowledgements (in the order of their PUBLISHes)."""
        slot = AckSlot(self, self._next)
        self._next += 1
        return slot

    def fill(self, number: int, data: bytes, *, last: bool = False) -> bool:
        """Slot `number` is answered with `data` (b"": nothing to send). Returns whether this
        released bytes (its own or those held behind it): `take` them. `last`: the
        connection is being closed after `data` (a refusal that has no acknowledgement to
        say it with): nothing after this slot is ever released, its answers are dropped."""
        if not self._head <= number < self._next or number in self._filled:
            raise ValueError(f"slot {number} is not waiting to be filled")
        final = self._last
        if final is not None and number > final:
            return False  # behind the last one: never sent
        if last:
            self._last = final = number
            for later in [n for n in self._filled if n > number]:
                del self._filled[later]
        if number != self._head:
            self._filled[number] = data
            return False
        ready = self._ready
        before = len(ready)
        if data:
            ready.append(data)
        head = number + 1
        filled = self._filled
        while head in filled and (final is None or head <= final):
            data = filled.pop(head)
            if data:
                ready.append(data)
            head += 1
        self._head = head
        return len(ready) > before

    def take(self) -> bytes:
        """The bytes released so far and not taken yet, in order."""
        ready = self._ready
        if not ready:
            return b""
        data = ready[0] if len(ready) == 1 else b"".join(ready)
        ready.clear()
        return data

    @property
    def ready(self) -> bool:
        """Whether released bytes wait to be taken."""
        return bool(self._ready)

    @property
    def waiting(self) -> int:
        """The slots reserved and not yet released (filled behind an unfilled one or not)."""
        return self._next - self._head

    @property
    def held(self) -> int:
        """The slots filled but held behind an earlier unfilled one."""
        return len(self._filled)


class AckSlot:
    """One batch's place in its connection's `AckOrder`."""

    __slots__ = ("number", "order")

    def __init__(self, order: AckOrder, number: int) -> None:
        self.order = order
        self.number = number

    def fill(self, data: bytes, *, last: bool = False) -> bool:
        """Answer this batch with `data`; whether bytes were released (`AckOrder.take`).
        `last`: nothing after it is ever released (`AckOrder.fill`)."""
        return self.order.fill(self.number, data, last=last)

    def __repr__(self) -> str:
        return f"AckSlot({self.number})"
