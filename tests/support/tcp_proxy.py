"""A TCP proxy for tests, between a broker and a server on 127.0.0.1: it relays bytes both
ways until `cut` makes it a silent partition (bytes dropped, nothing reset, new connections
accepted and left unanswered), or `mute` drops only what the broker sends (it hears the
server, the server does not hear it), and `heal` ends either (the stalled connections are
closed, as a timeout would, and new ones relayed again)."""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.ports import free_port


class TcpProxy:
    """Listens on a free 127.0.0.1 port (`url`) and relays to `target_port`."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self._target = ("127.0.0.1", target_port)
        self._cut = threading.Event()
        self._muted = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._closed = False

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """From now on nothing passes either way, and nobody is told."""
        self._cut.set()

    def mute(self) -> None:
        """From now on what the broker sends is dropped; what the server sends still
        reaches it."""
        self._muted.set()

    def heal(self) -> None:
        """Close what the cut stalled; new connections are relayed again."""
        self._cut.clear()
        self._muted.clear()
        self._close_all()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
            if self._cut.is_set():
                continue  # accepted, never answered: a partition
            try:
                server = socket.create_connection(self._target, timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.append(server)
            for source, sink, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(
                    target=self._relay, args=(source, sink, upstream), daemon=True
                ).start()

    def _relay(self, source: socket.socket, sink: socket.socket, upstream: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if not self._cut.is_set() and not (upstream and self._muted.is_set()):
                    sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
