"""Sans-I/O MQTT 3.1 / 3.1.1 / 5.0 codec: packets, decoder, encoder, reason codes, properties.

    from mqtt import PacketDecoder, encode, encode_ack, encode_publish, MqttError

No module of this package does I/O or imports socket, threading, gevent or pykka
(enforced by tests/unit/test_layering.py).
"""

from mqtt.decoder import MAX_PACKET_SIZE, PacketDecoder
from mqtt.encoder import encode, encode_ack, encode_publish
from mqtt.errors import (
    MalformedPacketError,
    MqttError,
    PacketTooLargeError,
    ProtocolError,
    TopicFilterInvalidError,
    TopicNameInvalidError,
    UnsupportedProtocolVersionError,
)
from mqtt.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    ProtocolVersion,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from mqtt.properties import PropertyId
from mqtt.reason_codes import ConnackReturnCode, ReasonCode, connack_return_code

__all__ = [
    "MAX_PACKET_SIZE",
    "Auth",
    "ConnAck",
    "ConnackReturnCode",
    "Connect",
    "Disconnect",
    "MalformedPacketError",
    "MqttError",
    "Packet",
    "PacketDecoder",
    "PacketTooLargeError",
    "PacketType",
    "PingReq",
    "PingResp",
    "Properties",
    "PropertyId",
    "ProtocolError",
    "ProtocolVersion",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "ReasonCode",
    "SubAck",
    "Subscribe",
    "Subscription",
    "TopicFilterInvalidError",
    "TopicNameInvalidError",
    "UnsubAck",
    "Unsubscribe",
    "UnsupportedProtocolVersionError",
    "Will",
    "connack_return_code",
    "encode",
    "encode_ack",
    "encode_publish",
]
