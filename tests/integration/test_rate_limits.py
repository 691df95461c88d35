"""Rate limits over real sockets (docs/overload.md): per-client messages/s and bytes/s hold
within 10 % and pause reads instead of disconnecting; a client.rate_limit plugin overrides
them per client; a listener's connection rate makes accepting wait; refused CONNECTs from
one address get a growing delay before their CONNACK.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from mqtt.packets import ConnAck
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, unique
from tests.support.flow_clients import PipelinedPublisher
from tests.support.raw_client import RawClient

RATE = 400  # per second
COUNT = 2400
SIZE = 1000  # payload bytes: a 32 KiB read holds ~32 PUBLISH packets


@pytest.mark.parametrize(
    ("setting", "expected_rate"),
    [(f"messages_rate = {RATE}", RATE), (f"bytes_rate = {RATE * (SIZE + 40)}", RATE)],
)
def test_a_client_rate_limit_holds_within_ten_percent(
    broker_factory: Callable[..., BrokerProcess], setting: str, expected_rate: int
) -> None:
    broker = broker_factory(f"[overload]\n{setting}\n")
    publisher = PipelinedPublisher(broker, unique("limited"))
    publisher.publish(unique("rate"), b"r", COUNT, size=SIZE)
    assert publisher.wait_acked(COUNT, timeout=30), publisher.acked_count()
    # After the first second's burst, PUBACKs come at the limited rate.
    measured = publisher.rate_between(2 * RATE, COUNT)
    assert 0.9 * expected_rate <= measured <= 1.1 * expected_rate, measured
    wait_for_log(broker, "rate limit: pausing reads from")
    publisher.close()
    assert broker.stop() == 0
    assert "rate-limit pauses" in broker.log()
    assert "closing client" not in broker.log().split("shutting down")[0]  # never disconnected


def test_a_plugin_sets_the_rate_of_chosen_clients(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        '[[plugins]]\nmodule = "tests.support.test_plugins.rate_by_prefix"\n'
        'prefix = "limited-"\nmessages_rate = 200.0\n'
    )
    limited = PipelinedPublisher(broker, unique("limited-"))
    free = PipelinedPublisher(broker, unique("free-"))
    limited.publish(unique("rate"), b"l", 1200, size=SIZE)
    free.publish(unique("rate"), b"f", 1200, size=SIZE)
    assert free.wait_acked(1200, timeout=10)
    assert limited.acked_count() < 1200  # still held by its limit
    assert limited.wait_acked(1200, timeout=30)
    measured = limited.rate_between(400, 1200)
    assert 180 <= measured <= 220, measured
    assert free.rate_between(1, 1200) > 1000
    limited.close()
    free.close()


def test_a_listener_connection_rate_makes_accepting_wait(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[[listeners]]\nport = 0\nmax_connection_rate = 20.0\n")
    clients: list[RawClient] = []
    lock = threading.Lock()

    def connect(number: int) -> None:
        client = connect_raw(broker, f"{unique('storm')}-{number}")
        with lock:
            clients.append(client)

    started = time.monotonic()
    threads = [threading.Thread(target=connect, args=(n,)) for n in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    elapsed = time.monotonic() - started
    assert len(clients) == 60  # every one accepted in the end
    # 20 at once (the burst), the other 40 at 20 a second.
    assert 1.6 <= elapsed <= 6.0, elapsed
    wait_for_log(broker, "over max_connection_rate")
    for client in clients:
        client.close()


def test_refused_connects_from_one_address_wait_longer_and_longer(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("[auth]\nallow_anonymous = false\n")
    waits = []
    for _ in range(5):
        client = RawClient(broker.host, broker.port)
        started = time.monotonic()
        connack = client.connect(unique("guess"))
        waits.append(time.monotonic() - started)
        assert isinstance(connack, ConnAck) and connack.reason_code == 5, connack
        assert client.is_closed_by_broker()
        client.close()
    # 0, then 0.1 s doubling: 0.1, 0.2, 0.4 (auth_failure_delay = 0.1 by default)
    assert waits[0] < 0.1, waits
    for number, minimum in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8)):
        assert waits[number] >= minimum * 0.95, waits
    assert waits[4] < 2.0, waits
    wait_for_log(broker, "its CONNACK waits")
