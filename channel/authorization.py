"""What a client may publish and read: the `client.authorize` hook plus the broker's own rule.

The broker's rule: only the broker publishes to `$SYS` (and `$SYS/...`); a client's PUBLISH
or will there is refused whatever the ACL says. Topics starting with `$` are reserved for the
server [MQTT-4.7.2-1], and Mosquitto refuses client writes to `$SYS` the same way, with the
same one exception: a bridge's state, `$SYS/broker/connection/<client id>/state`, which
another broker's bridge publishes here (its will says `0`, and it publishes `1` once
connected) and is then asked of the ACL like any topic. A Mosquitto bridge sends that will
by default, so refusing it would refuse the bridge's CONNECT (5.0: 0x87).

Reading is asked of the ACL as a SUBSCRIBE: of a topic filter when a subscription is made or
re-checked (on resume, on reload), and of a message's topic name (a filter that matches only
itself) for messages already queued for a session whose subscriptions are re-checked.
"""

from __future__ import annotations

from typing import Any

from core.client import ClientInfo
from hooks.events import AuthorizeAction, AuthorizeRequest
from mqtt.topics import matches

_PUBLISH = AuthorizeAction.PUBLISH
_SUBSCRIBE = AuthorizeAction.SUBSCRIBE


_BRIDGE_STATE = "$SYS/broker/connection/+/state"


def is_broker_topic(topic: str) -> bool:
    """True for `$SYS` and `$SYS/...`, topics only the broker publishes to, except another
    broker's bridge state (`$SYS/broker/connection/+/state`, as Mosquitto allows)."""
    return (
        topic.startswith("$SYS")
        and (len(topic) == 4 or topic[4] == "/")
        and not matches(_BRIDGE_STATE, topic)
    )


def may_publish(hooks: Any, client: ClientInfo, topic: str, qos: int) -> bool:
    """Whether `client` may publish (or leave a will) on `topic`."""
    if is_broker_topic(topic):
        return False
    request = AuthorizeRequest(client=client, action=_PUBLISH, topic=topic, qos=qos)
    return bool(hooks.authorize(request))


def may_read(hooks: Any, client: ClientInfo, topic_filter: str, qos: int) -> bool:
    """Whether `client` may receive what `topic_filter` (or a topic name) matches."""
    return bool(
        hooks.authorize(
            AuthorizeRequest(client=client, action=_SUBSCRIBE, topic=topic_filter, qos=qos)
        )
    )
