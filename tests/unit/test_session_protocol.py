"""SessionProtocol and the takeover rules, driven without sockets or actors: a takeover, a
resume of a persistent session with QoS 1/2 messages in flight and queued, a QoS 2 exchange
both ways, SUBACK/UNSUBACK codes, and what each step writes to the store.

Bytes are decoded back into packets, so the tests read as the client would see them.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from channel.actions import SubscribeRequest, UnsubscribeRequest
from core.client import ClientInfo
from core.message import Message
from core.reasons import DisconnectReason
from core.session_state import (
    Ack,
    Completed,
    Delivery,
    InflightEntry,
    SessionState,
    Stage,
)
from mqtt.decoder import PacketDecoder
from mqtt.encoder import encode_ack
from mqtt.packets import (
    ConnAck,
    PacketType,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscription,
    UnsubAck,
)
from mqtt.reason_codes import ReasonCode
from session.actions import Close, DeleteRecord, Forget, MarkSent, SaveSession
from session.protocol import SessionProtocol
from session.takeovers import Fate, Kind, Wait, fate, waits


class _Any:
    """Equal to anything: a Reason String's text is not what these tests check."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


any_: Any = _Any()


def client(version: int = 4, client_id: str = "c1", expiry: float = 60.0) -> ClientInfo:
    return ClientInfo(
        client_id=client_id,
        username=None,
        peer="peer:1",
        protocol_version=version,
        clean_start=False,
        keepalive=60,
        session_expiry=expiry,
    )


def message(payload: bytes, qos: int, message_id: int = 0) -> Message:
    return Message(topic="t/x", payload=payload, qos=qos, message_id=message_id)


def attached(protocol: SessionProtocol, who: ClientInfo, present: bool) -> list[Any]:
    return protocol.attach(
        who,
        session_present=present,
        connack_properties={},
        max_inflight=32,
        now=0.0,
        delivered_hook=False,
    )


def sent(protocol: SessionProtocol) -> list[Any]:
    """The packets written since the last call, decoded as the client reads them."""
    data, protocol.out[:] = b"".join(protocol.out), []
    decoder = PacketDecoder(max_packet_size=1 << 20, protocol_version=protocol.version)
    return list(decoder.feed(data))


def writes(protocol: SessionProtocol) -> list[Any]:
    done, protocol.writes = protocol.writes, []
    return done


def test_a_takeover_waits_for_what_the_attached_connection_received() -> None:
    # A connection attached: a takeover waits until it handled what it had received
    # (its DISCONNECT counts first, section 3.14.2.2.2); later ones queue behind.
    assert waits(Kind.ATTACH, queued=False, attached=True, own_connection=False) is Wait.ASK
    assert waits(Kind.HAND_OFF, queued=False, attached=True, own_connection=False) is Wait.ASK
    assert waits(Kind.CLEAN_START, queued=True, attached=True, own_connection=False) is (
        Wait.BEHIND
    )
    # Nothing attached, or the attached connection itself: nothing to wait for.
    assert waits(Kind.ATTACH, queued=False, attached=False, own_connection=False) is Wait.NOW
    assert waits(Kind.ATTACH, queued=False, attached=True, own_connection=True) is Wait.NOW
    # The session ends while they wait: each is passed on.
    assert fate(Kind.HAND_OFF, replaced=False) is Fate.ANSWER
    assert fate(Kind.ATTACH, replaced=False) is Fate.REOPEN
    assert fate(Kind.ATTACH, replaced=True) is Fate.CLOSE  # the clean start owns the id
    assert fate(Kind.CLEAN_START, replaced=True) is None


def test_takeover_by_a_new_connection_resends_what_the_old_one_left_unacknowledged() -> None:
    state = SessionState("c1", persistent=True)
    protocol = SessionProtocol(state, 4, store_enabled=True)
    attached(protocol, client(), present=False)
    assert sent(protocol) == [ConnAck(session_present=False)]
    protocol.carry_out(
        state.deliver([Delivery(message(b"one", 1), 1, False, seq=7)], connected=True), 0.0, False
    )
    assert sent(protocol) == [Publish("t/x", b"one", 1, packet_id=1)]
    protocol.out.append(b"unwritten")  # not yet written when the takeover comes
    writes(protocol)

    # The new connection gets CONNACK with session present [MQTT-3.2.2-2] and the PUBLISH
    # again with DUP=1 [MQTT-4.4.0-1]; nothing meant for the old one.
    attached(protocol, client(), present=True)
    assert sent(protocol) == [
        ConnAck(session_present=True),
        Publish("t/x", b"one", 1, dup=True, packet_id=1),
    ]
    assert writes(protocol) == [SaveSession(None, subscriptions_changed=False)]


