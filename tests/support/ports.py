"""Ports for the servers the tests start (brokers, NATS, PostgreSQL, Redis, HAProxy, proxies).

A port is picked below the kernel's ephemeral range (`ip_local_port_range`), where the
kernel never hands out a port on its own: an outgoing connection or a `bind(..., 0)`
elsewhere on the machine cannot take it between the pick and the server's bind. This
process hands each port out once, so two servers started together never get the same one;
under pytest-xdist each worker process picks from a slice of the range of its own, so two
workers never pick the same port either.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it can't be read)."""
    try:
        return int(_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _slice(lowest: int, highest: int) -> tuple[int, int]:
    """This process's part of the ports `lowest`..`highest`: all of them, or under
    pytest-xdist (which names its workers gw0, gw1, ...) the worker's own slice."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2:
        return lowest, highest
    width = (highest - lowest + 1) // count
    start = lowest + int(worker[2:]) * width
    return start, start + width - 1


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on now, not handed out before by this process,
    outside the ephemeral range and in this process's slice (the server binds it a moment
    later)."""
    highest = _ephemeral_low() - 1
    if highest - _LOWEST < 1000:
        raise RuntimeError(
            f"the ephemeral port range starts at {highest + 1}: tests need ports "
            f"{_LOWEST}..{_LOWEST + 1000} outside it (see {_PORT_RANGE})"
        )
    lowest, highest = _slice(_LOWEST, highest)
    while True:
        if len(_handed_out) > (highest - lowest) // 2:
            raise RuntimeError(f"half the ports {lowest}..{highest} are handed out already")
        port = random.randint(lowest, highest)
        if port in _handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
