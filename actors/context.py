"""What every actor of one broker worker shares: configuration, actor refs, tables, counters.

Built once by `actors.broker.Broker` and handed to each actor it starts. The route table is
here so publishers can read it directly; every change to it goes through `routes` (the
`RouteWriter`), called synchronously by the actor that changes a subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from actors.admission import Admission
from actors.config import BrokerConfig, LimitsConfig
from actors.dispatch import Dispatcher
from actors.messages import Attach, ClientMessage, RetainerMessage, RouterMessage
from actors.overload import FlowControl
from actors.persistence import Persistence
from actors.refs import AskRef, NotStarted, Ref
from actors.router_actor import RouteWriter
from channel.channel import ChannelSettings
from channel.negotiation import Offer
from core.auth_failures import RefusalDelays
from core.client import ClientInfo
from core.rate_limit import RateLimits
from core.stats import BrokerStats
from hooks.hook_bus import HookBus
from net.rate_limited_log import RateLimitedLog
from net.transport import Transport
from router.fan_out import Route
from router.route_table import RouteTable
from router.shared import SharedSubscriptions


@dataclass(frozen=True, slots=True)
class ConnectedClient:
    """One connected client as the admin API lists it (`BrokerContext.clients`)."""

    client: ClientInfo
    client_ref: Ref[ClientMessage]  # CloseConnection kicks it
    session: Any  # ActorRef[SessionActor]
    listener: str  # the endpoint's name, "tcp 127.0.0.1:1883"
    connected_at: float  # seconds since the epoch


class Sessions(Protocol):
    """The worker's sessions by client id: `actors.session_registry.SessionRegistry`, or a
    pool worker's `pool.registry.PoolRegistry`, which claims each id pool-wide first."""

    sessions: dict[str, Any]  # client id -> its session actor's reference
    # In a cluster: why a client id may not open a session here now, or None (see
    # `SessionRegistry.fence`).
    fence: Callable[[str], str | None] | None

    def open(
        self,
        client: ClientInfo,
        client_ref: Ref[ClientMessage],
        transport: Transport,
        connack_properties: dict[int, Any],
    ) -> None: ...

    def attach(self, attach: Attach) -> None: ...

    def ended(self, client_id: str, session: Any) -> None: ...


class NoSessionsYet:
    """The `Sessions` of a worker whose registry is not made yet (a pool's peer may say
    hello first): it holds none, and nothing may open one."""

    __slots__ = ("fence", "sessions")

    def __init__(self) -> None:
        self.sessions: dict[str, Any] = {}
        self.fence: Callable[[str], str | None] | None = None

    def open(
        self,
        client: ClientInfo,
        client_ref: Ref[ClientMessage],
        transport: Transport,
        connack_properties: dict[int, Any],
    ) -> None:
        raise RuntimeError(f"no session registry yet: cannot open {client.client_id!r}")

    def attach(self, attach: Attach) -> None:
        raise RuntimeError(f"no session registry yet: cannot attach {attach.client.client_id!r}")

    def ended(self, client_id: str, session: Any) -> None:
        pass  # there was none to end


@dataclass(slots=True)
class BrokerContext:
    config: BrokerConfig
    hooks: HookBus
    route_table: RouteTable[str, Route]
    stats: BrokerStats
    persistence: Persistence
    # The share groups of `$share/...` subscriptions, beside the route table (same writer).
    shared_subscriptions: SharedSubscriptions = field(default_factory=SharedSubscriptions)
    router: AskRef[RouterMessage] = field(default_factory=lambda: NotStarted("the router"))
    routes: RouteWriter = field(init=False)  # the one way to change routes; set by Broker.start
    retainer: Ref[RetainerMessage] = field(default_factory=lambda: NotStarted("the retainer"))
    registry: Sessions = field(default_factory=NoSessionsYet)  # Broker.start sets it
    dispatcher: Dispatcher = field(init=False)  # set by Broker.start, before any client
    flow: FlowControl = field(init=False)  # set by Broker.__init__
    auth_failures: RefusalDelays = field(init=False)  # set by Broker.__init__
    live_clients: set[Ref[ClientMessage]] = field(default_factory=set)  # connected clients
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
            acl_cache_ttl=self.config.auth.acl_cache_ttl,
        )
