"""The codec's exception family: every decoding failure is an `MqttError` with a 5.0 reason code.

The broker catches `MqttError`, answers with `reason_code` where the protocol version allows
it (CONNACK or DISCONNECT in 5.0, CONNACK return code 1 for an unsupported version in 3.1.1)
and closes the connection. Messages name the broken rule and cite the spec statement.

Choice: "client identifier not valid" (0x85) is not raised here. The codec only checks that
the client identifier is a well-formed UTF-8 string; its length and characters (3.1 limits it
to 23 characters, brokers commonly accept more) are broker policy.
"""

from __future__ import annotations

from mqtt.reason_codes import ReasonCode


class MqttError(Exception):
    """A packet broke an MQTT rule; `reason_code` is the MQTT 5.0 reason code for it."""

    default_reason_code: int = ReasonCode.UNSPECIFIED_ERROR

    def __init__(self, message: str, reason_code: int | None = None) -> None:
        super().__init__(message)
        self.reason_code: int = self.default_reason_code if reason_code is None else reason_code


class MalformedPacketError(MqttError):
    """The bytes cannot be parsed as the packet they claim to be (0x81)."""

    default_reason_code = ReasonCode.MALFORMED_PACKET


class ProtocolError(MqttError):
    """The packet parses but holds data the protocol forbids (0x82)."""

    default_reason_code = ReasonCode.PROTOCOL_ERROR


class PacketTooLargeError(MqttError):
    """The packet is larger than the configured maximum packet size (0x95)."""

    default_reason_code = ReasonCode.PACKET_TOO_LARGE


class UnsupportedProtocolVersionError(MqttError):
    """CONNECT names a protocol name/level pair this codec does not speak (0x84).

    A 3.1.1 broker answers CONNACK return code 1 [MQTT-3.1.2-2]. `protocol_name` and
    `protocol_level` are what the client sent.
    """

    default_reason_code = ReasonCode.UNSUPPORTED_PROTOCOL_VERSION

    def __init__(self, message: str, protocol_name: str, protocol_level: int) -> None:
        super().__init__(message)
        self.protocol_name = protocol_name
        self.protocol_level = protocol_level


class TopicNameInvalidError(MalformedPacketError):
    """A PUBLISH or will topic name breaks the topic syntax rules (0x90)."""

    default_reason_code = ReasonCode.TOPIC_NAME_INVALID


class TopicFilterInvalidError(MalformedPacketError):
    """A SUBSCRIBE or UNSUBSCRIBE topic filter breaks the topic syntax rules (0x8F)."""

    default_reason_code = ReasonCode.TOPIC_FILTER_INVALID
