"""SIGTERM: the broker closes every connection from the server side and exits 0 within 5 s.

What is asserted, and why only that: on shutdown the broker closes all connections at once,
so whether a will reaches a subscriber depends on which of the two connections the broker
closes first; that order is not specified and not observable in a sound way from outside
(the subscriber is itself being disconnected). The test therefore checks the exit code and
time, and that every kind of connection (connected with a will, persistent with a QoS 2
delivery in flight, and a socket that never sent CONNECT) was closed by the shutdown path
(its log lines) before the process exited.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mqtt.packets import Publish, PubRec, PubRel, Will
from tests.support.broker_config import wait_for_log, wait_for_log_lines
from tests.support.broker_process import ROOT, BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.raw_client import RawClient

EXIT_WITHIN_SECONDS = 5.0


def test_sigterm_closes_all_connections_and_exits_0(
    broker_factory: Callable[..., BrokerProcess], workers: int
) -> None:
    server = broker_factory()
    # Connected first, so it is surely accepted by the time the other clients are served.
    silent = RawClient(server.host, server.port)  # never sends CONNECT
    topic = unique("shutdown")
    willing_id, persistent_id = unique("willing"), unique("persistent")
    with_will = connect_raw(server, willing_id, will=Will(topic, b"bye", qos=1))
    persistent = connect_raw(server, persistent_id, clean=False)
    subscribe_raw(persistent, 1, (topic, 2))
    with_will.send(Publish(topic, b"in-flight", qos=2, packet_id=1))
    assert with_will.expect() == PubRec(1)
    with_will.send(PubRel(1))
    with_will.expect()  # PUBCOMP
    delivery = expect_publish(persistent)
    persistent.send(PubRec(delivery.packet_id))
    assert persistent.expect() == PubRel(delivery.packet_id)  # PUBCOMP never sent

    started = time.monotonic()
    exit_code = server.stop(signal.SIGTERM, timeout=EXIT_WITHIN_SECONDS)
    elapsed = time.monotonic() - started
    assert exit_code == 0, server.log()
    assert elapsed < EXIT_WITHIN_SECONDS, elapsed
    # The process is gone, so the sockets are closed anyway: the log shows each was closed
    # by the shutdown path first.
    # Each worker of a pool closes its own connections and says how many.
    lines = wait_for_log_lines(server, "shutting down: closing", workers)
    assert sum(int(line.split("closing ")[1].split()[0]) for line in lines) == 3, lines
    for client_id in (willing_id, persistent_id):
        wait_for_log(server, f"closing client '{client_id}'")
    silent_port = silent.sock.getsockname()[1]
    wait_for_log(server, f"closing connection 127.0.0.1:{silent_port}: server_shutdown")
    wait_for_log(server, "stopped")
    for client in (with_will, persistent, silent):
        client.close()


@contextmanager
def _starting_broker(
    tmp_path: Path, workers: int
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A one-process broker, once it is inside its start-up: it has opened its store and has
    not yet said it is ready (polled every millisecond: the rest of the start-up takes a
    few). Killed on the way out if it is still running. Skipped in the pool mode: a pool's
    supervisor handles signals from its first line."""
    if workers > 1:
        pytest.skip("a pool's supervisor handles signals from its first line")
    log_path = tmp_path / "broker.log"
    args = [sys.executable, "-m", "actors.main", "--port", "0", "--workers", "1"]
    args += ["--log-level", "info", "--http-port", "0", "--data-dir", str(tmp_path / "data")]
    with log_path.open("wb") as log:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 30
        while b"opened store" not in log_path.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the broker did not open its store:\n{log_path.read_text()}")
            time.sleep(0.001)
        yield process, log_path
    finally:
        process.kill()  # a no-op once it has exited


def test_a_sigterm_while_starting_stops_the_broker_once_started(
    tmp_path: Path, workers: int
) -> None:
    """Its default action would kill the broker: the handler is in place before start-up."""
    with _starting_broker(tmp_path, workers) as (process, log_path):
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=EXIT_WITHIN_SECONDS + 5) == 0, log_path.read_text()
    log = log_path.read_text()
    assert "ready: accepting MQTT connections" in log
    assert "stopped:" in log


def test_a_sighup_while_starting_reloads_the_broker_once_started(
    tmp_path: Path, workers: int
) -> None:
    with _starting_broker(tmp_path, workers) as (process, log_path):
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "reloading plugins" not in log_path.read_text():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.02)
        log = log_path.read_text()
        assert log.index("ready: accepting MQTT connections") < log.index("reloading plugins")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=EXIT_WITHIN_SECONDS + 5) == 0, log_path.read_text()
