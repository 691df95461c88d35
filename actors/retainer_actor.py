"""RetainerActor: keeps the last retained message per topic and replays it to new subscribers.

A retained PUBLISH replaces the stored message of its topic; one with an empty payload
clears it [MQTT-3.3.1-10/11]. QoS 0 retained messages are kept too [MQTT-3.3.1-7]. On a new
subscription the matching messages go to the session with RETAIN=1 and QoS capped by the
granted QoS [MQTT-3.3.1-8]. A retained message whose MQTT 5 Message Expiry Interval has
passed is forgotten instead of sent [MQTT-3.3.2-5]; the others go with the time they have
left (`channel.outbound`).

In a cluster the retainer also remembers the clears it applies (`router.retained_clears`),
so a node coming back with an old message cannot bring back what another node cleared.
"""

from __future__ import annotations

import time
from typing import Any

from actors.messages import DeliverRetained, SendRetained, StoreRetained
from actors.runtime import GeventActor, tell_if_alive
from core.message import Message, is_expired
from core.session_state import Delivery
from router.retained_clears import RetainedClears
from router.retained_index import RetainedIndex


class RetainerActor(GeventActor):
    def __init__(
        self, index: RetainedIndex[Message] | None = None, clears: RetainedClears | None = None
    ) -> None:
        super().__init__()
        self.index = index if index is not None else RetainedIndex()
        self.clears = clears

    def on_receive(self, message: Any) -> None:
        if isinstance(message, StoreRetained):
            self._store(message)
        elif isinstance(message, SendRetained):
            self._send(message)

    def _store(self, request: StoreRetained) -> None:
        clears = self.clears
        for message in request.messages:
            if message.payload:
                self.index.set(message.topic, message)
                if clears is not None:
                    clears.retained(message.topic, message.timestamp)
            else:
                self.index.delete(message.topic)
                if clears is not None:
                    clears.cleared(message.topic, message.timestamp, time.time())

    def _send(self, request: SendRetained) -> None:
        deliveries = []
        now = time.time()
        for topic_filter, options in request.subscriptions:
            for topic, message in self.index.match(topic_filter):
                if message.properties and is_expired(message, now):
                    self.index.delete(topic)
                    continue
                ids = (options.subscription_id,) if options.subscription_id else ()
                deliveries.append(Delivery(message, min(message.qos, options.qos), True, ids))
        if deliveries:
            tell_if_alive(request.session, DeliverRetained(deliveries))
