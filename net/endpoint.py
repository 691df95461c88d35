"""What one configured listener gives each of its connections: stream layers, limits, identity.

An `Endpoint` is the sans-I/O half of a listener (the socket half is `net.listener`): it
makes a fresh layer stack per connection (None for tcp and unix: plain bytes, no cost), counts
its open connections against its own `max_connections` (in a pool with the other workers'
last reported counts, `elsewhere`: `pool.listener_counts`), and says whether the client
certificate's CN replaces the CONNECT's user name. A tls or wss endpoint holds its
`ssl.SSLContext`; `reload` (SIGHUP) builds a new one from the files for new connections and
keeps the old one if the new files are unusable (mosquitto#2038: a certificate renewal must
not drop the connected clients).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from net.listener_config import ListenerConfig
from net.stream_layers import LayerStack, StreamLayer
from net.tls_context import TlsSetupError, server_context
from net.tls_layer import TlsLayer
from net.websocket_layer import WebSocketLayer

logger = logging.getLogger(__name__)


class Endpoint:
    """One listener's per-connection settings; see the module docstring."""

    __slots__ = ("_ssl_context", "config", "connections", "elsewhere", "name", "on_count_changed")

    def __init__(self, config: ListenerConfig) -> None:
        """Raises TlsSetupError if a tls/wss listener's files are unusable."""
        self.config = config
        self.name = config.describe()  # the broker sets the bound address once listening
        self.connections = 0  # open connections here, against config.max_connections
        self.elsewhere = 0  # a pool's: the other workers' open connections on this listener
        self.on_count_changed: Callable[[Endpoint], None] | None = None  # a pool's report
        self._ssl_context: ssl.SSLContext | None = None
        if config.is_tls:
            try:
                self._ssl_context = server_context(config)
            except TlsSetupError as error:
                raise TlsSetupError(f"listener {self.name}: {error}") from error

    @property
    def full(self) -> bool:
        """Whether a new connection would pass `max_connections` (pool-wide in a pool)."""
        return self.connections + self.elsewhere >= self.config.max_connections

    def opened(self) -> None:
        self.connections += 1
        if self.on_count_changed is not None:
            self.on_count_changed(self)

    def closed(self) -> None:
        self.connections -= 1
        if self.on_count_changed is not None:
            self.on_count_changed(self)

    @property
    def use_identity_as_username(self) -> bool:
        return self.config.use_identity_as_username

    def new_layers(self) -> StreamLayer | None:
        """A fresh layer stack for one connection; None: plain MQTT bytes (tcp, unix)."""
        kind = self.config.type
        if kind == "tls":
            assert self._ssl_context is not None
            return TlsLayer(self._ssl_context)
        if kind == "ws":
            return self._websocket()
        if kind == "wss":
            assert self._ssl_context is not None
            return LayerStack([TlsLayer(self._ssl_context), self._websocket()])
        return None

    def reload(self) -> None:
        """SIGHUP: new connections get a context built from the files as they are now."""
        if self._ssl_context is None:
            return
        try:
            self._ssl_context = server_context(self.config)
        except TlsSetupError as error:
            logger.error(
                "listener %s: certificates not reloaded, new connections keep the previous "
                "ones: %s",
                self.name,
                error,
            )
            return
        logger.info("listener %s: certificates reloaded for new connections", self.name)

    def _websocket(self) -> WebSocketLayer:
        return WebSocketLayer(self.config.path, self.config.allowed_origins)
