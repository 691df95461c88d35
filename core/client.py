"""Who is on the other end of a connection, as the broker and its plugins see it.

Besides who it is, `ClientInfo` holds what its CONNECT negotiated for the connection (MQTT 5.0
section 3.1.2.11; the 3.x values are the defaults): how long the session outlives it, and
the limits the client set on what the broker sends it. The channel decides them
(`channel.negotiation`); the session actor applies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NO_LIMIT = 0  # topic_alias_maximum/maximum_packet_size: the client set none (see below)
# The client ids of the broker's own bridges' sessions ("$bridge/<name>"): no client that
# connects from outside may use one (the channel refuses it).
BRIDGE_CLIENT_PREFIX = "$bridge/"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientInfo:
    client_id: str
    username: str | None
    peer: str  # "host:port" of the remote end
    protocol_version: int  # 3, 4 or 5
    clean_start: bool
    keepalive: int
    # Seconds the session is kept after the connection ends: 0 ends it with the connection,
    # math.inf keeps it until it is resumed or replaced [MQTT-3.1.2-11/-12].
    session_expiry: float = 0.0
    # The client's Receive Maximum: unacknowledged QoS 1/2 PUBLISHes it accepts [MQTT-3.3.4-9].
    receive_maximum: int = 65535
    maximum_packet_size: int = NO_LIMIT  # bytes; larger packets are not sent [MQTT-3.1.2-24]
    topic_alias_maximum: int = 0  # aliases the broker may use toward it [MQTT-3.1.2-26]
    request_problem_information: bool = True  # 5.0 section 3.1.2.11.7
    properties: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def keeps_session(self) -> bool:
        """Whether the session outlives the connection."""
        return self.session_expiry > 0

    def inflight_bound(self, configured: int) -> int:
        """The bound of the session's in-flight window besides its Receive Maximum: `[limits]
        max_inflight` (`configured`), except for a bridge's session (only the broker's own
        bridges connect with a `$bridge/` id), whose window is its bridge's own
        `max_inflight`, sent as its Receive Maximum: the messages in flight to the remote
        broker (docs/bridges.md)."""
        return 65535 if self.client_id.startswith(BRIDGE_CLIENT_PREFIX) else configured
