"""The in-process stream of the bridges' local connections (`net.inprocess`): buffering,
the buffer bound, the end of the stream, the watchers on gevent's loop, the waiting end, and
a `Transport` writing to it."""

from __future__ import annotations

import errno

import gevent
import pytest

from net.inprocess import CAPACITY, READ, WRITE, GreenEnd, PipeEnd, pipe, watch
from net.transport import Transport


def test_bytes_arrive_in_order_and_a_recv_takes_at_most_its_size() -> None:
    left, right = pipe()
    assert left.send(b"abc") == 3
    assert left.send(memoryview(b"defgh")) == 5
    assert right.recv(2) == b"ab"
    assert right.recv(4) == b"cdef"
    assert right.recv(100) == b"gh"
    with pytest.raises(BlockingIOError):
        right.recv(100)
    right.send(b"back")
    assert left.recv(100) == b"back"


def test_send_takes_what_fits_in_the_buffer_then_refuses_until_read() -> None:
    left, right = pipe()
    assert left.send(b"x" * (CAPACITY - 10)) == CAPACITY - 10
    assert left.send(b"y" * 100) == 10  # only the room that is left
    assert not left.writable
    with pytest.raises(BlockingIOError):
        left.send(b"z")
    assert len(right.recv(1000)) == 1000
    assert left.writable
    assert left.send(b"z" * 5000) == 1000
    data = b"".join(iter(lambda: _recv_or_empty(right), b""))
    assert data == b"x" * (CAPACITY - 1010) + b"y" * 10 + b"z" * 1000


def _recv_or_empty(end: PipeEnd) -> bytes:
    try:
        return end.recv(65536)
    except BlockingIOError:
        return b""


def test_a_closed_end_lets_the_other_read_what_was_sent_then_the_end() -> None:
    left, right = pipe()
    left.send(b"last words")
    left.close()
    assert right.readable
    assert right.recv(100) == b"last words"
    assert right.recv(100) == b""  # the end of the stream, as a socket's EOF
    with pytest.raises(BrokenPipeError):
        right.send(b"too late")
    with pytest.raises(OSError) as closed:
        left.recv(10)
    assert closed.value.errno == errno.EBADF
    with pytest.raises(OSError):
        left.send(b"x")
    left.close()  # twice is harmless


def test_shutdown_of_both_directions_closes_and_drops_what_was_unread() -> None:
    left, right = pipe()
    right.send(b"never read")
    left.shutdown(2)  # socket.SHUT_RDWR, as a transport closes
    assert left.closed
    assert right.recv(10) == b""


def test_a_read_watcher_fires_on_a_later_loop_turn_and_again_while_bytes_remain() -> None:
    left, right = pipe()
    loop = gevent.get_hub().loop
    calls: list[str] = []
    watcher = watch(loop, right, READ)
    watcher.start(calls.append, "readable")
    gevent.sleep(0)
    assert calls == []  # nothing to read yet
    left.send(b"abcd")
    assert calls == []  # not from inside the sender's call
    gevent.sleep(0)
    assert calls == ["readable"]
    assert right.recv(2) == b"ab"  # bytes remain: level-triggered, it fires again
    gevent.sleep(0)
    assert calls == ["readable", "readable"]
    assert right.recv(2) == b"cd"
    gevent.sleep(0)
    assert len(calls) == 2
    watcher.stop()
    left.send(b"e")
    gevent.sleep(0)
    assert len(calls) == 2  # stopped
    watcher.start(calls.append, "again")  # started with bytes waiting
    gevent.sleep(0)
    assert calls[-1] == "again"
    left.close()  # the end of the stream is readable too
    right.recv(10)
    gevent.sleep(0)
    assert calls[-1] == "again" and len(calls) == 4


def test_a_write_watcher_fires_once_a_full_buffer_has_room() -> None:
    left, right = pipe()
    loop = gevent.get_hub().loop
    calls: list[int] = []
    left.send(b"x" * CAPACITY)
    watcher = watch(loop, left, WRITE)
    watcher.start(lambda: (calls.append(1), watcher.stop()))
    gevent.sleep(0)
    assert calls == []
    right.recv(1)
    gevent.sleep(0)
    assert calls == [1]


def test_a_waiting_end_waits_for_bytes_and_for_room() -> None:
    left, right = pipe()
    green = GreenEnd(right)
    reader = gevent.spawn(green.recv, 100)
    gevent.sleep(0)
    assert not reader.ready()
    left.send(b"hello")
    assert reader.get(timeout=1) == b"hello"

    green.send(b"x" * CAPACITY)
    writer = gevent.spawn(green.send, b"more")
    gevent.sleep(0)
    assert not writer.ready()  # the buffer is full
    left.recv(10)
    assert writer.get(timeout=1) == 4


def test_closing_either_end_wakes_a_waiting_end() -> None:
    left, right = pipe()
    green = GreenEnd(right)
    reader = gevent.spawn(green.recv, 100)
    gevent.sleep(0)
    left.close()
    assert reader.get(timeout=1) == b""

    left, right = pipe()
    green = GreenEnd(right)
    reader = gevent.spawn(green.recv, 100)
    gevent.sleep(0)
    green.close()  # from another greenlet, as a bridge stops
    with pytest.raises(OSError):
        reader.get(timeout=1)


def test_a_transport_keeps_what_does_not_fit_and_sends_it_once_read() -> None:
    broker_end, bridge_end = pipe()
    transport = Transport(broker_end, "bridge:test", gevent.get_hub().loop)
    flushed: list[bool] = []
    transport.on_flushed = lambda: flushed.append(True)
    transport.write(b"a" * CAPACITY)
    transport.write(b"b" * 1000)
    assert transport.backlog_bytes == 1000
    received = bridge_end.recv(CAPACITY)
    gevent.sleep(0)
    gevent.sleep(0)
    assert transport.backlog_bytes == 0 and flushed == [True]
    received += bridge_end.recv(CAPACITY)
    assert received == b"a" * CAPACITY + b"b" * 1000
    transport.close()
    assert bridge_end.recv(10) == b""
