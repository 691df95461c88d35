"""SessionState: the actions of its transitions (deliver, acknowledge, resume, keep_readable),
the in-flight window, packet ids, the bounded queue, QoS 2 both ways.

Spec references are MQTT 3.1.1 unless stated; the rules are the same in 5.0.
"""

from __future__ import annotations

import itertools

import pytest

from core.message import Message
from core.reasons import DropReason
from core.session_state import (
    NO_PACKET_IDS,
    Ack,
    Action,
    Completed,
    Delivery,
    Dropped,
    InflightEntry,
    ProtocolViolation,
    Revoked,
    SendPublish,
    SendPubrel,
    SessionState,
    Stage,
    SubscriptionOptions,
    TooManyAwaitingRelError,
)

_numbers = itertools.count(1)


def delivery(qos: int, label: str | None = None) -> Delivery:
    """A distinct delivery (its payload names it) at `qos`."""
    number = next(_numbers)
    payload = (label or f"m{number}").encode()
    return Delivery(Message(topic="t/x", payload=payload, qos=qos), qos, False, seq=number)


def session(
    *,
    max_inflight: int = 32,
    max_queued: int = 1000,
    queue_qos0: bool = False,
    max_awaiting_rel: int = 100,
) -> SessionState:
    return SessionState(
        client_id="c1",
        persistent=True,
        max_inflight=max_inflight,
        max_queued=max_queued,
        queue_qos0=queue_qos0,
        max_awaiting_rel=max_awaiting_rel,
    )


def queued(state: SessionState) -> list[Delivery]:
    return list(state.queue or ())


def deliver(state: SessionState, message: Delivery, connected: bool = True) -> list[Action]:
    return state.deliver([message], connected)


def ack(state: SessionState, kind: Ack, packet_id: int, connected: bool = True) -> list[Action]:
    return state.acknowledge([(kind, packet_id)], connected, now=0.0)


def sent_id(actions: list[Action]) -> int:
    """The packet id of the one new PUBLISH in `actions`."""
    [action] = actions
    assert type(action) is SendPublish and not action.dup
    return action.packet_id


# ----- QoS 0 ------------------------------------------------------------------------------


def test_qos0_to_a_connected_session_is_sent_without_a_packet_id() -> None:
    state = session()
    message = delivery(0)
    assert deliver(state, message) == [message]  # a bare Delivery: write it as QoS 0
    assert state.inflight == {}
    assert state.queue is None


def test_an_all_qos0_batch_sent_now_is_answered_with_the_batch_itself() -> None:
    """The fan-out fast path: no action objects, the owner can test the answer with `is`."""
    state = session()
    batch = [delivery(0), delivery(0), delivery(0)]
    assert state.deliver(batch, connected=True) is batch
    assert state.inflight == {} and state.queue is None


def test_a_mixed_batch_answers_each_delivery_in_order() -> None:
    state = session(max_inflight=1)
    qos0, qos1, qos2, later_qos0 = delivery(0), delivery(1), delivery(2), delivery(0)
    actions = state.deliver([qos0, qos1, qos2, later_qos0], connected=True)
    # qos2 waits for the window, and the QoS 0 after it waits behind it [MQTT-4.6.0-6]
    assert actions == [qos0, SendPublish(1, qos1)]
    assert queued(state) == [qos2, later_qos0]


def test_qos0_to_an_offline_session_is_dropped_by_default() -> None:
    state = session()
    message = delivery(0)
    assert deliver(state, message, connected=False) == [Dropped(message, DropReason.QOS0_OFFLINE)]
    assert state.queue is None


def test_qos0_to_a_slow_consumer_is_dropped_but_qos1_still_goes_out() -> None:
    """`drop_qos0` is the owner's verdict on the transport backlog."""
    state = session(queue_qos0=True)
    qos0, qos1 = delivery(0), delivery(1)
    actions = state.deliver([qos0, qos1], connected=True, drop_qos0=True)
    assert actions == [Dropped(qos0, DropReason.SLOW_CONSUMER), SendPublish(1, qos1)]
    assert state.queue is None  # dropped, not queued, even with queue_qos0


