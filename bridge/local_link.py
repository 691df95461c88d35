"""The bridge's connection to this broker: an in-process stream (`net.inprocess`), one end
served as any accepted client connection is, the other end the bridge's.

So the bridge's local side is an ordinary client to the broker: its session (`$bridge/<name>`,
persistent, stored like any other, owned pool-wide by client id as any other) queues what is
to go out, and what comes in takes the normal publish path (ACL, retained messages,
routing, hooks). The channel settings differ in three ways (`bridge_settings`): the
connection is trusted without authentication, it may use a client id under
`BRIDGE_CLIENT_PREFIX`, and no maximum of session expiry or keep-alive applies to it.

The bytes each side writes are handed to the other in memory, with a wake-up on the event
loop: a batch of messages or acknowledgements crosses without a system call or a poll
(every message and every acknowledgement of the bridge crosses it).
"""

from __future__ import annotations

from dataclasses import replace

from actors.client_actor import accept_connection
from actors.context import BrokerContext
from channel.channel import ChannelSettings
from net.endpoint import Endpoint
from net.inprocess import GreenEnd, pipe
from net.listener_config import ListenerConfig


def bridge_settings(context: BrokerContext) -> ChannelSettings:
    """The channel settings of the bridges' local connections."""
    settings = context.channel_settings(identity_as_username=False)
    offer = replace(settings.offer, max_session_expiry=0.0, max_keepalive=0)
    return replace(settings, internal=True, offer=offer)


def bridge_endpoint() -> Endpoint:
    """The endpoint the bridges' local connections count on (not a listener)."""
    endpoint = Endpoint(ListenerConfig(type="unix", path="(bridges)"))
    endpoint.name = "bridges (in process)"
    return endpoint


def open_local(
    name: str, context: BrokerContext, endpoint: Endpoint, settings: ChannelSettings
) -> GreenEnd:
    """A new connection to this broker for bridge `name`; the bridge's end."""
    broker_end, bridge_end = pipe()
    accept_connection(broker_end, ("bridge", name), context, endpoint, settings)
    return GreenEnd(bridge_end)
