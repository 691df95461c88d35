"""20,000 MQTT connections to one broker (docs/overload.md has the kernel settings for 100k).

Every connection gets its CONNACK; with all of them open, a new client can still connect and
exchange messages and a sample of the connections answers PINGREQ; when they all close, the
broker counts none left. `MANY_CONNECTIONS` sets another count (20,000 by default).

Descriptors bound where the connections can live. The client ends are held by child processes
(`loadtest.hold_connections`, each from its own loopback source address), each far below
RLIMIT_NOFILE's hard limit. The broker is one process when it may raise its limit to
`CONNECTIONS` + 200 descriptors; where the hard limit is lower and cannot be raised (no
CAP_SYS_RESOURCE: 20,000 on the development machine), the one-process run is skipped and the
pool run takes enough workers that each needs at most half its limit (the kernel spreads
accepted connections over the workers).
"""

from __future__ import annotations

import logging
import math
import os
import resource
import time

import pytest

from loadtest.hold_connections import HeldConnections, broker_tree_rss_kib, sockets_per_process
from mqtt.packets import PubAck, Publish
from tests.support.broker_config import wait_for_log_lines
from tests.support.broker_process import start_broker
from tests.support.clients import connect_raw, subscribe_raw, unique

logger = logging.getLogger(__name__)

CONNECTIONS = int(os.environ.get("MANY_CONNECTIONS", "20000"))
DESCRIPTORS = CONNECTIONS + 200
_HARD_LIMIT = resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def _raise_descriptor_limit() -> None:
    """In the broker's child before exec: one system call."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


def _one_process_may_hold_them() -> bool:
    if _HARD_LIMIT == resource.RLIM_INFINITY or _HARD_LIMIT >= DESCRIPTORS:
        return True
    try:  # raising the hard limit needs CAP_SYS_RESOURCE; try it on a throw-away value
        resource.setrlimit(resource.RLIMIT_NOFILE, (_HARD_LIMIT, DESCRIPTORS))
    except (ValueError, OSError):
        return False
    return True


def _broker_shape(workers: int) -> tuple[int, bool]:
    """(workers, raise the limit in the child) for this mode: one process only if it may hold
    every connection (else the test is skipped: the pool run covers the count); a pool with
    enough workers that each needs at most half its limit."""
    if workers == 1:
        if not _one_process_may_hold_them():
            pytest.skip(
                f"one broker process needs {DESCRIPTORS} descriptors and RLIMIT_NOFILE's hard "
                f"limit is {_HARD_LIMIT} here, which may not be raised; the pool run holds them"
            )
        return 1, True
    return max(workers, math.ceil(2 * DESCRIPTORS / _HARD_LIMIT)), False


@pytest.mark.timeout(600)
def test_twenty_thousand_connections(
    tmp_path_factory: pytest.TempPathFactory, workers: int
) -> None:
    workers, raise_limit = _broker_shape(workers)
    broker = start_broker(
        tmp_path_factory.mktemp("many"),
        "[[listeners]]\nport = 0\n",
        ("--workers", str(workers)),
        preexec_fn=_raise_descriptor_limit if raise_limit else None,
    )
    processes = max(2, math.ceil(2 * CONNECTIONS / _HARD_LIMIT))
    with HeldConnections(broker.host, broker.port, CONNECTIONS, processes, limit_s=300) as held:
        assert held.opened.errors == []
        assert held.opened.connected == CONNECTIONS
        # All open: the broker still serves a newcomer and the old ones.
        # (raw clients: paho's select() cannot watch descriptor numbers above 1024)
        probe = connect_raw(broker, unique("probe"))
        topic = unique("many-topic")
        subscribe_raw(probe, 1, (topic, 1))
        probe.send(Publish(topic, b"still here", qos=1, packet_id=2))
        answers = [probe.expect(timeout=10), probe.expect(timeout=10)]
        assert PubAck(2) in answers, answers
        delivered = next(a for a in answers if isinstance(a, Publish))
        assert delivered.payload == b"still here"
        probe.close()
        sampled, answered = held.ping_sample(every=100)
        assert (sampled, answered) == (CONNECTIONS // 100, CONNECTIONS // 100)
        rss_kib = broker_tree_rss_kib(broker.process.pid)
        spread = sockets_per_process(broker.process.pid)
    deadline = time.monotonic() + 60
    while sum(sockets_per_process(broker.process.pid).values()) > 10 * workers + 10:
        assert time.monotonic() < deadline, sockets_per_process(broker.process.pid)
        time.sleep(0.5)
    assert broker.stop(timeout=30) == 0
    lines = wait_for_log_lines(broker, "shutting down:", workers)
    assert all("closing 0 connections (0 counted as connected)" in line for line in lines), lines
    assert "Traceback" not in broker.log()
    # The figures, in the log of the test run (-o log_cli=true): per-connection memory.
    logger.info(
        "%d connections in %.1f s (%.0f/s) to %d worker(s); broker RSS %d MiB "
        "(%.1f KiB per connection); sockets per broker process %s",
        CONNECTIONS,
        held.opened.seconds,
        CONNECTIONS / held.opened.seconds,
        workers,
        rss_kib // 1024,
        rss_kib / CONNECTIONS,
        spread,
    )