def test_qos0_to_an_offline_session_is_queued_with_queue_qos0_and_sent_on_resume() -> None:
    state = session(queue_qos0=True)
    message = delivery(0)
    assert deliver(state, message, connected=False) == []
    assert queued(state) == [message]
    assert state.resume(now=0.0) == [message]
    assert state.inflight == {}
    assert state.queue is None


def test_qos0_does_not_overtake_queued_qos0_of_the_same_topic() -> None:
    """Same topic and QoS from one publisher arrive in the order published [MQTT-4.6.0-6]."""
    state = session(max_inflight=1, queue_qos0=True)
    blocker, older, newer = delivery(1), delivery(0, "older"), delivery(0, "newer")
    state.deliver([blocker, older], connected=False)
    assert state.resume(now=0.0) == [SendPublish(1, blocker)]  # reconnect: the window is full again
    sent_now = deliver(state, newer)
    sent_after_ack = ack(state, Ack.PUBACK, 1)
    assert [*sent_now, *sent_after_ack] == [Completed(blocker), older, newer]


# ----- QoS 1/2 and the in-flight window ---------------------------------------------------


@pytest.mark.parametrize(("qos", "stage"), [(1, Stage.AWAIT_PUBACK), (2, Stage.AWAIT_PUBREC)])
def test_qos1_and_qos2_are_sent_with_a_packet_id_while_the_window_has_room(
    qos: int, stage: Stage
) -> None:
    state = session(max_inflight=2)
    first, second = delivery(qos), delivery(qos)
    assert state.deliver([first, second], connected=True) == [
        SendPublish(1, first),
        SendPublish(2, second),
    ]
    assert state.inflight == {1: InflightEntry(first, stage), 2: InflightEntry(second, stage)}


def test_beyond_max_inflight_deliveries_are_queued() -> None:
    state = session(max_inflight=2)
    sent = [sent_id(deliver(state, delivery(1))) for _ in range(2)]
    extra = delivery(2)
    assert sent == [1, 2]
    assert deliver(state, extra) == []
    assert queued(state) == [extra]
    assert len(state.inflight) == 2


def test_qos1_to_an_offline_session_is_queued_not_sent() -> None:
    state = session()
    message = delivery(1)
    assert deliver(state, message, connected=False) == []
    assert state.inflight == {}
    assert queued(state) == [message]


def test_a_new_delivery_does_not_overtake_the_queue_even_with_a_free_slot() -> None:
    """Messages to one subscriber leave in order [MQTT-4.6.0-6]."""
    state = session(max_inflight=1)
    older = delivery(1)
    deliver(state, older, connected=False)
    newer = delivery(1)
    assert deliver(state, newer) == []  # the slot is free, the queue is not empty
    assert queued(state) == [older, newer]


def test_acks_that_free_slots_send_queued_deliveries_in_order() -> None:
    state = session(max_inflight=2)
    in_flight = [delivery(1), delivery(1)]
    waiting = [delivery(1), delivery(2), delivery(1)]
    state.deliver(in_flight + waiting, connected=True)
    assert ack(state, Ack.PUBACK, 999) == []  # a stray ack frees no slot: nothing sent
    assert state.acknowledge([(Ack.PUBACK, 1), (Ack.PUBACK, 2)], connected=True, now=0.0) == [
        Completed(in_flight[0]),
        Completed(in_flight[1]),
        SendPublish(3, waiting[0]),
        SendPublish(4, waiting[1]),
    ]
    assert queued(state) == [waiting[2]]
    assert ack(state, Ack.PUBACK, 3) == [Completed(waiting[0]), SendPublish(5, waiting[2])]
    assert state.queue is None  # an emptied queue holds no deque
    assert state.inflight[4].stage is Stage.AWAIT_PUBREC


