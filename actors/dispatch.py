"""Routing a batch of published messages to the sessions that subscribe to them.

Publishers call `Dispatcher.publish` from their own actor (the client actor for QoS 0/1, the
session actor for QoS 2): it reads the router's `RouteTable` directly, the way emqttd reads
its route tables from the caller's process, so a publish never queues behind the router's
mailbox. Changes to the table go through the router actor only.

For one batch it:
- writes, for QoS 1/2 deliveries to persistent sessions and for retained messages, the store
  ops that make them durable, and calls `on_durable` (the publisher's acks) after the commit
  (see `actors.persistence`);
- runs the `message.publish` hook chain (when any plugin listens) which may change or drop;
- hands retained messages to the retainer actor (one tell per batch);
- picks, per subscribing session, the highest QoS over all of its matching subscriptions,
  capped by the message's QoS, so overlapping subscriptions deliver once [MQTT-3.3.5-1];
- encodes a QoS 0 PUBLISH for MQTT 3.x subscribers once per message and shares the bytes;
- tells each session one `Deliver` with all of its deliveries from the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors.messages import Deliver, StoreRetained
from actors.persistence import Persistence, stored_delivery
from actors.runtime import tell_if_alive
from actors.session_state import Delivery, SubscriptionOptions
from actors.stats import BrokerStats
from hooks.events import DropReason, Message, MessageDropped
from hooks.hookpoints import HookPoint
from mqtt.encoder import encode_publish
from router.route_table import RouteTable
from store.base import DeleteRetained, Op, PutMessage, PutRetained

logger = logging.getLogger(__name__)

_MESSAGE_PUBLISH = HookPoint.MESSAGE_PUBLISH  # module constants: Enum lookups cost ~0.2 µs
_MESSAGE_DROPPED = HookPoint.MESSAGE_DROPPED


@dataclass(frozen=True, slots=True)
class Route:
    """What the route table holds for one (topic filter, client id)."""

    session: Any  # ActorRef of the SessionActor
    options: SubscriptionOptions
    persistent: bool = False  # QoS 1/2 deliveries to it are stored before the publisher's ack


class Dispatcher:
    def __init__(
        self,
        routes: RouteTable,
        retainer: Any,
        hooks: Any,
        stats: BrokerStats,
        persistence: Persistence,
    ) -> None:
        self._routes = routes
        self._retainer = retainer
        self._hooks = hooks
        self._stats = stats
        self._persistence = persistence

    def publish(
        self, messages: list[Message], on_durable: Callable[[], None] | None = None
    ) -> bool:
        """Route `messages` (in order) to their subscribers and the retainer.

        Returns True if store ops were submitted; `on_durable` then runs after their commit.
        False means nothing needed the store and `on_durable` was not called.
        """
        hooks = self._hooks
        filter_by_hooks = hooks.has(_MESSAGE_PUBLISH)
        per_session: dict[Any, list[Delivery]] = {}
        retained: list[Message] = []
        ops: list[Op] = []
        for original in messages:
            message = hooks.publish(original) if filter_by_hooks else original
            if message is None:
                self._dropped(original, DropReason.BY_PLUGIN)
                continue
            self._stats.messages_received += 1
            if message.retain:
                retained.append(message)
                if self._persistence.enabled:
                    ops.append(
                        PutRetained(message) if message.payload else DeleteRetained(message.topic)
                    )
            if not self._fan_out(message, per_session, ops):
                self._dropped(message, DropReason.NO_SUBSCRIBERS)
        for session, deliveries in per_session.items():
            tell_if_alive(session, Deliver(deliveries))
        if retained:
            self._retainer.tell(StoreRetained(retained))
        if ops:
            self._persistence.submit(ops, on_durable)
            return True
        return False

    def _fan_out(
        self, message: Message, per_session: dict[Any, list[Delivery]], ops: list[Op]
    ) -> bool:
        matches = self._routes.match(message.topic)
        if not matches:
            return False
        chosen: dict[str, tuple[int, Route, tuple[int, ...]]] = {}
        for _topic_filter, subscribers in matches:
            for client_id, route in subscribers.items():
                options = route.options
                if options.no_local and client_id == message.publisher:
                    continue  # MQTT 5 No Local [MQTT-3.8.3-3]
                qos = min(message.qos, options.qos)
                ids = (options.subscription_id,) if options.subscription_id else ()
                previous = chosen.get(client_id)
                if previous is None:
                    chosen[client_id] = (qos, route, ids)
                else:
                    best_qos = max(qos, previous[0])
                    best_route = route if qos > previous[0] else previous[1]
                    chosen[client_id] = (best_qos, best_route, previous[2] + ids)
        wire_qos0: bytes | None = None
        persistence = self._persistence
        for client_id, (qos, route, ids) in chosen.items():
            # Live deliveries go out with RETAIN=0 unless the subscriber asked for
            # Retain As Published (MQTT 5) [MQTT-3.3.1-9] [MQTT-3.3.1-12/13].
            retain = message.retain and route.options.retain_as_published
            wire = None
            if qos == 0 and not retain:
                if wire_qos0 is None:
                    wire_qos0 = encode_publish(
                        message.topic, message.payload, 0, False, False, None, None, 4
                    )
                wire = wire_qos0
            if qos and route.persistent and persistence.enabled:
                delivery = Delivery(message, qos, retain, ids, None, persistence.next_seq())
                ops.append(PutMessage(client_id, delivery.seq, stored_delivery(delivery)))
            else:
                delivery = Delivery(message, qos, retain, ids, wire)
            deliveries = per_session.get(route.session)
            if deliveries is None:
                per_session[route.session] = [delivery]
            else:
                deliveries.append(delivery)
        return bool(chosen)

    def _dropped(self, message: Message, reason: DropReason) -> None:
        self._stats.messages_dropped += 1
        if self._hooks.has(_MESSAGE_DROPPED):
            self._hooks.run(_MESSAGE_DROPPED, MessageDropped(message=message, reason=reason))
