"""Broker: starts one worker's actors and listener in order, and stops them in reverse.

Start: hook bus and plugins -> router -> retainer -> session registry -> listener.
Stop (SIGINT/SIGTERM): stop accepting; close every connection from the server side, which
publishes the wills of clients that had not sent DISCONNECT [MQTT-3.1.2-8]; give the
sessions a moment to flush; close plugins.
"""

from __future__ import annotations

import logging
import time

import gevent
from gevent.server import StreamServer

from actors.config import BrokerConfig
from actors.connection import serve_connection
from actors.context import BrokerContext
from actors.dispatch import Dispatcher
from actors.messages import CloseConnection
from actors.retainer_actor import RetainerActor
from actors.router_actor import RouterActor
from actors.runtime import tell_if_alive
from actors.session_registry import SessionRegistryActor
from actors.stats import BrokerStats
from hooks.events import DisconnectReason
from hooks.hook_bus import HookBus
from plugins.base import PluginContext
from plugins.loader import LoadedPlugin, close_plugins, load_plugins, reload_plugins
from router.route_table import RouteTable

logger = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024


class Broker:
    def __init__(self, config: BrokerConfig, worker_id: int = 0) -> None:
        self.config = config
        self.worker_id = worker_id
        self.context = BrokerContext(
            config=config,
            hooks=HookBus(allow_anonymous=config.auth.allow_anonymous),
            route_table=RouteTable(),
            stats=BrokerStats(),
        )
        self._plugins: list[LoadedPlugin] = []
        self._server: StreamServer | None = None
        self._actors: list = []

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        return self._server.address[:2]

    def start(self) -> tuple[str, int]:
        """Start everything; returns the (host, port) the listener is bound to."""
        context = self.context
        plugin_context = PluginContext(
            config_dir=self.config.config_dir,
            node_name=self.config.node_name,
            worker_id=self.worker_id,
        )
        self._plugins = load_plugins(self.config.plugins, context.hooks, plugin_context)
        context.router = RouterActor.start(context.route_table)
        context.retainer = RetainerActor.start()
        context.dispatcher = Dispatcher(
            context.route_table, context.retainer, context.hooks, context.stats
        )
        context.registry = SessionRegistryActor.start(context)
        self._actors = [context.registry, context.retainer, context.router]
        listener = self.config.listener
        self._server = StreamServer(
            (listener.host, listener.port),
            lambda sock, address: serve_connection(sock, address, context),
            backlog=LISTEN_BACKLOG,
        )
        self._server.max_accept = 256
        self._server.start()
        host, port = self.address
        logger.info("ready: accepting MQTT connections on %s:%d", host, port)
        return host, port

    def reload(self) -> None:
        """SIGHUP: plugins re-read their files; connections stay up."""
        logger.info("reloading plugins")
        reload_plugins(self._plugins)

    def stop(self, timeout: float = 3.0) -> None:
        if self._server is not None:
            self._server.close()  # stop accepting; handlers of open connections keep running
        clients = list(self.context.live_clients)
        logger.info("shutting down: closing %d connections", len(clients))
        for client in clients:
            tell_if_alive(client, CloseConnection(DisconnectReason.SERVER_SHUTDOWN))
        deadline = time.monotonic() + timeout
        while self.context.live_clients and time.monotonic() < deadline:
            gevent.sleep(0.02)
        gevent.sleep(0.05)  # let sessions and the router drain what the closes sent them
        registry = self.context.registry
        sessions = list(registry.proxy().sessions.get().values()) if registry else []
        for actor in [*sessions, *self._actors]:
            if actor.is_alive():
                actor.stop()
        close_plugins(self._plugins, self.context.hooks)
        logger.info("stopped")