def test_resume_resends_in_order_then_fills_the_window_from_the_queue() -> None:
    # A persistent session as restored from the store: a QoS 1 and a QoS 2 PUBLISH in
    # flight, a QoS 2 delivery awaiting PUBCOMP, and two queued messages.
    state = SessionState("c1", persistent=True, expiry=60.0, next_packet_id=4)
    state.inflight = {
        1: InflightEntry(Delivery(message(b"a", 1), 1, False, seq=1), Stage.AWAIT_PUBACK),
        2: InflightEntry(Delivery(message(b"b", 2), 2, False, seq=2), Stage.AWAIT_PUBCOMP),
        3: InflightEntry(Delivery(message(b"c", 2), 2, False, seq=3), Stage.AWAIT_PUBREC),
    }
    state.queue = deque(
        [Delivery(message(b"d", 1), 1, False, seq=4), Delivery(message(b"e", 2), 2, False, seq=5)]
    )
    protocol = SessionProtocol(state, 4, store_enabled=True)
    assert protocol.held_bytes == 5

    assert attached(protocol, client(), present=True) == []
    assert sent(protocol) == [
        ConnAck(session_present=True),
        Publish("t/x", b"a", 1, dup=True, packet_id=1),
        PubRel(2),
        Publish("t/x", b"c", 2, dup=True, packet_id=3),
        Publish("t/x", b"d", 1, packet_id=4),
        Publish("t/x", b"e", 2, packet_id=5),
    ]
    # The record, then the queued messages as they enter the window (resends are stored).
    assert writes(protocol) == [
        SaveSession(None, subscriptions_changed=True),
        MarkSent(Stage.AWAIT_PUBACK.value, [(4, 4)]),
        MarkSent(Stage.AWAIT_PUBREC.value, [(5, 5)]),
    ]
    assert protocol.sent == 2  # the resends were counted when first sent


def test_qos2_to_the_client_moves_through_its_stages_and_into_the_store() -> None:
    state = SessionState("c1", persistent=True)
    protocol = SessionProtocol(state, 5, store_enabled=True)
    attached(protocol, client(version=5), present=False)
    sent(protocol)
    writes(protocol)
    delivery = Delivery(message(b"x", 2), 2, False, seq=9)
    protocol.held_bytes += 1
    protocol.carry_out(state.deliver([delivery], connected=True), 0.0, False)
    (publish,) = sent(protocol)
    assert (publish.qos, publish.packet_id) == (2, 1)
    assert writes(protocol) == [MarkSent(Stage.AWAIT_PUBREC.value, [(9, 1)])]

    protocol.carry_out(state.acknowledge([(Ack.PUBREC, 1)], True, 0.0), 0.0, False)
    assert sent(protocol) == [PubRel(1)]
    assert writes(protocol) == [MarkSent(Stage.AWAIT_PUBCOMP.value, [(9, 1)])]

    reports = protocol.carry_out(state.acknowledge([(Ack.PUBCOMP, 1)], True, 0.0), 0.0, False)
    assert reports == [Completed(delivery)]
    assert sent(protocol) == []
    assert writes(protocol) == [Forget([9])]
    assert protocol.held_bytes == 0

    # A PUBREC for an id not in flight: PUBREL 0x92 (5.0).
    protocol.carry_out(state.acknowledge([(Ack.PUBREC, 7)], True, 0.0), 0.0, False)
    assert sent(protocol) == [PubRel(7, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND, properties=any_)]


