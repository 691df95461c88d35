"""Out of file descriptors: the broker refuses new connections at once and keeps serving.

The broker runs with RLIMIT_NOFILE soft 64 / hard 128 (set in the child before exec). At
start-up it must raise the soft limit to the hard one and log it. Once its descriptors are used
up, each new connection must be closed at once without a CONNACK (not left waiting in the listen
backlog), connected clients must still be served, the refusals must be logged as rate-limited
lines without tracebacks, and connecting must work again once descriptors are free.

In a pool every worker has the limit for itself, and the kernel hashes each connection to one
of them (docs/pool.md): while one worker is full and another is not, connections are refused
and accepted in turn. The pool is full when every worker refuses, which the test takes to be
so after `CONSECUTIVE_REFUSALS[workers]` refusals in a row. With two workers, a worker with
room left gets none of 20 connections in a row with a chance of one in a million; filling it
takes about a hundred such runs.
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
# Refusals in a row that show every worker is at its limit (one process: the first shows it).
CONSECUTIVE_REFUSALS = {1: 6, 2: 20}
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


@pytest.mark.timeout(20)
def test_out_of_descriptors_refuses_at_once_and_keeps_serving(tmp_path: Path, workers: int) -> None:
    in_a_row = CONSECUTIVE_REFUSALS[workers]
    max_sockets = (workers + 1) * HARD_LIMIT  # the most connections opened to reach the limit
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

        # Fill the descriptor table of the broker (of every worker) until connections are
        # refused, each at once.
        accepted = 0
        refusals: list[float] = []
        run = 0  # refusals since the last accepted connection
        while run < in_a_row:
            assert len(clients) < max_sockets, (
                f"not {in_a_row} connections refused in a row after {len(clients)} "
                f"connections with a descriptor limit of {HARD_LIMIT}:\n{broker.log()}"
            )
            ok, seconds = send_connect(open_client(broker, clients))
            if ok:
                accepted += 1
                run = 0
            else:
                refusals.append(seconds)
                run += 1
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
        if workers > 1:  # every worker reached its limit
            for worker in range(workers):
                assert any(f"[worker {worker}] refused connection" in line for line in lines), lines
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
