"""Why a connection ended and why a message was not delivered: the broker's loss vocabulary.

Both are logged, counted, handed to hooks and written to the event files, so their values
are part of the plugin and Spark contracts.
"""

from __future__ import annotations

from enum import Enum


class DisconnectReason(Enum):
    """Why a connection ended; decides whether the will is published."""

    CLIENT_DISCONNECT = "client_disconnect"  # DISCONNECT received: no will [MQTT-3.1.2-10]
    SOCKET_CLOSED = "socket_closed"  # peer closed or network error
    KEEPALIVE_TIMEOUT = "keepalive_timeout"
    PROTOCOL_ERROR = "protocol_error"  # malformed packet or protocol violation
    TAKEN_OVER = "taken_over"  # another connection with the same client id
    SERVER_SHUTDOWN = "server_shutdown"
    NOT_AUTHORIZED = "not_authorized"  # CONNECT refused
    CONNECT_TIMEOUT = "connect_timeout"  # no CONNECT in time
    SERVER_ERROR = "server_error"  # a broker bug ended the connection (logged with a traceback)
    ADMINISTRATIVE_ACTION = "administrative_action"  # kicked by an operator (admin API, CLI)
    # the credentials it authenticated with expired (`AuthResult.expires_at`, a JWT's exp)
    CREDENTIALS_EXPIRED = "credentials_expired"
    STORE_FAILING = "store_failing"  # a 3.x QoS 1/2 publisher while the store fails
    # too many QoS 2 PUBLISHes waiting for PUBRELs to free room (`PublishIntake._wait`)
    QOS2_BACKLOG = "qos2_backlog"
    # a cluster's node that lost NATS for longer than its lease (docs/cluster.md)
    CLUSTER_UNREACHABLE = "cluster_unreachable"


class DropReason(Enum):
    NO_SUBSCRIBERS = "no_subscribers"
    QUEUE_FULL = "queue_full"  # a session's offline queue overflowed (oldest dropped)
    SLOW_CONSUMER = "slow_consumer"  # QoS 0 to a connection whose write buffer is over its limit
    NOT_AUTHORIZED = "not_authorized"  # publish denied by ACL
    BY_PLUGIN = "by_plugin"  # a message.publish callback dropped it
    QOS0_OFFLINE = "qos0_offline"  # QoS 0 to an offline session with queue_qos0 off
    EXPIRED = "expired"  # its MQTT 5 Message Expiry Interval passed before delivery
    PACKET_TOO_LARGE = "packet_too_large"  # over the subscriber's Maximum Packet Size (5.0)
    PAYLOAD_FORMAT_INVALID = "payload_format_invalid"  # marked UTF-8 but is not (5.0)