def test_an_ack_while_disconnected_frees_the_slot_but_sends_nothing() -> None:
    state = session(max_inflight=1)
    first, second = delivery(1), delivery(1)
    state.deliver([first, second], connected=True)
    assert ack(state, Ack.PUBACK, 1, connected=False) == [Completed(first)]
    assert state.inflight == {}
    assert queued(state) == [second]
    assert state.resume(now=0.0) == [SendPublish(2, second)]


def test_packet_ids_in_flight_are_never_reused() -> None:
    """A new PUBLISH gets a currently unused packet id [MQTT-2.3.1-2] (server: [MQTT-2.3.1-4])."""
    state = session(max_inflight=3)
    state.deliver([delivery(1) for _ in range(3)], connected=True)
    ack(state, Ack.PUBACK, 2)
    state.next_packet_id = 1  # force the allocator onto ids still in flight
    new_id = sent_id(deliver(state, delivery(1)))
    assert new_id == 2
    assert set(state.inflight) == {1, 2, 3}


def test_packet_ids_wrap_from_65535_to_1_skipping_ids_in_flight() -> None:
    state = session(max_inflight=4)
    state.next_packet_id = 65534
    assert sent_id(deliver(state, delivery(1))) == 65534
    assert sent_id(deliver(state, delivery(1))) == 65535
    assert state.next_packet_id == 1
    assert sent_id(deliver(state, delivery(1))) == 1
    ack(state, Ack.PUBACK, 65534)
    state.next_packet_id = 65535  # 65535 and 1 are in flight: the next free id is 2
    assert sent_id(deliver(state, delivery(1))) == 2
    assert state.next_packet_id == 3
    assert 0 not in state.inflight


def test_packet_id_zero_is_never_allocated() -> None:
    """QoS > 0 PUBLISH needs a non-zero packet id [MQTT-2.3.1-1]."""
    state = session(max_inflight=65535)
    state.next_packet_id = 65535
    actions = state.deliver([delivery(1) for _ in range(3)], connected=True)
    assert [action.packet_id for action in actions if type(action) is SendPublish] == [
        65535,
        1,
        2,
    ]


# ----- the queue bound --------------------------------------------------------------------


def test_over_max_queued_the_oldest_is_dropped_as_queue_full() -> None:
    state = session(max_queued=3)
    messages = [delivery(1) for _ in range(5)]
    answers = [deliver(state, message, connected=False) for message in messages]
    assert answers == [
        [],
        [],
        [],
        [Dropped(messages[0], DropReason.QUEUE_FULL)],
        [Dropped(messages[1], DropReason.QUEUE_FULL)],
    ]
    assert queued(state) == messages[2:]


def test_the_queue_bound_counts_only_queued_deliveries_not_in_flight_ones() -> None:
    state = session(max_inflight=2, max_queued=2)
    messages = [delivery(1) for _ in range(4)]
    actions = state.deliver(messages, connected=True)
    assert actions == [SendPublish(1, messages[0]), SendPublish(2, messages[1])]  # no Dropped
    assert queued(state) == messages[2:]


def test_max_queued_zero_means_unbounded() -> None:
    state = session(max_queued=0)
    messages = [delivery(1) for _ in range(2000)]
    assert state.deliver(messages, connected=False) == []  # nothing dropped
    assert queued(state) == messages


# ----- acknowledgements -------------------------------------------------------------------


def test_puback_completes_a_qos1_delivery() -> None:
    state = session()
    message = delivery(1)
    packet_id = sent_id(deliver(state, message))
    assert ack(state, Ack.PUBACK, packet_id) == [Completed(message)]
    assert state.inflight == {}


def test_pubrec_moves_qos2_to_await_pubcomp_and_pubcomp_completes_it() -> None:
    """QoS 2 sender: PUBREC -> send PUBREL, PUBCOMP -> done (MQTT 3.1.1 4.3.3)."""
    state = session()
    message = delivery(2)
    packet_id = sent_id(deliver(state, message))
    assert ack(state, Ack.PUBREC, packet_id) == [SendPubrel(packet_id, message)]
    assert state.inflight[packet_id] == InflightEntry(message, Stage.AWAIT_PUBCOMP)
    assert ack(state, Ack.PUBCOMP, packet_id) == [Completed(message)]
    assert state.inflight == {}


