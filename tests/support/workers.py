"""Which worker of a pool a client landed on, and connecting until a chosen worker has it.

The kernel, not the test, picks the worker that accepts a connection; each worker logs the
clients it accepts ("channel.channel: [worker N] client 'ID' ... connected"), so a test
that must exercise another worker than the one serving the admin API (worker 0) connects
again until the log says the client is there. With one process every client is on worker 0.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from mqtt.packets import Disconnect
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw
from tests.support.raw_client import RawClient

CONNECTED = re.compile(r"channel\.channel: \[worker (\d+)\] client '([^']+)' .* connected:")
REFUSED = re.compile(r"channel\.channel: \[worker (\d+)\] refused CONNECT from client '([^']+)'")
ATTEMPTS = 40


def connections_of(broker: BrokerProcess, client_id: str) -> list[int]:
    """The workers that accepted each connection of `client_id` so far, in order."""
    return [int(w) for w, cid in CONNECTED.findall(broker.log()) if cid == client_id]


def refusals_of(broker: BrokerProcess, client_id: str) -> list[int]:
    """The workers that refused each CONNECT of `client_id` so far, in order."""
    return [int(w) for w, cid in REFUSED.findall(broker.log()) if cid == client_id]


def connect_on_worker(
    broker: BrokerProcess, client_id: str, worker: int, workers: int, **kwargs: Any
) -> tuple[RawClient, int]:
    """Connect `client_id` until `worker` accepts it (with one process: at once); the
    client and how many connections it took. A connection that landed elsewhere is ended
    with DISCONNECT (no will) before the next try."""
    if workers == 1:
        return connect_raw(broker, client_id, **kwargs), 1
    for attempt in range(1, ATTEMPTS + 1):
        seen = len(connections_of(broker, client_id))
        client = connect_raw(broker, client_id, **kwargs)
        deadline = time.monotonic() + 5
        while len(connections_of(broker, client_id)) == seen:
            assert time.monotonic() < deadline, f"no worker logged {client_id!r} connected"
            time.sleep(0.01)
        if connections_of(broker, client_id)[-1] == worker:
            return client, attempt
        client.send(Disconnect())
        client.close()
        time.sleep(0.02)
    raise AssertionError(f"{ATTEMPTS} connections of {client_id!r} missed worker {worker}")


def worker_pid(broker: BrokerProcess, worker: int) -> int:
    """The process id of a pool's worker `worker` (a child of the supervisor)."""
    children = Path(f"/proc/{broker.process.pid}/task/{broker.process.pid}/children")
    for child in children.read_text().split():
        command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if (
            b"--worker-id" in command
            and command[command.index(b"--worker-id") + 1] == str(worker).encode()
        ):
            return int(child)
    raise AssertionError(f"worker {worker} is not running")


def serving_pids(broker: BrokerProcess) -> list[int]:
    """The processes that serve clients: a pool's workers, or the broker itself when it
    runs as one process (its memory is theirs: the supervisor's own stays flat)."""
    children = Path(f"/proc/{broker.process.pid}/task/{broker.process.pid}/children")
    workers = [
        int(child)
        for child in children.read_text().split()
        if b"--worker-id" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
    ]
    return workers or [broker.process.pid]
