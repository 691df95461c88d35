"""SUBSCRIBE and UNSUBSCRIBE of a connected client, pure.

`SubscriptionHandling` is the part of `channel.channel.Channel` that decides each filter of
a SUBSCRIBE: refused for what CONNACK did not offer (shared, wildcard subscriptions,
Subscription Identifiers), a `$share/...` filter that does not parse, too many topic levels
or the ACL (`channel.authorization`), with a 5.0 Reason String saying why
(`channel.problems`); the granted QoS at most the Maximum QoS. It runs the
`client.subscribe` / `client.unsubscribe` hooks and answers `SubscribeRequest` /
`UnsubscribeRequest`, after the publishes read before them (docs/channel.md, "Routes in
read order"); the session grants and writes SUBACK / UNSUBACK.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from channel.actions import (
    SubscribeRequest,
    UnsubscribeRequest,
)
from channel.authorization import may_read
from channel.base import ChannelBase
from channel.negotiation import Offer
from channel.problems import (
    problems_allowed,
    reason_string,
    with_properties,
)
from hooks.events import (
    ClientSubscribe,
    ClientUnsubscribe,
    TopicFilterRequest,
)
from hooks.hookpoints import HookPoint
from mqtt.packets import (
    SubAck,
    Subscribe,
    Subscription,
    Unsubscribe,
)
from mqtt.properties import PropertyId
from mqtt.reason_codes import ReasonCode
from mqtt.topics import TopicError
from router.shared import inner_filter, is_shared, parse_shared

# One logger for the whole connection protocol, whichever module of it speaks: operators
# (and the pool's tests) know its lines by this name.
logger = logging.getLogger("channel.channel")


_NOT_AUTHORIZED = ReasonCode.NOT_AUTHORIZED

# The Reason String of a SUBACK refusal, per filter, when the channel has no more to say.
_SUBSCRIBE_REFUSALS: dict[int, str] = {
    ReasonCode.NOT_AUTHORIZED: "not authorised",
    ReasonCode.TOPIC_FILTER_INVALID: "topic filter invalid",
    ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: "shared subscriptions are not supported",
    ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED: "wildcard subscriptions are not supported",
    ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: (
        "subscription identifiers are not supported"
    ),
}


class SubscriptionHandling(ChannelBase):
    """SUBSCRIBE and UNSUBSCRIBE."""

    __slots__ = ()

    def _subscribe(self, packet: Subscribe) -> None:
        self._flush_batch()
        client = self.client
        assert client is not None
        hooks = self._hooks
        if hooks.has(HookPoint.CLIENT_SUBSCRIBE):
            filters = tuple(
                TopicFilterRequest(
                    topic_filter=s.topic_filter,
                    qos=s.qos,
                    no_local=s.no_local,
                    retain_as_published=s.retain_as_published,
                    retain_handling=s.retain_handling,
                )
                for s in packet.subscriptions
            )
            hooks.run(
                HookPoint.CLIENT_SUBSCRIBE,
                ClientSubscribe(client=client, filters=filters, properties=packet.properties),
            )
        offer = self._settings.offer
        subscription_ids = packet.properties.get(PropertyId.SUBSCRIPTION_IDENTIFIER)
        refused: dict[int, int] = {}
        details: dict[int, str] = {}  # why a filter was refused, beyond its reason code
        subscriptions = list(packet.subscriptions)
        if self._bridge:
            # What a bridge publishes is not sent back to it, and what it receives keeps its
            # retain flag, as Mosquitto does for a client with the bridge bit (`try_private`).
            subscriptions = [
                replace(s, no_local=True, retain_as_published=True) for s in subscriptions
            ]
        for index, subscription in enumerate(subscriptions):
            topic_filter = subscription.topic_filter
            refusal = _subscription_refusal(topic_filter, bool(subscription_ids), offer)
            shared = _shared_refusal(topic_filter)
            read_filter = inner_filter(topic_filter)  # a shared one reads after its share name
            if refusal is not None:
                refused[index] = refusal
            elif shared is not None:
                logger.info("%s: subscribe to %r refused: %s", self._name(), *shared[1:])
                refused[index], details[index] = shared[0], shared[2]
            elif read_filter.count("/") >= self._settings.max_topic_levels:
                refused[index] = ReasonCode.TOPIC_FILTER_INVALID
                details[index] = (
                    f"more than limits.max_topic_levels ({self._settings.max_topic_levels}) levels"
                )
            elif self._check_acl and not may_read(hooks, client, read_filter, subscription.qos):
                logger.info("%s: subscribe to %r denied", self._name(), topic_filter)
                refused[index] = _NOT_AUTHORIZED
            elif subscription.qos > offer.maximum_qos:
                # Granted at most the Maximum QoS (section 3.9.3, and 3.2.2.3.4)
                subscriptions[index] = replace(subscription, qos=offer.maximum_qos)
        if refused:
            logger.info(
                "%s: SUBSCRIBE %d refused %d of %d filters (codes %s)",
                self._name(),
                packet.packet_id,
                len(refused),
                len(subscriptions),
                ", ".join(f"0x{code:02x}" for code in refused.values()),
            )
        self._actions.append(
            SubscribeRequest(
                packet.packet_id,
                subscriptions,
                refused,
                subscription_ids[0] if subscription_ids else None,
                self._suback_problems(packet.packet_id, subscriptions, refused, details)
                if refused
                else None,
            )
        )

    def _suback_problems(
        self,
        packet_id: int,
        subscriptions: list[Subscription],
        refused: dict[int, int],
        details: dict[int, str],
    ) -> dict[int, Any] | None:
        """The SUBACK properties that say why filters were refused: a Reason String naming
        each, if the client asked for problem information and it fits (`channel.problems`)."""
        client = self.client
        if not problems_allowed(client):
            return None
        assert client is not None
        why = "; ".join(
            f"{subscriptions[index].topic_filter!r}: "
            + (details.get(index) or _SUBSCRIBE_REFUSALS.get(code, f"reason 0x{code:02x}"))
            for index, code in refused.items()
        )
        # The session fills in the granted codes; one byte each, so the size is known now.
        stand_in = SubAck(packet_id, [0] * len(subscriptions))
        fitted, _data = with_properties(stand_in, (reason_string(why),), client.maximum_packet_size)
        return fitted.properties or None

    def _unsubscribe(self, packet: Unsubscribe) -> None:
        self._flush_batch()
        if self._hooks.has(HookPoint.CLIENT_UNSUBSCRIBE):
            assert self.client is not None
            filters = tuple(TopicFilterRequest(topic_filter=f) for f in packet.topic_filters)
            self._hooks.run(
                HookPoint.CLIENT_UNSUBSCRIBE,
                ClientUnsubscribe(
                    client=self.client, filters=filters, properties=packet.properties
                ),
            )
        self._actions.append(UnsubscribeRequest(packet.packet_id, list(packet.topic_filters)))


def _shared_refusal(topic_filter: str) -> tuple[int, str, str] | None:
    """(SUBACK reason code, filter, why) for a `$share/...` filter that does not parse."""
    if not is_shared(topic_filter):
        return None
    try:
        parse_shared(topic_filter)
    except TopicError as error:
        return ReasonCode.TOPIC_FILTER_INVALID, topic_filter, str(error)
    return None


def _subscription_refusal(topic_filter: str, has_identifier: bool, offer: Offer) -> int | None:
    """The SUBACK reason code for a filter that asks for what the broker does not offer (as
    CONNACK announced it), or None."""
    if is_shared(topic_filter) and not offer.shared_subscriptions:
        return ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED  # 3.2.2.3.13
    if not offer.wildcard_subscriptions and ("+" in topic_filter or "#" in topic_filter):
        return ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED  # 3.2.2.3.11
    if has_identifier and not offer.subscription_identifiers:
        return ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED  # 3.2.2.3.12
    return None