def test_pubrec_and_pubcomp_in_one_batch_complete_the_delivery() -> None:
    """Each action carries its delivery: a later ack in the batch cannot invalidate it."""
    state = session()
    message = delivery(2)
    packet_id = sent_id(deliver(state, message))
    assert state.acknowledge(
        [(Ack.PUBREC, packet_id), (Ack.PUBCOMP, packet_id)], True, now=0.0
    ) == [
        SendPubrel(packet_id, message),
        Completed(message),
    ]
    assert state.inflight == {}


def test_a_repeated_pubrec_changes_nothing_and_gets_its_pubrel_again() -> None:
    """A PUBREC is always answered with PUBREL [MQTT-4.3.3-1]."""
    state = session()
    packet_id = sent_id(deliver(state, delivery(2)))
    ack(state, Ack.PUBREC, packet_id)
    before = dict(state.inflight)
    assert ack(state, Ack.PUBREC, packet_id) == [SendPubrel(packet_id, None)]
    assert state.inflight == before
    assert state.inflight[packet_id].stage is Stage.AWAIT_PUBCOMP


@pytest.mark.parametrize(
    ("qos", "acks_before", "wrong_ack", "rule"),
    [
        (1, [], Ack.PUBREC, "MQTT-4.3.2-2"),
        (1, [], Ack.PUBCOMP, "MQTT-4.3.2-2"),
        (2, [], Ack.PUBACK, "MQTT-4.3.3-2"),
        (2, [], Ack.PUBCOMP, "MQTT-4.3.3-2"),  # PUBCOMP before PUBREC
        (2, [Ack.PUBREC], Ack.PUBACK, "MQTT-4.3.3-2"),
    ],
)
def test_an_ack_that_does_not_fit_its_delivery_is_a_protocol_violation(
    qos: int, acks_before: list[Ack], wrong_ack: Ack, rule: str
) -> None:
    """It changes nothing and answers only the violation, naming the ack, the id, the
    stage and the rule: the connection is closed instead of the delivery hanging."""
    state = session()
    message = delivery(qos)
    packet_id = sent_id(deliver(state, message))
    for kind in acks_before:
        ack(state, kind, packet_id)
    before = dict(state.inflight)
    stage_before = state.inflight[packet_id].stage
    [violation] = ack(state, wrong_ack, packet_id)
    assert type(violation) is ProtocolViolation
    awaited = stage_before.name.removeprefix("AWAIT_")
    assert violation.why == (
        f"{wrong_ack.name} for packet id {packet_id}, a QoS {qos} delivery awaiting "
        f"{awaited} [{rule}]"
    )
    assert state.inflight == before
    assert state.inflight[packet_id].stage is stage_before


def test_a_violation_ends_the_batch_after_what_came_before_it() -> None:
    """The acks before it count; those after it and the window's refill do not: the
    connection closes."""
    state = session(max_inflight=2)
    first, second, waiting = delivery(1), delivery(1), delivery(1)
    sent = state.deliver([first, second, waiting], True)
    ids = [action.packet_id for action in sent if type(action) is SendPublish]
    assert queued(state) == [waiting]
    actions = state.acknowledge(
        [(Ack.PUBACK, ids[0]), (Ack.PUBCOMP, ids[1]), (Ack.PUBACK, ids[1])], True, now=0.0
    )
    assert actions[0] == Completed(first)
    assert [type(action) for action in actions] == [Completed, ProtocolViolation]
    assert list(state.inflight) == [ids[1]]
    assert queued(state) == [waiting]


