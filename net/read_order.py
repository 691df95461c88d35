"""The order in which a worker hands over the reads of the sockets that were ready at once.

The kernel does not say which of several sockets ready in one poll got its data first:
epoll lists a level-triggered set in an order that follows its own history, and libev
invokes the watchers pending after one poll last first. With B's SUBSCRIBE and A's PUBLISH
both in by the time the worker polls, handing each read over from its watcher put A's
message before B's route about one time in four. Those reads are concurrent; the worker
orders them so that every route change comes first: a read watcher only queues its
connection here, and one loop callback per turn, which gevent runs after that turn's
watchers, takes every queued read and hands over first those that hold a SUBSCRIBE or an
UNSUBSCRIBE, then the others (docs/channel.md, "Routes in read order"). Each connection's
own packets keep their order. One ready socket, the common case at low load, is read and
handed over at once.
"""

from __future__ import annotations

from typing import Any, Protocol

from mqtt.packets import Packet, Subscribe, Unsubscribe

Read = tuple[bytes, list[Packet] | None]  # one recv's bytes and the packets decoded from it


class Readable(Protocol):
    """A connection whose socket may hold data."""

    def read_queued(self) -> None: ...

    def take_read(self) -> Read | None: ...

    def hand_over(self, read: Read) -> None: ...


class ReadOrder:
    """The connections of one event loop whose sockets became readable this turn."""

    __slots__ = ("_loop", "_ready")

    def __init__(self, loop: Any) -> None:
        self._loop = loop
        self._ready: list[Readable] = []

    def add(self, connection: Readable) -> None:
        """Queue a read of `connection`, handled after this turn's other watchers."""
        ready = self._ready
        if not ready:
            self._loop.run_callback(self._handle)
        ready.append(connection)

    def _handle(self) -> None:
        ready = self._ready
        self._ready = []
        if len(ready) == 1:
            ready[0].read_queued()
            return
        reads = [(connection, connection.take_read()) for connection in ready]
        later = []
        for connection, read in reads:
            if read is not None:
                if _changes_routes(read[1]):
                    connection.hand_over(read)
                else:
                    later.append((connection, read))
        for connection, read in later:
            connection.hand_over(read)


_ROUTE_CHANGES = frozenset({Subscribe, Unsubscribe})


def _changes_routes(packets: list[Packet] | None) -> bool:
    return packets is not None and not _ROUTE_CHANGES.isdisjoint(map(type, packets))


_ORDERS: dict[Any, ReadOrder] = {}  # by loop: one per thread's hub, which lives as long


def read_order(loop: Any) -> ReadOrder:
    """The one `ReadOrder` of `loop`."""
    order = _ORDERS.get(loop)
    if order is None:
        order = _ORDERS[loop] = ReadOrder(loop)
    return order
