"""The broker's bridges: one `BridgeRunner` per `[[bridges]]` table, started after the
listeners and stopped before the connections are closed (so the bridges' local sessions are
left offline, not taken for clients that went away).

The state of each bridge is the retained `$SYS/broker/connection/<name>/state`, "1" while
connected and "0" otherwise (Mosquitto's topic and values), published by the broker itself
(not stored: it starts at 0 after a restart). `limit_queues` gives each bridge's local
session the bridge's queue bound instead of `[limits] max_queued_messages` /
`max_queued_bytes`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from actors.context import BrokerContext
from actors.session_peek import messages_waiting
from bridge.config import BridgeConfig
from bridge.local_link import bridge_endpoint, bridge_settings, open_local
from bridge.placement import bridge_nodes, runner_node, runner_of
from bridge.remote import client_context
from bridge.runner import BridgeRunner
from core.client import BRIDGE_CLIENT_PREFIX
from core.message import Message

logger = logging.getLogger(__name__)


def limit_queues(context: BrokerContext, bridges: tuple[BridgeConfig, ...]) -> None:
    """Give each bridge's session its own queue bound (before any session starts)."""
    for bridge in bridges:
        context.queue_bounds[BRIDGE_CLIENT_PREFIX + bridge.name] = (
            bridge.queue_max_messages,
            bridge.queue_max_bytes,
        )


class Bridges:
    """The bridges this process runs."""

    def __init__(self, context: BrokerContext, bridges: tuple[BridgeConfig, ...]) -> None:
        """Raises TlsSetupError if a bridge's TLS files are unusable."""
        self._context = context
        endpoint = bridge_endpoint()
        settings = bridge_settings(context)
        limits = context.limits
        self.runners: dict[str, BridgeRunner] = {}
        for bridge in bridges:

            def connect(name: str = bridge.name) -> Any:
                return open_local(name, context, endpoint, settings)

            def waiting(client_id: str = BRIDGE_CLIENT_PREFIX + bridge.name) -> int | None:
                session = context.registry.sessions.get(client_id)
                return None if session is None else messages_waiting(session)

            self.runners[bridge.name] = BridgeRunner(
                bridge,
                open_local=connect,
                waiting=waiting,
                tls=client_context(bridge),
                # The remote client id's default prefix: in a cluster the cluster's name,
                # so the remote keeps one session per bridge whichever node runs it.
                node_name=(
                    context.config.node_name
                    if context.config.cluster is None
                    else context.config.cluster.name
                ),
                report_state=self._report_state,
                max_packet_size=limits.max_packet_size,
                receive_maximum=settings.offer.receive_maximum,
            )

    def start(self) -> None:
        for runner in self.runners.values():
            runner.start()

    def stop(self) -> None:
        for runner in self.runners.values():
            runner.stop()

    def place(
        self,
        worker: int,
        workers: int,
        live: Collection[int],
        *,
        node: str | None = None,
        nodes: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        """Run here the bridges whose runner `worker` is while `live` are up
        (`bridge.placement`), and stop those another worker runs now. In a cluster (`node`:
        this node's name) only those whose runner node is this one among the live `nodes`
        that have the bridge configured (node -> its bridges); none while `nodes` is None
        (this node does not know which are live)."""
        for name, runner in self.runners.items():
            at = None if nodes is None else runner_node(name, bridge_nodes(name, nodes))
            if node is None or at == node:
                owner = runner_of(name, workers, live)
                where = f"worker {owner}"
            else:
                owner = None
                where = f"node {at}" if at else "no node"
            if owner == worker and not runner.running:
                logger.info("bridge %r: runs in this worker", name)
                runner.start()
            elif owner != worker and runner.running:
                logger.info("bridge %r: %s runs it now; stopping it here", name, where)
                runner.stop()

    def _report_state(self, name: str, connected: bool) -> None:
        config = self.runners[name].config
        if not config.notifications:
            return
        topic = config.state_topic("")
        payload = b"1" if connected else b"0"
        self._context.dispatcher.publish_internal(
            [Message(topic=topic, payload=payload)],
            retained=[Message(topic=topic, payload=payload, retain=True)],
        )
