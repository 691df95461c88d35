"""The broker's hook points, named after emqttd/EMQX so their users recognise them.

Each member's comment says when it fires, which event object (hooks.events) the callback
receives and, for the decision and fold points, what it returns (hooks.decisions).
Callbacks are registered with `HookBus.register(point, callback)`; docs/plugins.md has the
full table, including which actor runs each point.
"""

from __future__ import annotations

from enum import Enum


class HookPoint(Enum):
    # Client lifecycle (run in the client's own actor).
    CLIENT_CONNECT = "client.connect"  # ClientConnect: CONNECT received, before authentication
    CLIENT_AUTHENTICATE = "client.authenticate"  # AuthenticateRequest -> Decision | AuthResult
    CLIENT_CONNECTED = "client.connected"  # ClientConnected: CONNACK 0 sent
    CLIENT_DISCONNECTED = "client.disconnected"  # ClientDisconnected: connection closed
    CLIENT_AUTHORIZE = "client.authorize"  # AuthorizeRequest -> Decision
    # CheckReads -> bool: True if each message delivered to the client is to be checked with
    # client.authorize (a SUBSCRIBE of its topic name); asked when its session is attached
    # and after a reload; run in the session actor and, on reload, the broker's
    CLIENT_CHECK_READS = "client.check_reads"
    CLIENT_SUBSCRIBE = "client.subscribe"  # ClientSubscribe: SUBSCRIBE received, before ACL
    CLIENT_UNSUBSCRIBE = "client.unsubscribe"  # ClientUnsubscribe: UNSUBSCRIBE received
    # ClientRateLimit -> RateLimits | None (unchanged): the client's limits once connected
    CLIENT_RATE_LIMIT = "client.rate_limit"
    # Session lifecycle (run in the session actor).
    SESSION_CREATED = "session.created"  # SessionEvent
    SESSION_RESUMED = "session.resumed"  # SessionEvent
    SESSION_SUBSCRIBED = "session.subscribed"  # SessionSubscribed: route added
    SESSION_UNSUBSCRIBED = "session.unsubscribed"  # SessionUnsubscribed: route removed
    SESSION_TERMINATED = "session.terminated"  # SessionEvent with reason
    # Message flow: message.publish in the publisher's client actor, the others in the
    # subscriber's session actor (message.dropped for "no subscribers": the publisher's).
    MESSAGE_PUBLISH = "message.publish"  # Message -> Message | None (unchanged) | DROP
    MESSAGE_DELIVERED = "message.delivered"  # MessageDelivered: written to a subscriber
    MESSAGE_ACKED = "message.acked"  # MessageAcked: PUBACK/PUBCOMP from a subscriber
    MESSAGE_DROPPED = "message.dropped"  # MessageDropped: no subscriber, queue full, denied...
