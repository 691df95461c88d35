"""MQTT reason codes: every MQTT 5.0 reason code and the MQTT 3.1/3.1.1 CONNACK return codes.

`ReasonCode` follows the table of MQTT 5.0 section 2.4. Several names share a value
(0x00 is Success, Normal disconnection and Granted QoS 0); the extra names are enum aliases.
`connack_return_code` maps a 5.0 CONNACK reason code to the nearest 3.1.1 return code, for a
broker answering a 3.1/3.1.1 client with a decision made in 5.0 terms.
"""

from __future__ import annotations

from enum import IntEnum


class ReasonCode(IntEnum):
    """MQTT 5.0 reason codes (section 2.4); values >= 0x80 are failures."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class ConnackReturnCode(IntEnum):
    """MQTT 3.1/3.1.1 CONNACK return codes (3.1.1 section 3.2.2.3)."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USER_NAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


SUBACK_FAILURE_V311 = 0x80
"""The only failure return code of a 3.1.1 SUBACK [MQTT-3.9.3-2]."""

_CONNACK_5_TO_311: dict[int, ConnackReturnCode] = {
    ReasonCode.SUCCESS: ConnackReturnCode.ACCEPTED,
    ReasonCode.UNSUPPORTED_PROTOCOL_VERSION: ConnackReturnCode.UNACCEPTABLE_PROTOCOL_VERSION,
    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID: ConnackReturnCode.IDENTIFIER_REJECTED,
    ReasonCode.SERVER_UNAVAILABLE: ConnackReturnCode.SERVER_UNAVAILABLE,
    ReasonCode.SERVER_BUSY: ConnackReturnCode.SERVER_UNAVAILABLE,
    ReasonCode.SERVER_SHUTTING_DOWN: ConnackReturnCode.SERVER_UNAVAILABLE,
    ReasonCode.USE_ANOTHER_SERVER: ConnackReturnCode.SERVER_UNAVAILABLE,
    ReasonCode.SERVER_MOVED: ConnackReturnCode.SERVER_UNAVAILABLE,
    ReasonCode.CONNECTION_RATE_EXCEEDED: ConnackReturnCode.SERVER_UNAVAILABLE,
    ReasonCode.BAD_USER_NAME_OR_PASSWORD: ConnackReturnCode.BAD_USER_NAME_OR_PASSWORD,
    ReasonCode.BAD_AUTHENTICATION_METHOD: ConnackReturnCode.BAD_USER_NAME_OR_PASSWORD,
    ReasonCode.NOT_AUTHORIZED: ConnackReturnCode.NOT_AUTHORIZED,
    ReasonCode.BANNED: ConnackReturnCode.NOT_AUTHORIZED,
}


def connack_return_code(reason_code: int) -> ConnackReturnCode:
    """The 3.1.1 CONNACK return code nearest to the 5.0 CONNACK `reason_code`.

    Failures without a closer match (malformed packet, quota exceeded, ...) become
    "server unavailable", the generic refusal of 3.1.1.
    """
    return _CONNACK_5_TO_311.get(reason_code, ConnackReturnCode.SERVER_UNAVAILABLE)
