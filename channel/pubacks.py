"""The answer to every QoS 1/2 PUBLISH a client sends: its PUBACK/PUBREC reason code and bytes.

This is the one place that decides what a client's QoS 1 PUBLISH is acknowledged with, and
the channel's and the session's PUBREC refusals. It is pure: the channel builds the answers
as it handles the PUBLISHes, the client actor writes the bytes they give it.

- **Accepted**: PUBACK/PUBREC 0x00. A 5.0 PUBACK says 0x10 (No matching subscribers) for a
  message nobody subscribes to (section 3.4.2.1), which only routing can tell: a batch's
  PUBACKs (`Pubacks`) are encoded once it was routed (`Pubacks.routed`, given the ids of the
  messages that matched nobody). 3.x acknowledgements carry no reason code: encoded at once.
  A QoS 2 message is routed by the session, which decides its PUBREC's 0x10
  (`session.protocol`).
- **Refused by the channel**: 0x87 Not authorized (the ACL) or 0x99 Payload format invalid
  (`refusal`), saying why in a Reason String to a 5.0 client that asked for problem
  information (`channel.problems`). A 3.x client has no reason codes: its denied publish is
  acknowledged anyway [MQTT-3.3.5-2].
- **Refused because the store fails** (a full disk, an I/O error; docs/overload.md): a
  QoS 1/2 PUBLISH that a persistent session would have to store is refused rather than
  acknowledged. A 5.0 client gets its PUBACK/PUBREC with 0x97 Quota exceeded ("an
  implementation or administrative imposed limit has been exceeded", sections 3.4.2.1 /
  3.5.2.1) and may send it again later (`Pubacks.refused`, `refused_pubrec`); refusals
  already decided keep their code and Reason String. A 3.x client, whose acknowledgements
  carry no reason code, is disconnected instead (`Pubacks.refused` answers None), so it
  sends the message again on its next connection [MQTT-4.4.0-1].
- **Order**: a batch's PUBACKs are one `Pubacks`, in the order of their PUBLISHes
  [MQTT-4.6.0-2], whatever each one's code; the batches' acknowledgements leave in the order
  of the batches (`slot`, `channel.ack_order`), whichever is decided first.

Whether a batch's messages needed the store, whether the store fails, and which messages
matched nobody are known only where they are routed (`actors.dispatch`): the client actor
asks `Pubacks` for the bytes of that outcome and fills its `slot` with them (once the store
committed, if it had to), writes what that releases, and decides none of the codes itself.
"""

from __future__ import annotations

from collections.abc import Collection

from channel.ack_order import AckSlot
from channel.problems import refusal_ack
from core.client import ClientInfo
from core.message import Message
from mqtt.encoder import encode_ack
from mqtt.packets import PacketType
from mqtt.reason_codes import ReasonCode

_PUBACK, _PUBREC = PacketType.PUBACK, PacketType.PUBREC
_NO_MATCHING_SUBSCRIBERS = ReasonCode.NO_MATCHING_SUBSCRIBERS

STORE_REFUSED = ReasonCode.QUOTA_EXCEEDED
STORE_REFUSED_WHY = "quota exceeded: the broker cannot store messages now; send it again later"

# One PUBACK of a batch: (packet id, the message accepted or None if refused, the PUBACK's
# bytes if they do not depend on routing: a refusal's, or a 3.x client's).
PubackEntry = tuple[int, Message | None, bytes | None]


class Pubacks:
    """The PUBACKs of one batch's QoS 1 PUBLISHes, in the order of the PUBLISHes."""

    __slots__ = ("_client", "_entries", "slot", "waits_for_routing")

    def __init__(self, client: ClientInfo) -> None:
        self._client = client
        self._entries: list[PubackEntry] = []
        # Whether a PUBACK's code depends on routing (a 5.0 accepted message: 0x10 if it
        # matched nobody); the router then collects the unmatched ids for `routed`.
        self.waits_for_routing = False
        # Its place among the connection's acknowledgements (`channel.ack_order`), given when
        # the batch is complete: whoever learns its outcome fills it with the bytes.
        self.slot: AckSlot | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def accept(self, packet_id: int, message: Message) -> None:
        """The PUBLISH of `message` is routed: PUBACK 0x00 (5.0: 0x10 if it matched nobody)."""
        if self._client.protocol_version >= 5:
            self._entries.append((packet_id, message, None))
            self.waits_for_routing = True
        else:
            data = encode_ack(_PUBACK, packet_id, 0, self._client.protocol_version)
            self._entries.append((packet_id, message, data))

    def refuse(self, packet_id: int, code: int, topic: str) -> None:
        """The PUBLISH to `topic` is not routed: PUBACK `code` (0x87, 0x99), saying why."""
        data = refusal(_PUBACK, packet_id, code, topic, self._client)
        self._entries.append((packet_id, None, data))

    def routed(self, unmatched: Collection[int] = ()) -> bytes:
        """The PUBACKs of the batch once routed; `unmatched` holds the message ids of the
        messages no subscription matched (5.0: 0x10)."""
        parts = []
        for packet_id, message, data in self._entries:
            if data is not None:
                parts.append(data)
            elif unmatched and message.message_id in unmatched:  # type: ignore[union-attr]
                parts.append(encode_ack(_PUBACK, packet_id, _NO_MATCHING_SUBSCRIBERS, 5))
            else:
                parts.append(encode_ack(_PUBACK, packet_id, 0, 5))
        return b"".join(parts)

    def refused(self) -> bytes | None:
        """The PUBACKs of the batch when the store fails and a message of it would have to be
        stored: 5.0, each accepted one becomes 0x97 (with a Reason String if the client asked
        for problem information), refusals stay as they are. None for a 3.x client, which
        has no reason code to say it with: its connection is closed instead
        (`DisconnectReason.STORE_FAILING`)."""
        client = self._client
        if client.protocol_version < 5:
            return None
        return b"".join(
            data if data is not None else store_refusal(_PUBACK, packet_id, client)
            for packet_id, _message, data in self._entries
        )


def pubrec(packet_id: int, version: int) -> bytes:
    """The PUBREC of a QoS 2 PUBLISH the channel accepts (the session may still refuse it:
    `refused_pubrec`, or say 0x10 once it routed it)."""
    return encode_ack(_PUBREC, packet_id, 0, version)


def refusal(packet_type: int, packet_id: int, code: int, topic: str, client: ClientInfo) -> bytes:
    """The PUBACK/PUBREC that refuses a PUBLISH to `topic` with `code`: 0x99 if its payload
    is not the UTF-8 it claims, else 0x87 Not authorized; a 5.0 client that asked for
    problem information is told why (`channel.problems`)."""
    if code == ReasonCode.PAYLOAD_FORMAT_INVALID:
        why = f"payload on {topic!r} is not the UTF-8 its Payload Format Indicator says"
    else:
        why = f"not authorised to publish to {topic!r}"
    return refusal_ack(packet_type, packet_id, code, why, client)


def store_refusal(packet_type: int, packet_id: int, client: ClientInfo) -> bytes:
    """The PUBACK/PUBREC 0x97 of a PUBLISH refused while the store fails."""
    return refusal_ack(packet_type, packet_id, STORE_REFUSED, STORE_REFUSED_WHY, client)


def refused_pubrec(packet_id: int, client: ClientInfo) -> bytes:
    """The PUBREC 0x97 of a QoS 2 PUBLISH the session refuses while the store fails."""
    return store_refusal(_PUBREC, packet_id, client)
