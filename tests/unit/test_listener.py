"""The listening socket's settings reach every connection it accepts (a real socket on
127.0.0.1, no broker)."""

from __future__ import annotations

import socket
from typing import Any

import gevent
import gevent.event

from net.listener import Listener


def test_accepted_tcp_connections_have_no_nagle_delay() -> None:
    """TCP_NODELAY is set once on the listening socket; each accepted socket inherits it
    (small MQTT packets go out at once)."""
    seen: gevent.event.AsyncResult[int] = gevent.event.AsyncResult()

    def handle(sock: Any, _address: Any) -> None:
        seen.set(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        sock.close()

    listener = Listener(("127.0.0.1", 0), handle, backlog=8)
    listener.start()
    try:
        assert listener.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        client = socket.create_connection(listener.address, timeout=2)
        try:
            assert seen.get(timeout=2) == 1
        finally:
            client.close()
    finally:
        listener.close()
