"""A subscriber that never reads must not stall publishers or other subscribers.

The slow client subscribes at QoS 0 and never reads its socket while a publisher sends
20 MiB at QoS 1; the broker buffers up to `limits.max_write_buffer` for it and then drops its
QoS 0 deliveries. Meanwhile every PUBACK must come back promptly and a normal subscriber
must receive every message, in order.
"""

from __future__ import annotations

import time

from mqtt.packets import PubAck, Publish
from tests.support.broker_process import BrokerProcess
from tests.support.clients import PahoCollector, connect_raw, expect_publish, subscribe_raw, unique

MESSAGE_SIZE = 64 * 1024
MESSAGE_COUNT = 320  # 20 MiB in all
MAX_ACK_SECONDS = 2.0
MAX_TOTAL_SECONDS = 20.0


def test_slow_subscriber_does_not_stall_publisher_or_others(broker: BrokerProcess) -> None:
    topic = unique("slow")
    slow = connect_raw(broker, unique("slow-reader"))
    subscribe_raw(slow, 1, (topic, 0))  # ... and never reads again
    normal = PahoCollector(broker, unique("normal-reader"))
    assert normal.subscribe(topic, 1)[0].value == 1
    publisher = connect_raw(broker, unique("fast-writer"))

    started = time.monotonic()
    for packet_id in range(1, MESSAGE_COUNT + 1):
        payload = packet_id.to_bytes(4, "big") * (MESSAGE_SIZE // 4)
        publisher.send(Publish(topic, payload, qos=1, packet_id=packet_id))
        assert publisher.expect(timeout=MAX_ACK_SECONDS) == PubAck(packet_id)

    deadline = started + MAX_TOTAL_SECONDS
    for expected_id in range(1, MESSAGE_COUNT + 1):
        message = normal.next_message(timeout=max(0.1, deadline - time.monotonic()))
        assert int.from_bytes(message.payload[:4], "big") == expected_id
        assert len(message.payload) == MESSAGE_SIZE
    total_seconds = time.monotonic() - started
    assert total_seconds < MAX_TOTAL_SECONDS, total_seconds
    # When it finally reads, the slow client gets a well-formed stream: a subset of the
    # messages (QoS 0 may be dropped), each whole, in publish order [MQTT-4.6.0-6].
    received_ids = []
    while True:
        try:
            publish = expect_publish(slow, timeout=0.5)
        except TimeoutError:
            break
        assert len(publish.payload) == MESSAGE_SIZE
        received_ids.append(int.from_bytes(publish.payload[:4], "big"))
    assert received_ids == sorted(set(received_ids))
    assert len(received_ids) < MESSAGE_COUNT  # the premise: it really fell behind
    normal.close()
    slow.close()
    publisher.close()
