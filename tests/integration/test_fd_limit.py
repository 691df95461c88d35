"""Out of file descriptors: the broker refuses new connections at once and keeps serving.

The broker runs with RLIMIT_NOFILE soft 64 / hard 128 (set in the child before exec). At
start-up it must raise the soft limit to the hard one and log it. Once its descriptors are used
up, each new connection must be closed at once without a CONNACK (not left waiting in the listen
backlog), connected clients must still be served, the refusals must be logged as rate-limited
lines without tracebacks, and connecting must work again once descriptors are free.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from mqtt.packets import ConnAck, Connect, PingReq, PingResp, Publish
from mqtt.reason_codes import ReasonCode
from tests.support.broker_config import wait_for_log
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

SOFT_LIMIT = 64
HARD_LIMIT = 128
MAX_SOCKETS = 2 * HARD_LIMIT  # the most connections the test opens to reach the limit
REFUSALS = 6  # refused connections collected once the limit is reached
PROMPT = 1.0  # seconds within which a connection must be accepted or refused
SERVED = 0.5  # seconds within which a connected client must get its answer at the limit


def limit_descriptors() -> None:
    """Run in the broker's child process before exec (a single system call, no locks)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_LIMIT, HARD_LIMIT))


def open_client(broker: BrokerProcess, clients: list[RawClient]) -> RawClient:
    """A TCP connection to the broker, kept in `clients` so the test closes it."""
    client = RawClient(broker.host, broker.port, timeout=PROMPT)
    clients.append(client)
    return client


def send_connect(client: RawClient) -> tuple[bool, float]:
    """Send a CONNECT: (True if CONNACK 0 came, False if the broker closed; seconds it took).

    AssertionError if neither happens within PROMPT: the connection was left waiting.
    """
    started = time.monotonic()
    try:
        client.send(Connect(client_id=unique("fd-fill"), keepalive=60))
        packet = client.expect(timeout=PROMPT)
    except ConnectionError:
        return False, time.monotonic() - started
    except TimeoutError:
        raise AssertionError(
            f"connection neither accepted nor refused within {PROMPT} s "
            "(left waiting in the listen backlog)"
        ) from None
    assert isinstance(packet, ConnAck), packet
    assert packet.reason_code == ReasonCode.SUCCESS, packet
    return True, time.monotonic() - started


@pytest.mark.pool_gap(
    "each worker has its own descriptor limit and the kernel spreads the connections, so "
    "the pool runs out at about N times the limit, not where this test expects"
)
@pytest.mark.timeout(20)
def test_out_of_descriptors_refuses_at_once_and_keeps_serving(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, preexec_fn=limit_descriptors)
    clients: list[RawClient] = []
    try:
        wait_for_log(
            broker,
            f"file descriptor limit: {HARD_LIMIT} "
            f"(RLIMIT_NOFILE raised from {SOFT_LIMIT} to the hard limit)",
        )
        topic = unique("fd-limit")
        subscriber = connect_raw(broker, unique("fd-sub"))
        clients.append(subscriber)
        subscribe_raw(subscriber, 1, (topic, 0))
        publisher = connect_raw(broker, unique("fd-pub"))
        clients.append(publisher)

        # Fill the broker's descriptor table until connections are refused.
        accepted = 0
        refusals: list[float] = []
        while len(refusals) < REFUSALS:
            assert len(clients) < MAX_SOCKETS, (
                f"no connection refused after {len(clients)} connections with a descriptor "
                f"limit of {HARD_LIMIT}:\n{broker.log()}"
            )
            ok, seconds = send_connect(open_client(broker, clients))
            if ok:
                accepted += 1
            else:
                refusals.append(seconds)
        assert accepted > 0
        assert max(refusals) < PROMPT, refusals

        # At the limit, the connected clients are still served promptly.
        started = time.monotonic()
        subscriber.send(PingReq())
        assert isinstance(subscriber.expect(timeout=SERVED), PingResp)
        publisher.send(Publish(topic, b"at the limit"))
        message = expect_publish(subscriber, timeout=SERVED)
        assert (message.topic, message.payload) == (topic, b"at the limit")
        assert time.monotonic() - started < 2 * SERVED

        # ... and the limit still holds: the next connection is refused at once too.
        ok, seconds = send_connect(open_client(broker, clients))
        assert not ok, "a connection was accepted although the broker was at its limit"
        assert seconds < PROMPT
        refused = len(refusals) + 1

        # The refusals are logged, rate-limited (one line, then a summary with counts).
        first = wait_for_log(broker, "refused connection from 127.0.0.1:")
        assert "RLIMIT_NOFILE" in first, first
        assert "ulimit -n" in first, first
        assert "listener.max_connections" in first, first
        summary = wait_for_log(broker, "refused connections: ", timeout=3.0)
        assert " more in the last " in summary, summary
        log = broker.log()
        lines = [line for line in log.splitlines() if "refused connection" in line]
        assert len(lines) < refused, lines
        assert "Traceback" not in log, log
        assert "Too many open files" not in log, log
        assert "Errno 24" not in log, log

        # Once descriptors are free again, new clients connect.
        for client in clients[2:]:
            client.close()
        del clients[2:]
        deadline = time.monotonic() + 3.0
        while True:
            ok, _ = send_connect(open_client(broker, clients))
            if ok:
                break
            assert time.monotonic() < deadline, (
                f"no connection accepted after descriptors were freed:\n{broker.log()}"
            )
            clients.pop().close()
            time.sleep(0.05)
        subscriber.send(PingReq())
        assert isinstance(subscriber.expect(timeout=SERVED), PingResp)
    finally:
        for client in clients:
            client.close()
        exit_code = broker.stop()
    assert exit_code == 0, broker.log()
