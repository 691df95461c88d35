"""Acknowledgements leave in the order of the PUBLISHes, across reads [MQTT-4.6.0-2].

A QoS 1 message for a persistent subscriber is written to the store before its PUBACK is
sent (write-ahead), so one read's PUBACKs can wait for a commit while the next read's need
none. The connection's PUBACKs and PUBRECs still leave in the order of their PUBLISHes
(`channel.ack_order`; docs/channel.md, "Acknowledgements in PUBLISH order").

Each round sends a QoS 1 PUBLISH that must be stored (64 KiB for a persistent subscriber:
its commit takes a while) and, 100 microseconds later in a write of its own, one for a clean
subscriber that needs no store. Before the fix, the second one's acknowledgement came first
in some rounds of every run (two runs of each case): one process, QoS 1 then QoS 1 in 4-21
of the 200 rounds, QoS 1 then QoS 2 in 93-101; a pool of two workers in 113-200.
"""

from __future__ import annotations

import time

import pytest

from mqtt.packets import PubAck, PubComp, Publish, PubRec, PubRel
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, subscribe_raw, unique
from tests.support.raw_client import RawClient

ROUNDS = 200
STORED_PAYLOAD = bytes(64 * 1024)
GAP = 100e-6  # seconds between the two PUBLISHes: two reads, the first one's commit pending


def _pause(seconds: float) -> None:
    """Wait `seconds` (busy: time.sleep is too coarse for 100 microseconds)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _take_delivery(subscriber: RawClient) -> None:
    packet = subscriber.expect()
    assert isinstance(packet, Publish), packet
    assert packet.qos == 1 and packet.packet_id is not None, packet
    subscriber.send(PubAck(packet.packet_id))


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("second_qos", [1, 2])
def test_acks_follow_publish_order_when_some_wait_for_the_store_MQTT_4_6_0_2(
    broker: BrokerProcess, version: int, second_qos: int
) -> None:
    stored, clean = unique("order/stored"), unique("order/clean")
    persistent = connect_raw(broker, unique("order-p"), clean=False)
    subscribe_raw(persistent, 1, (stored, 1))
    transient = connect_raw(broker, unique("order-c"))
    subscribe_raw(transient, 1, (clean, 1))
    publisher = connect_raw(broker, unique("order-pub"), version=version)
    second_ack = PubAck if second_qos == 1 else PubRec
    late: list[int] = []
    for round_ in range(ROUNDS):
        first, second = 2 * round_ + 1, 2 * round_ + 2
        publisher.send(Publish(stored, STORED_PAYLOAD, qos=1, packet_id=first))
        _pause(GAP)
        publisher.send(Publish(clean, b"c", qos=second_qos, packet_id=second))
        acks = [publisher.expect(), publisher.expect()]
        assert {type(ack) for ack in acks} == {PubAck, second_ack}, acks
        ids = [ack.packet_id for ack in acks]
        assert sorted(ids) == [first, second], acks
        if ids != [first, second]:
            late.append(round_)
        assert all(ack.reason_code == 0 for ack in acks), acks
        if second_qos == 2:
            publisher.send(PubRel(second))
            assert publisher.expect() == PubComp(second)
        _take_delivery(persistent)
        _take_delivery(transient)
    assert not late, f"acknowledgements out of PUBLISH order in {len(late)} of {ROUNDS} rounds"
    for client in (publisher, persistent, transient):
        client.close()
