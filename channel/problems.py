"""Reason Strings and User Properties on the broker's MQTT 5.0 packets: when, and how large.

A 5.0 refusal or close says why in a Reason String (property 0x1F), a human-readable text
"designed for diagnostics" that the client should not parse (section 3.1.2.11.7 and each
packet's 3.x.2.2.2). The rules, all kept here so every packet type follows them the same way:

- **Which packets.** CONNACK and DISCONNECT always may carry them. Every other packet only
  when the client left Request Problem Information at 1 (its default): with 0 "the Server
  MUST NOT send a Reason String or User Properties on any packet other than PUBLISH, CONNACK
  or DISCONNECT" [MQTT-3.1.2-29]. PUBLISH forwards the publisher's User Properties and is
  not handled here. 3.x packets have no properties at all.
- **Which acknowledgements.** Only refusals (reason code >= 0x80) carry a string: success
  acknowledgements stay in their shortest form and never reach this module, so the QoS 1/2
  hot path does not pay for it.
- **Never too large.** An added property must not make the packet larger than the client's
  Maximum Packet Size: it is left out instead, the packet still goes ([MQTT-3.2.2-19/20]
  CONNACK, [MQTT-3.4.2-2] PUBACK, [MQTT-3.5.2-2] PUBREC, [MQTT-3.6.2-2] PUBREL,
  [MQTT-3.7.2-2] PUBCOMP, [MQTT-3.9.2-1] SUBACK, [MQTT-3.11.2-1] UNSUBACK, [MQTT-3.14.2-3]
  DISCONNECT). The size is the whole encoded packet (section 3.1.2.11.4).

`with_properties` is the one place that adds them (to any packet type); `refusal_ack` is the
PUBACK/PUBREC/PUBREL/PUBCOMP refusal built on it, for the channel and the session actor.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

from core.client import NO_LIMIT, ClientInfo
from mqtt.encoder import encode, encode_ack
from mqtt.packets import ConnAck, Disconnect, PubAck, PubComp, PubRec, PubRel, SubAck, UnsubAck
from mqtt.properties import PropertyId

logger = logging.getLogger(__name__)

REASON_STRING = PropertyId.REASON_STRING
USER_PROPERTY = PropertyId.USER_PROPERTY

# Longer texts are cut: a diagnostic, not a document (and a UTF-8 string holds 65535 bytes).
MAX_REASON_CHARACTERS = 1024

# U+0000 must not be in a UTF-8 string [MQTT-1.5.4-2]; the other control characters should
# not be (a receiver may call them malformed, section 1.5.4): each becomes a space.
_CONTROL = {code: " " for code in (*range(0x20), *range(0x7F, 0xA0))}

P = TypeVar(
    "P", bound=ConnAck | Disconnect | PubAck | PubRec | PubRel | PubComp | SubAck | UnsubAck
)

_ACK_PACKETS: dict[int, type[PubAck | PubRec | PubRel | PubComp]] = {
    cls.packet_type: cls for cls in (PubAck, PubRec, PubRel, PubComp)
}


def reason_string(text: str) -> dict[int, Any]:
    """The Reason String property of `text`, made a well-formed MQTT UTF-8 string."""
    text = text[:MAX_REASON_CHARACTERS].translate(_CONTROL)
    # A lone surrogate cannot be encoded: it becomes "?".
    return {REASON_STRING: text.encode("utf-8", "replace").decode("utf-8")}


def user_properties(pairs: Iterable[tuple[str, str]]) -> dict[int, Any]:
    """The User Property entries of `pairs`, in order (none if there are none)."""
    listed = list(pairs)
    return {USER_PROPERTY: listed} if listed else {}


def with_properties(packet: P, additions: Iterable[dict[int, Any]], limit: int) -> tuple[P, bytes]:
    """`packet` with each of `additions` added, in order, as long as the 5.0 encoding stays
    within `limit` (the client's Maximum Packet Size; `NO_LIMIT` for none), and its bytes.

    An addition that does not fit is left out, and the next one is still tried: the packet
    itself always goes, its optional properties only if they fit (module docstring).
    """
    data: bytes | None = None
    for extra in additions:
        if not extra:
            continue
        candidate = replace(packet, properties={**packet.properties, **extra})
        try:
            encoded = encode(candidate, 5)
        except ValueError:  # a plugin's string over 65535 bytes (section 1.5.4): left out
            logger.warning("left out of a %s: %r cannot be encoded", type(packet).__name__, extra)
            continue
        if limit == NO_LIMIT or len(encoded) <= limit:
            packet, data = candidate, encoded
    return packet, encode(packet, 5) if data is None else data


def problems_allowed(client: ClientInfo | None) -> bool:
    """Whether a packet other than PUBLISH, CONNACK and DISCONNECT may carry a Reason String
    or User Properties to `client` [MQTT-3.1.2-29]."""
    return (
        client is not None and client.protocol_version >= 5 and client.request_problem_information
    )


def refusal_ack(
    packet_type: int, packet_id: int, reason_code: int, why: str, client: ClientInfo
) -> bytes:
    """A PUBACK/PUBREC/PUBREL/PUBCOMP with a failure `reason_code` (>= 0x80) for `client`,
    with `why` as its Reason String when the client asked for problem information and it
    fits. A 3.x client gets the plain acknowledgement (it has no reason codes)."""
    if not problems_allowed(client):
        return encode_ack(packet_type, packet_id, reason_code, client.protocol_version)
    ack = _ACK_PACKETS[packet_type](packet_id, reason_code)
    return with_properties(ack, (reason_string(why),), client.maximum_packet_size)[1]
