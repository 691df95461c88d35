"""actors.persistence conversions: SessionState <-> store records (store/base.py), both ways.

A persistent session written with `session_meta` and `stored_delivery` and read back with
`restored_state` must have the same content: subscriptions with their options, incoming QoS 2
ids awaiting PUBREL, the next packet id, queued deliveries and in-flight ones at each stage,
in order, so that they are resent with their original packet ids [MQTT-4.4.0-1].
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.persistence import may_commit_lazily, restored_state, session_meta, stored_delivery
from core.message import Message
from core.session_state import (
    Ack,
    Completed,
    Delivery,
    InflightEntry,
    SendPublish,
    SendPubrel,
    SessionState,
    Stage,
    SubscriptionOptions,
)
from store.base import (
    IN_FLIGHT_STAGES,
    DeleteMessage,
    DeleteSession,
    MarkInFlight,
    StoredDelivery,
    StoredSession,
)
from store.records import (
    delivery_from_record,
    delivery_to_record,
    meta_from_record,
    meta_to_record,
)


def delivery(seq: int, qos: int, *, retain: bool = False, ids: tuple[int, ...] = ()) -> Delivery:
    message = Message(
        topic=f"t/{seq}",
        payload=b"payload %d" % seq,
        qos=qos,
        retain=retain,
        publisher="pub",
        username="alice",
        properties={3: "text/plain"} if ids else {},
    )
    return Delivery(message, qos, retain, ids, None, seq)


def busy_session() -> SessionState:
    """A session with something in every part: in flight at each stage, queued, subscriptions."""
    state = SessionState(client_id="c1", persistent=True, max_inflight=3)
    state.subscribe("a/+", SubscriptionOptions(qos=1))
    state.subscribe(
        "b/#",
        SubscriptionOptions(
            qos=2, no_local=True, retain_as_published=True, retain_handling=2, subscription_id=9
        ),
    )
    state.receive_qos2(3)
    state.receive_qos2(700)
    state.next_packet_id = 65534  # the ids in flight wrap: 65534, 65535, 1
    sent = state.deliver(
        [delivery(1, 1), delivery(2, 2, retain=True), delivery(3, 2, ids=(9,))], connected=True
    )
    assert [action.packet_id for action in sent if type(action) is SendPublish] == [
        65534,
        65535,
        1,
    ]
    state.acknowledge([(Ack.PUBREC, 65535)], connected=True, now=0.0)
    assert state.deliver([delivery(4, 1, ids=(9, 4)), delivery(5, 2)], connected=True) == []
    assert len(state.queue or ()) == 2  # both queued behind the full window
    assert {entry.stage for entry in state.inflight.values()} == set(Stage)
    return state


def stored_form(state: SessionState, expiry: float = 0.0) -> StoredSession:
    """What the store would hold for `state`: its meta and its messages in seq order."""
    messages = [
        (entry.delivery.seq, stored_delivery(entry.delivery, packet_id, entry.stage))
        for packet_id, entry in state.inflight.items()
    ]
    messages += [(queued.seq, stored_delivery(queued)) for queued in state.queue or ()]
    messages.sort(key=lambda item: item[0])
    state.expiry = expiry
    return StoredSession(session_meta(state, 4, disconnected_at=1700000000.0), messages)


def through_columns(stored: StoredSession) -> StoredSession:
    """The same session after encoding to SQLite column records and decoding again."""
    return StoredSession(
        meta_from_record(meta_to_record(stored.meta)),
        [(seq, delivery_from_record(delivery_to_record(entry))) for seq, entry in stored.messages],
    )


def fresh_base() -> SessionState:
    return SessionState(client_id="placeholder", persistent=False, max_inflight=3, max_queued=50)


def assert_same_content(restored: SessionState, original: SessionState) -> None:
    assert restored.subscriptions == original.subscriptions
    assert restored.awaiting_rel == original.awaiting_rel
    assert restored.next_packet_id == original.next_packet_id
    assert list(restored.inflight.items()) == list(original.inflight.items())  # ids, stages, order
    assert list(restored.queue or ()) == list(original.queue or ())


@pytest.mark.parametrize(
    "encode", [lambda stored: stored, through_columns], ids=["records", "columns"]
)
def test_round_trip_restores_the_same_session_content(
    encode: Callable[[StoredSession], StoredSession],
) -> None:
    original = busy_session()
    stored = encode(stored_form(original))
    restored = restored_state("c1", stored, fresh_base())
    assert_same_content(restored, original)
    assert restored.client_id == "c1"
    assert restored.persistent is True


def test_restored_state_keeps_the_limits_of_the_base_it_is_given() -> None:
    base = fresh_base()
    restored = restored_state("c1", stored_form(busy_session()), base)
    assert restored.max_inflight == 3
    assert restored.max_queued == 50


def test_a_restored_session_continues_where_it_stopped() -> None:
    """Acks for the restored ids complete them; queued deliveries go out with the next ids."""
    original = busy_session()
    restored = restored_state("c1", stored_form(original), fresh_base())
    first_queued = next(iter(original.queue or ()))
    assert restored.acknowledge([(Ack.PUBCOMP, 65535)], connected=True, now=0.0) == [
        Completed(original.inflight[65535].delivery),
        SendPublish(2, first_queued),  # the freed slot takes the next id
    ]
    assert restored.acknowledge([(Ack.PUBREC, 1)], connected=True, now=0.0) == [
        SendPubrel(1, original.inflight[1].delivery)
    ]
    assert restored.inflight[1].stage is Stage.AWAIT_PUBCOMP
    assert restored.receive_qos2(700) is False  # still awaiting PUBREL [MQTT-4.3.3-2]


def test_an_empty_session_round_trips_without_a_queue() -> None:
    original = SessionState(client_id="c1", persistent=True)
    restored = restored_state("c1", stored_form(original), fresh_base())
    assert_same_content(restored, original)
    assert restored.queue is None
    assert restored.inflight == {}


def test_session_meta_carries_version_and_disconnect_time_and_expiry() -> None:
    state = busy_session()
    state.expiry = 7200.0
    meta = session_meta(state, 5, disconnected_at=1700000000.5)
    assert meta.protocol_version == 5
    assert meta.expiry_interval == 7200.0
    assert meta.disconnected_at == 1700000000.5
    assert meta.awaiting_rel == frozenset({3, 700})
    assert meta.next_packet_id == 2
    state.expiry = math.inf  # a session that never expires (0xFFFFFFFF, or session_expiry 0)
    assert session_meta(state, 4, None).expiry_interval == math.inf
    assert session_meta(state, 4, None).disconnected_at is None


def test_session_meta_is_a_snapshot_not_a_view() -> None:
    state = busy_session()
    meta = session_meta(state, 4, None)
    state.receive_qos2(800)
    state.subscribe("c", SubscriptionOptions(qos=0))
    assert 800 not in meta.awaiting_rel
    assert "c" not in meta.subscriptions


# ----- stored_delivery --------------------------------------------------------------------


def test_stored_delivery_of_a_queued_delivery_has_neither_packet_id_nor_stage() -> None:
    queued = delivery(4, 1, retain=True, ids=(9, 4))
    entry = stored_delivery(queued)
    assert entry == StoredDelivery(
        message=queued.message, qos=1, retain=True, subscription_ids=(9, 4)
    )
    assert entry.packet_id is None
    assert entry.stage is None


@pytest.mark.parametrize("stage", list(Stage))
def test_stored_delivery_in_flight_sets_packet_id_and_stage_together(stage: Stage) -> None:
    in_flight = delivery(1, 1 if stage is Stage.AWAIT_PUBACK else 2)
    entry = stored_delivery(in_flight, 65535, stage)
    assert (entry.packet_id, entry.stage) == (65535, stage.value)
    assert entry.stage in IN_FLIGHT_STAGES
    assert (entry.message, entry.qos, entry.retain) == (in_flight.message, in_flight.qos, False)


def test_stored_stages_are_exactly_the_session_stages() -> None:
    assert {stage.value for stage in Stage} == IN_FLIGHT_STAGES


@pytest.mark.parametrize(("packet_id", "stage"), [(5, None), (None, Stage.AWAIT_PUBREC)])
def test_stored_delivery_refuses_a_packet_id_without_a_stage_or_the_reverse(
    packet_id: int | None, stage: Stage | None
) -> None:
    with pytest.raises(ValueError, match="together"):
        stored_delivery(delivery(1, 2), packet_id, stage)


# ----- any subscriptions and ids ----------------------------------------------------------

options = st.builds(
    SubscriptionOptions,
    qos=st.integers(0, 2),
    no_local=st.booleans(),
    retain_as_published=st.booleans(),
    retain_handling=st.integers(0, 2),
    subscription_id=st.none() | st.integers(1, 268435455),
)
packet_ids = st.integers(1, 65535)


@settings(max_examples=100, deadline=None)
@given(
    subscriptions=st.dictionaries(st.text(min_size=1, max_size=8), options, max_size=5),
    awaiting_rel=st.sets(packet_ids, max_size=5),
    next_packet_id=packet_ids,
)
def test_meta_round_trip_for_any_subscriptions_and_ids(
    subscriptions: dict[str, SubscriptionOptions], awaiting_rel: set[int], next_packet_id: int
) -> None:
    original = SessionState(
        client_id="c1",
        persistent=True,
        subscriptions=dict(subscriptions),
        awaiting_rel=set(awaiting_rel),
        next_packet_id=next_packet_id,
    )
    stored = through_columns(stored_form(original))
    restored = restored_state("c1", stored, fresh_base())
    assert_same_content(restored, original)
    assert restored.inflight == {}


def test_in_flight_entry_equality_includes_the_stage() -> None:
    """Guards the comparisons above: entries differing only in stage are not equal."""
    same = delivery(1, 2)
    assert InflightEntry(same, Stage.AWAIT_PUBREC) != InflightEntry(same, Stage.AWAIT_PUBCOMP)


def test_only_qos1_sends_and_acknowledgements_may_be_committed_lazily() -> None:
    qos1_sent = MarkInFlight("c", "await_puback", [(1, 7)])
    acknowledged = DeleteMessage("c", [1])
    assert may_commit_lazily([qos1_sent, acknowledged])
    assert may_commit_lazily([])
    assert not may_commit_lazily([qos1_sent, MarkInFlight("c", "await_pubrec", [(2, 8)])])
    assert not may_commit_lazily([acknowledged, MarkInFlight("c", "await_pubcomp", [(2, 8)])])
    assert not may_commit_lazily([acknowledged, DeleteSession("c")])