def test_qos2_from_the_client_is_routed_once_and_released_after_the_store() -> None:
    state = SessionState("c1", persistent=True)
    protocol = SessionProtocol(state, 5, store_enabled=True)
    attached(protocol, client(version=5), present=False)
    sent(protocol)
    writes(protocol)
    first = message(b"q2", 2, message_id=41)
    pubrec = encode_ack(PacketType.PUBREC, 10, 0, 5)

    answer = protocol.inbound_qos2([(10, first, pubrec)], store_failing=False)
    assert answer.to_route == [first]
    assert answer.pubrecs == [pubrec]
    assert answer.writes == [SaveSession(None, subscriptions_changed=False)]  # before PUBREC
    assert state.awaiting_rel == {10}
    # Nobody subscribes to it: its PUBREC says so (0x10, 5.0 section 3.5.2.1).
    protocol.mark_unmatched([(10, first, pubrec)], answer, {41})
    assert answer.pubrecs == [encode_ack(PacketType.PUBREC, 10, 0x10, 5)]

    # The same packet id again before PUBREL: acknowledged, not routed again [MQTT-4.3.3-2].
    again = protocol.inbound_qos2([(10, message(b"q2", 2), pubrec)], store_failing=False)
    assert (again.to_route, again.pubrecs) == ([], [pubrec])

    reply = protocol.release([10, 11])
    assert reply.writes == [SaveSession(None, subscriptions_changed=False)]  # before PUBCOMP
    decoder = PacketDecoder(max_packet_size=1 << 20, protocol_version=5)
    assert list(decoder.feed(reply.data)) == [
        PubComp(10),
        PubComp(11, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND, properties=any_),
    ]
    assert state.awaiting_rel == frozenset()


def test_qos2_from_the_client_while_the_store_fails() -> None:
    # 3.x: no reason code to refuse with; the connection is closed, the client resends.
    protocol = SessionProtocol(SessionState("c1", persistent=True), 4, store_enabled=True)
    attached(protocol, client(), present=False)
    pubrec = encode_ack(PacketType.PUBREC, 3, 0, 4)
    answer = protocol.inbound_qos2([(3, message(b"m", 2), pubrec)], store_failing=True)
    assert answer.reports == [Close(DisconnectReason.STORE_FAILING, "store fails")]
    assert (answer.to_route, answer.pubrecs) == ([], [])
    # 5.0: PUBREC 0x97 Quota exceeded.
    protocol = SessionProtocol(SessionState("c1", persistent=True), 5, store_enabled=True)
    attached(protocol, client(version=5), present=False)
    sent(protocol)
    answer = protocol.inbound_qos2([(3, message(b"m", 2), pubrec)], store_failing=True)
    assert (answer.to_route, answer.writes, answer.reports, sent(protocol)) == ([], [], [], [])
    # In the answer's PUBRECs: the session writes them in their place (`channel.ack_order`).
    decoder = PacketDecoder(max_packet_size=1 << 20, protocol_version=5)
    (refused,) = decoder.feed(b"".join(answer.pubrecs))
    assert isinstance(refused, PubRec)
    assert refused.reason_code == ReasonCode.QUOTA_EXCEEDED


def test_suback_and_unsuback_codes() -> None:
    protocol = SessionProtocol(SessionState("c1", persistent=False), 5, store_enabled=True)
    attached(protocol, client(version=5, expiry=0.0), present=False)
    request = SubscribeRequest(
        5, [Subscription("a/#", 1), Subscription("$share/g/b", 2), Subscription("c", 0)], {2: 0x87}
    )
    subscribed = protocol.subscribe(request)
    assert subscribed.ack == SubAck(5, [1, 2, 0x87], {})
    assert [f for f, _options in subscribed.granted] == ["a/#", "$share/g/b"]
    # Retained messages for the new one, never for a shared subscription [MQTT-4.8.2-6].
    assert [f for f, _options in subscribed.retained_for] == ["a/#"]
    # A clean session's SUBACK waits for nothing.
    assert protocol.acknowledge(subscribed.ack).writes is None

    unsuback, removed = protocol.unsubscribe(UnsubscribeRequest(6, ["a/#", "zzz"]))
    assert unsuback == UnsubAck(6, [ReasonCode.SUCCESS, ReasonCode.NO_SUBSCRIPTION_EXISTED])
    assert removed == ["a/#"]


def test_a_session_that_stops_being_persistent_deletes_its_record() -> None:
    protocol = SessionProtocol(SessionState("c1", persistent=True), 5, store_enabled=True)
    protocol.keep(persistent=False, expiry=0.0)  # a 5.0 DISCONNECT with expiry 0
    assert writes(protocol) == [DeleteRecord()]
    protocol.save()
    assert writes(protocol) == []  # not persistent: nothing more is stored