@pytest.mark.parametrize("kind", list(Ack))
def test_an_ack_for_an_unknown_or_completed_packet_id_changes_nothing(kind: Ack) -> None:
    state = session()
    message = delivery(1)
    packet_id = sent_id(deliver(state, message))
    ack(state, Ack.PUBACK, packet_id)
    # duplicate or stray: ignored, but a PUBREC still gets its PUBREL [MQTT-4.3.3-1]
    for unknown in (packet_id, 999):
        expected = [SendPubrel(unknown, None, found=False)] if kind is Ack.PUBREC else []
        assert ack(state, kind, unknown) == expected
    assert state.inflight == {}


# ----- resuming ---------------------------------------------------------------------------


def test_resume_resends_in_flight_entries_in_original_send_order_then_fills_the_window() -> None:
    """Re-sent on reconnect with their original packet ids, in order [MQTT-4.4.0-1]:
    PUBLISH with DUP for those not yet received, PUBREL for those awaiting PUBCOMP."""
    state = session(max_inflight=4)
    state.next_packet_id = 65534
    messages = [delivery(2), delivery(1), delivery(2), delivery(1)]
    actions = state.deliver(messages, connected=True)
    ids = [action.packet_id for action in actions if type(action) is SendPublish]
    assert ids == [65534, 65535, 1, 2]  # send order differs from numeric order
    ack(state, Ack.PUBREC, 65534)
    waiting = delivery(1)
    deliver(state, waiting)  # the window is full: queued
    ack(state, Ack.PUBACK, 65535, connected=False)  # frees a slot while the client is away
    assert state.resume(now=0.0) == [
        SendPubrel(65534, None),
        SendPublish(1, messages[2], dup=True),
        SendPublish(2, messages[3], dup=True),
        SendPublish(3, waiting),
    ]
    assert list(state.inflight.items()) == [
        (65534, InflightEntry(messages[0], Stage.AWAIT_PUBCOMP)),
        (1, InflightEntry(messages[2], Stage.AWAIT_PUBREC)),
        (2, InflightEntry(messages[3], Stage.AWAIT_PUBACK)),
        (3, InflightEntry(waiting, Stage.AWAIT_PUBACK)),
    ]


def test_resume_of_an_empty_session_does_nothing() -> None:
    state = session()
    assert state.resume(now=0.0) == []
    assert state.inflight == {} and state.queue is None


# ----- incoming QoS 2 ---------------------------------------------------------------------


def test_receive_qos2_routes_once_until_pubrel() -> None:
    """A re-sent PUBLISH before PUBREL is acknowledged, not routed again [MQTT-4.3.3-2]."""
    state = session()
    assert state.receive_qos2(10) is True
    assert state.receive_qos2(10) is False
    assert state.receive_qos2(11) is True
    state.release(10)
    assert state.awaiting_rel == {11}
    assert state.receive_qos2(10) is True  # a new message may reuse the id after PUBREL


def test_release_of_an_unknown_packet_id_is_harmless() -> None:
    state = session()
    state.receive_qos2(5)
    state.release(6)
    assert state.awaiting_rel == {5}


def test_a_session_without_qos2_in_progress_holds_no_set_of_its_own() -> None:
    """Idle sessions share one empty frozenset; the set a QoS 2 exchange needed goes once
    the last PUBREL came, and another session's ids never show up in this one."""
    state, other = session(), session()
    assert state.awaiting_rel is NO_PACKET_IDS and other.awaiting_rel is NO_PACKET_IDS
    assert state.release(7) is False  # nothing awaits: still the shared one
    state.receive_qos2(7)
    state.receive_qos2(8)
    assert other.awaiting_rel == frozenset()
    state.release(7)
    assert state.awaiting_rel == {8}
    state.release(8)
    assert state.awaiting_rel is NO_PACKET_IDS
    assert state.receive_qos2(8) is True  # and the id is new again


