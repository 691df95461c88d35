"""What every actor of one broker worker shares: configuration, actor refs, tables, counters.

Built once by `actors.broker.Broker` and handed to each actor it starts. The route table is
here so publishers can read it directly; every change to it goes through `routes` (the
`RouteWriter`), called synchronously by the actor that changes a subscription.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from actors.admission import Admission
from actors.config import BrokerConfig, LimitsConfig
from actors.dispatch import Dispatcher
from actors.overload import FlowControl
from actors.persistence import Persistence
from actors.router_actor import RouteWriter
from channel.channel import ChannelSettings
from channel.negotiation import Offer
from core.auth_failures import RefusalDelays
from core.client import ClientInfo
from core.rate_limit import RateLimits
from core.stats import BrokerStats
from net.rate_limited_log import RateLimitedLog
from router.fan_out import Route
from router.route_table import RouteTable
from router.shared import SharedSubscriptions


@dataclass(frozen=True, slots=True)
class ConnectedClient:
    """One connected client as the admin API lists it (`BrokerContext.clients`)."""

    client: ClientInfo
    client_ref: Any  # ActorRef[ClientActor]: CloseConnection kicks it
    session: Any  # ActorRef[SessionActor]
    listener: str  # the endpoint's name, "tcp 127.0.0.1:1883"
    connected_at: float  # seconds since the epoch


@dataclass(slots=True)
class BrokerContext:
    config: BrokerConfig
    hooks: Any  # hooks.hook_bus.HookBus
    route_table: RouteTable[str, Route]
    stats: BrokerStats
    persistence: Persistence
    # The share groups of `$share/...` subscriptions, beside the route table (same writer).
    shared_subscriptions: SharedSubscriptions = field(default_factory=SharedSubscriptions)
    router: Any = None  # ActorRef[RouterActor]
    routes: RouteWriter = field(init=False)  # the one way to change routes; set by Broker.start
    retainer: Any = None  # ActorRef[RetainerActor]
    registry: Any = None  # actors.session_registry.SessionRegistry
    dispatcher: Dispatcher = field(init=False)  # set by Broker.start, before any client
    flow: FlowControl = field(init=False)  # set by Broker.__init__
    auth_failures: RefusalDelays = field(init=False)  # set by Broker.__init__
    live_clients: set[Any] = field(default_factory=set)  # ActorRefs of connected ClientActors
    # Connected clients by client id: set when the session is attached, removed at the end.
    clients: dict[str, ConnectedClient] = field(default_factory=dict)
    admission: Admission | None = None  # bans and flapping; None: every CONNECT admitted
    # Offline queue bounds (messages, payload bytes) of particular sessions, by client id,
    # in place of `limits.max_queued_messages` / `max_queued_bytes`: the bridges' sessions
    # (bridge.service.limit_queues).
    queue_bounds: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Paused reads (one line per second per reason) and lost messages (per drop reason).
    throttle_log: RateLimitedLog = field(
        default_factory=lambda: RateLimitedLog(logging.getLogger("actors.throttle"))
    )
    loss_log: RateLimitedLog = field(
        default_factory=lambda: RateLimitedLog(logging.getLogger("actors.losses"))
    )

    @property
    def limits(self) -> LimitsConfig:
        return self.config.limits

    @property
    def rate_limits(self) -> RateLimits:
        """Every client's rate limits unless a client.rate_limit plugin says otherwise."""
        overload = self.config.overload
        return RateLimits(overload.messages_rate, overload.bytes_rate)

    def channel_settings(self, identity_as_username: bool) -> ChannelSettings:
        """What the channels of one listener need (built once per listener, not per accept)."""
        limits = self.config.limits
        mqtt = self.config.mqtt
        offer = Offer(
            session_expiry_3x=limits.session_expiry,
            max_session_expiry=limits.max_session_expiry,
            max_keepalive=limits.max_keepalive,
            receive_maximum=limits.max_awaiting_rel,
            maximum_packet_size=limits.max_packet_size,
            maximum_qos=mqtt.maximum_qos,
            retain_available=mqtt.retain_available,
            wildcard_subscriptions=mqtt.wildcard_subscriptions,
            subscription_identifiers=mqtt.subscription_identifiers,
            topic_alias_maximum=mqtt.topic_alias_maximum,
            response_information=mqtt.response_information,
            validate_utf8_payloads=mqtt.validate_utf8_payloads,
            shared_subscriptions=self.config.shared_subscriptions.enabled,
        )
        return ChannelSettings(
            max_client_id_length=limits.max_client_id_length,
            max_topic_levels=limits.max_topic_levels,
            allow_control_characters=limits.allow_control_characters,
            identity_as_username=identity_as_username,
            max_awaiting_rel=limits.max_awaiting_rel,
            max_waiting_packets=limits.max_unprocessed_packets,
            max_waiting_bytes=limits.max_unprocessed_bytes,
            admit=self.admission.check if self.admission is not None else None,
            offer=offer,
        )
