"""The message log's batch format and in-memory index (store/message_log.py), without SQLite."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.message import Message
from store.base import StoredDelivery
from store.message_log import MessageLog, decode_batch, encode_batch
from store.records import delivery_from_put, put_record
from tests.unit.test_store_records import deliveries


def _queued(number: int) -> StoredDelivery:
    message = Message(
        topic=f"t/{number}",
        payload=b"payload %d" % number,
        qos=1,
        timestamp=1_700_000_000.5 + number,
        message_id=number,
    )
    return StoredDelivery(message=message, qos=1, retain=False)


def _put(log: MessageLog, client_id: str, seq: int, entry: StoredDelivery) -> bool:
    return log.put(client_id, seq, put_record(client_id, seq, entry), entry.message.payload)


def _messages(log: MessageLog) -> dict[tuple[str, int], StoredDelivery]:
    return {
        (client_id, seq): delivery_from_put(record, payload)
        for client_id, seq, record, payload in log.messages()
    }


def _replayed(batches: list[tuple[int, bytes]]) -> dict[tuple[str, int], StoredDelivery]:
    log = MessageLog.replay(batches, [])
    return _messages(log)


@settings(max_examples=60, deadline=None)
@given(st.lists(deliveries(), max_size=5))
def test_put_records_round_trip_with_their_payloads(entries: list[StoredDelivery]) -> None:
    records = [put_record("c", seq, entry) for seq, entry in enumerate(entries)]
    blob = encode_batch(records, [entry.message.payload for entry in entries])
    log = MessageLog.replay([(1, blob)], [])
    assert _messages(log) == {("c", seq): entry for seq, entry in enumerate(entries)}


def test_a_batch_with_bytes_after_its_last_payload_is_refused() -> None:
    blob = encode_batch([put_record("c", 1, _queued(1))], [b"payload 1"])
    with pytest.raises(ValueError, match="bytes after its last payload"):
        list(decode_batch(blob + b"junk"))


def test_an_unknown_record_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log record kind 'shred'"):
        MessageLog.replay([(1, encode_batch([["shred", "c"]], []))], [])


def test_ops_of_one_batch_become_one_blob_that_replays_to_the_same_state() -> None:
    log = MessageLog()
    assert _put(log, "c", 1, _queued(1))
    assert _put(log, "c", 2, _queued(2))
    assert log.mark("c", 1, 10, "await_puback")
    batch = log.take_batch()
    assert batch is not None and batch[0] == 1
    assert log.mark("c", 2, 11, "await_pubrec")
    assert log.delete("c", 1)
    second = log.take_batch()
    assert second is not None and second[0] == 2
    replayed = _replayed([batch, second])
    assert list(replayed) == [("c", 2)]
    assert (replayed["c", 2].packet_id, replayed["c", 2].stage) == (11, "await_pubrec")
    assert replayed["c", 2].message == _queued(2).message


def test_a_message_put_and_deleted_within_one_batch_writes_nothing() -> None:
    log = MessageLog()
    _put(log, "c", 1, _queued(1))
    log.mark("c", 1, 5, "await_puback")
    log.delete("c", 1)
    assert log.take_batch() is None
    assert list(log.messages()) == []


def test_a_mark_within_the_batch_of_its_put_is_written_into_the_put_record() -> None:
    log = MessageLog()
    _put(log, "c", 1, _queued(1))
    log.mark("c", 1, 5, "await_pubrec")
    batch = log.take_batch()
    assert batch is not None
    [(record, payload)] = list(decode_batch(batch[1]))
    assert record[0] == "put" and record[-2:] == [5, "await_pubrec"]
    assert payload == b"payload 1"


def test_ops_about_messages_not_in_the_log_are_left_to_the_table() -> None:
    log = MessageLog.replay([], [("c", 7)])
    assert not log.mark("c", 7, 1, "await_puback")
    assert not log.delete("c", 7)
    assert not _put(log, "c", 7, _queued(7))  # a compacted message stays in the table
    assert not log.mark("c", 8, 1, "await_puback")  # unknown anywhere
    assert log.take_batch() is None


def test_batches_are_dropped_from_the_oldest_once_their_messages_are_gone() -> None:
    log = MessageLog()
    _put(log, "c", 1, _queued(1))
    log.take_batch()  # batch 1
    _put(log, "c", 2, _queued(2))
    log.take_batch()  # batch 2
    log.delete("c", 2)
    log.take_batch()  # batch 3: the delete of 2
    # Batch 2 is dead, but dropping it before batch 1 would be harmless only by luck: the
    # head moves in order, so a delete record never outlives the put it cancels.
    assert log.droppable_head() == 1
    log.delete("c", 1)
    log.take_batch()  # batch 4
    assert log.droppable_head() == 5
    assert log.log_bytes == 0


def test_delete_session_forgets_the_clients_messages_and_is_replayed() -> None:
    log = MessageLog()
    _put(log, "gone", 1, _queued(1))
    _put(log, "kept", 1, _queued(1))
    first = log.take_batch()
    log.delete_session("gone")
    _put(log, "gone", 2, _queued(2))  # a new session of the same client id
    second = log.take_batch()
    assert first is not None and second is not None
    expected = {("kept", 1): _queued(1), ("gone", 2): _queued(2)}
    assert _messages(log) == expected
    assert _replayed([first, second]) == expected


def test_compaction_moves_the_oldest_live_messages_with_their_latest_state() -> None:
    now = [1000.0]
    log = MessageLog(clock=lambda: now[0])
    _put(log, "offline", 1, _queued(1))
    log.take_batch()  # batch 1
    _put(log, "offline", 2, _queued(2))
    log.take_batch()  # batch 2
    for seq in range(10, 20):
        _put(log, "online", seq, _queued(seq))
    log.take_batch()  # batch 3
    assert not log.compaction_due(0, min_age=0)  # everything is live: nothing to gain
    for seq in range(10, 20):
        log.delete("online", seq)
    log.mark("offline", 1, 9, "await_puback")
    log.take_batch()  # batch 4
    assert not log.compaction_due(int(log.dead_bytes), min_age=0)  # not enough dead bytes
    assert not log.compaction_due(0, min_age=30)  # the oldest batch is young
    now[0] += 30
    assert log.compaction_due(0, min_age=30)
    moved = log.compact_head(max_messages=1)  # whole batches, the oldest first
    assert [(c, seq, entry.packet_id, entry.stage) for c, seq, entry in moved] == [
        ("offline", 1, 9, "await_puback")
    ]
    assert log.droppable_head() == 2  # batch 2 still holds offline 2
    assert [seq for _c, seq, _entry in log.compact_head(max_messages=10)] == [2]
    assert log.droppable_head() == 5 and log.log_bytes == 0 and log.dead_bytes == 0
    assert list(log.messages()) == []
    assert not log.delete("offline", 1)  # now the table's


def test_a_message_put_again_and_deleted_in_a_later_batch_stays_deleted() -> None:
    log = MessageLog()
    _put(log, "c", 1, _queued(1))
    first = log.take_batch()
    _put(log, "c", 1, _queued(1))  # replaced: its first put record is stored in batch 1
    log.delete("c", 1)
    second = log.take_batch()
    assert first is not None and second is not None
    assert list(log.messages()) == []
    assert _replayed([first, second]) == {}