def test_too_many_awaiting_rel_raises_but_a_duplicate_at_the_limit_does_not() -> None:
    state = session(max_awaiting_rel=2)
    assert state.receive_qos2(1) is True
    assert state.receive_qos2(2) is True
    assert state.receive_qos2(2) is False  # a re-send of a known id is not a new message
    with pytest.raises(TooManyAwaitingRelError, match="max_awaiting_rel"):
        state.receive_qos2(3)
    assert state.awaiting_rel == {1, 2}
    state.release(1)
    assert state.receive_qos2(3) is True


# ----- subscriptions ----------------------------------------------------------------------


def test_subscribe_replaces_the_options_of_an_existing_filter() -> None:
    """A SUBSCRIBE to an existing filter replaces its subscription [MQTT-3.8.4-3]."""
    state = session()
    assert state.subscribe("a/+", SubscriptionOptions(qos=0)) is True
    replacement = SubscriptionOptions(qos=2, no_local=True, subscription_id=7)
    assert state.subscribe("a/+", replacement) is False
    assert state.subscriptions == {"a/+": replacement}
    assert state.subscribe("a/#", SubscriptionOptions(qos=1)) is True
    assert list(state.subscriptions) == ["a/+", "a/#"]


def test_unsubscribe_reports_whether_the_filter_existed() -> None:
    state = session()
    state.subscribe("a/b", SubscriptionOptions(qos=1))
    assert state.unsubscribe("a/b") is True
    assert state.unsubscribe("a/b") is False
    assert state.subscriptions == {}


# ----- re-authorisation (resume under another identity, ACL reload) ---------------------------


def on_topic(topic: str, qos: int) -> Delivery:
    return Delivery(Message(topic=topic, payload=topic.encode(), qos=qos), qos, False)


def test_keep_readable_revokes_denied_filters_and_drops_what_was_not_received() -> None:
    state = session(max_inflight=2)
    state.subscribe("bob/#", SubscriptionOptions(qos=2))
    state.subscribe("news/#", SubscriptionOptions(qos=1))
    bob_a, bob_c = on_topic("bob/a", 1), on_topic("bob/c", 1)
    sent_qos1 = sent_id(deliver(state, bob_a))
    sent_qos2 = sent_id(deliver(state, on_topic("bob/b", 2)))
    ack(state, Ack.PUBREC, sent_qos2)  # received by the client: only PUBREL is left
    deliver(state, bob_c)  # queued behind the full window
    deliver(state, on_topic("news/1", 1))
    asked: list[tuple[str, int]] = []

    def may_read(topic: str, qos: int) -> bool:
        asked.append((topic, qos))
        return not topic.startswith("bob/")

    actions = state.keep_readable(may_read)

    assert actions == [
        Revoked("bob/#"),
        Dropped(bob_a, DropReason.NOT_AUTHORIZED),
        Dropped(bob_c, DropReason.NOT_AUTHORIZED),
    ]
    assert list(state.subscriptions) == ["news/#"]
    assert ("bob/#", 2) in asked  # a filter is asked with its granted QoS
    assert sent_qos1 not in state.inflight
    assert state.inflight[sent_qos2].stage is Stage.AWAIT_PUBCOMP  # kept: PUBREL still due
    assert [d.message.topic for d in queued(state)] == ["news/1"]


def test_keep_readable_with_everything_allowed_changes_nothing() -> None:
    state = session(max_inflight=1)
    state.subscribe("a/#", SubscriptionOptions(qos=1))
    state.deliver([on_topic("a/1", 1), on_topic("a/2", 1)], connected=True)
    assert state.keep_readable(lambda _topic, _qos: True) == []  # nothing revoked or dropped
    assert list(state.subscriptions) == ["a/#"]
    assert len(state.inflight) == 1
    assert [d.message.topic for d in queued(state)] == ["a/2"]


def test_keep_readable_that_empties_the_queue_leaves_no_deque() -> None:
    state = session(max_inflight=1)
    state.deliver([on_topic("x/1", 1), on_topic("x/2", 1)], connected=True)
    state.keep_readable(lambda _topic, _qos: False)
    assert state.queue is None and state.inflight == {}


# ----- MQTT 5.0: message expiry, packets that cannot be sent, 0x92 -------------------------


def expiring(qos: int, interval: int, published_at: float) -> Delivery:
    message = Message(
        topic="t/x", payload=b"e", qos=qos, timestamp=published_at, properties={0x02: interval}
    )
    return Delivery(message, qos, False, seq=next(_numbers))


def test_expired_messages_leave_the_queue_as_dropped_mqtt_3_3_2_5() -> None:
    state = session(max_inflight=1)
    blocker = delivery(1)
    stale, fresh = expiring(1, 10, published_at=1000.0), expiring(1, 10, published_at=1005.0)
    blocker_id = sent_id(deliver(state, blocker))
    assert state.deliver([stale, fresh], connected=True) == []  # queued behind the window
    # At 1012 the first has expired (10 s from 1000), the second has 3 s left.
    actions = state.acknowledge([(Ack.PUBACK, blocker_id)], True, 1012.0)
    assert actions[0] == Completed(blocker)
    assert actions[1] == Dropped(stale, DropReason.EXPIRED)
    assert type(actions[2]) is SendPublish and actions[2].delivery is fresh


def test_expired_in_flight_messages_are_not_resent_on_resume() -> None:
    state = session()
    stale = expiring(1, 5, published_at=1000.0)
    packet_id = sent_id(deliver(state, stale))
    pubrec_pending = delivery(2)
    other_id = sent_id(deliver(state, pubrec_pending))
    ack(state, Ack.PUBREC, other_id)  # awaiting PUBCOMP: the client has it, PUBREL follows
    assert state.resume(now=1010.0) == [
        Dropped(stale, DropReason.EXPIRED),
        SendPubrel(other_id, None),
    ]
    assert packet_id not in state.inflight


def test_messages_without_expiry_never_expire() -> None:
    state = session()
    message = delivery(1)
    packet_id = sent_id(deliver(state, message))
    assert state.resume(now=1e12) == [SendPublish(packet_id, message, dup=True)]


def test_discard_frees_the_slot_as_if_delivered_mqtt_3_1_2_25() -> None:
    state = session(max_inflight=1)
    too_big, waiting = delivery(1), delivery(1)
    packet_id = sent_id(deliver(state, too_big))
    deliver(state, waiting)
    (send,) = state.discard(packet_id, connected=True, now=0.0)
    assert type(send) is SendPublish and send.delivery is waiting and not send.dup
    assert [entry.delivery for entry in state.inflight.values()] == [waiting]


def test_release_says_whether_the_packet_id_was_known() -> None:
    state = session()
    assert state.receive_qos2(7)
    assert state.release(7) is True
    assert state.release(7) is False  # 5.0 PUBCOMP 0x92 Packet Identifier not found


def test_a_smaller_window_on_resume_holds_back_resends_mqtt_3_3_4_9() -> None:
    # A 5.0 client back with Receive Maximum 2 while 4 of its messages are in flight.
    state = session(max_inflight=4)
    sent = [delivery(1) for _ in range(4)]
    ids = [sent_id(deliver(state, each)) for each in sent]
    later = delivery(1)
    deliver(state, later)  # queued behind the full window
    state.max_inflight = 2
    assert state.resume(now=0.0) == [
        SendPublish(ids[0], sent[0], dup=True),
        SendPublish(ids[1], sent[1], dup=True),
    ]
    # Each acknowledgement frees one slot: the held-back resends go first, in order.
    assert ack(state, Ack.PUBACK, ids[0]) == [
        Completed(sent[0]),
        SendPublish(ids[2], sent[2], dup=True),
    ]
    assert ack(state, Ack.PUBACK, ids[1]) == [
        Completed(sent[1]),
        SendPublish(ids[3], sent[3], dup=True),
    ]
    (completed, refill) = ack(state, Ack.PUBACK, ids[2])
    assert completed == Completed(sent[2])
    assert type(refill) is SendPublish and refill.delivery is later and not refill.dup
    assert state.unsent is None
