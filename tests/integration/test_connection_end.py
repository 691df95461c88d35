"""Every connection ends once, whatever ends it, and everything that follows from its end
happens: its will (where the rules publish one [MQTT-3.1.2-8]), the `client.disconnected`
hook, the connection count of the admin API and its listing.

One broker with a small `max_write_buffer`, the recorder plugin (one JSON line per hook
event) and the admin API. A watcher subscribes to the wills; each test connects a client
with a will and ends it one way: a write that fails because the client reset while the
broker had more than `max_write_buffer` waiting for it (the client must not stay listed,
counted and will-less with no socket), a reset while the broker reads, keep-alive expiry,
a kick, a takeover. Each waits for the will at the watcher within 1.5 times the keep-alive,
for one `client.disconnected` with the reason, and for the count to drop.
A shutdown is checked through the recorder only (the watcher is being closed too): the will
is published and the hook runs before the process exits.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mqtt.packets import Disconnect, PingReq, PubAck, Publish, Will
from tests.support.admin import Admin, http_config
from tests.support.broker_config import running_broker, wait_for_log
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.ports import free_port
from tests.support.raw_client import RawClient

KEEPALIVE = 5
WILL_WITHIN = KEEPALIVE * 1.5
WRITE_BUFFER = 65536
LOAD_SIZE = 256 * 1024  # x 32 in flight: 8 MiB, twice what the kernel buffers hold
LOAD_COUNT = 40

RECORDER = "tests.support.test_plugins.recorder"


def config(http_port: int | None) -> str:
    """The recorder, a small write buffer, and the admin API on `http_port` (None: none)."""
    return (
        f'[limits]\nmax_write_buffer = {WRITE_BUFFER}\n[store]\nkind = "memory"\n'
        f'[[plugins]]\nmodule = "{RECORDER}"\npath = "events.jsonl"\n'
        + (http_config(http_port) if http_port is not None else "")
    )


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[Ends]:
    port = free_port()
    with running_broker(tmp_path_factory.mktemp("ends"), config(port)) as broker:
        watcher = connect_raw(broker, unique("will-watcher"))
        subscribe_raw(watcher, 1, ("ends/#", 1))
        yield Ends(broker, Admin(broker, port), watcher)
        watcher.close()


class Ends:
    """The module's broker, its admin API and the watcher of the wills."""

    def __init__(self, broker: BrokerProcess, admin: Admin, watcher: RawClient) -> None:
        self.broker = broker
        self.admin = admin
        self.watcher = watcher

    def connected(self) -> int:
        """The connection count of /api/v1/stats once it agrees with the client listing: the
        stats are one reading a second (docs/operations.md), the listing is read anew."""
        counts: list[int] = []

        def settled() -> bool:
            counts[:] = [
                int(self.admin.get("/api/v1/stats")["connections"]),
                int(self.admin.get("/api/v1/clients")["meta"]["count"]),
            ]
            return counts[0] == counts[1]

        wait_until(settled)
        return counts[0]

    def listed(self, client_id: str) -> int:
        rows = self.admin.get(f"/api/v1/clients?clientid={client_id}")["data"]
        return sum(row["clientid"] == client_id for row in rows)

    def willing(
        self, client_id: str, keepalive: int = KEEPALIVE, *, clean: bool = True
    ) -> RawClient:
        """`client_id` connected with a will on ends/`client_id`, listed and counted."""
        before = self.connected()
        client = connect_raw(
            self.broker,
            client_id,
            clean=clean,
            keepalive=keepalive,
            will=Will(f"ends/{client_id}", b"gone", qos=1),
        )
        wait_until(lambda: self.listed(client_id) == 1 and self.connected() == before + 1)
        return client

    def check_end(
        self, client_id: str, reason: str, connected_after: int, listed_after: int = 0
    ) -> None:
        """The will arrived, the hook ran once with `reason`, the count is `connected_after`
        and the client is listed `listed_after` times (a takeover's new connection: once)."""
        will = expect_publish(self.watcher, timeout=WILL_WITHIN)
        assert (will.topic, will.payload) == (f"ends/{client_id}", b"gone")
        self.watcher.send(PubAck(will.packet_id))
        ends = wait_for_events(self.broker, "client.disconnected", client_id)
        assert [event["reason"] for event in ends] == [reason]
        wait_until(
            lambda: self.connected() == connected_after and self.listed(client_id) == listed_after
        )
        time.sleep(0.2)  # nothing more follows: the end ran once
        assert len(wait_for_events(self.broker, "client.disconnected", client_id)) == 1
        self.watcher.expect_nothing(0.1)


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def wait_for_events(
    broker: BrokerProcess, point: str, client_id: str, timeout: float = 5.0
) -> list[dict[str, Any]]:
    """The recorder's `point` events of `client_id`, once there is at least one."""
    path = broker.log_path.parent / "events.jsonl"
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        events = [json.loads(line) for line in text.split("\n")[:-1]]
        found = [e for e in events if e["point"] == point and e["client_id"] == client_id]
        if found:
            return found
        assert time.monotonic() < deadline, f"no {point} of {client_id!r} recorded: {events}"
        time.sleep(0.05)


def reset(client: RawClient) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client that crashes or loses its network."""
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sock.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "persistent"])
def test_a_write_that_fails_on_a_reset_client_ends_it(ended: Ends, clean: bool) -> None:
    """The subscriber stops reading while more than max_write_buffer waits for it, then
    resets: the broker learns it from a failing write (its reads are paused)."""
    before = ended.connected()
    client_id = unique("ghost")
    ghost = ended.willing(client_id, clean=clean)
    subscribe_raw(ghost, 1, (f"load/{client_id}", 1))  # ... and reads nothing more
    publisher = connect_raw(ended.broker, unique("loader"))
    payload = b"x" * LOAD_SIZE
    for packet_id in range(1, LOAD_COUNT + 1):
        publisher.send(Publish(f"load/{client_id}", payload, qos=1, packet_id=packet_id))
        assert publisher.expect() == PubAck(packet_id)
    # A read makes the broker check what waits for the ghost: it pauses reading from it. In a
    # pool the deliveries come from the publisher's worker and the PUBACKs do not wait for
    # them, so they may land after a first read: each PINGREQ is a read, until one pauses.
    pausing = f"pausing reads from 127.0.0.1:{ghost.sock.getsockname()[1]}: "
    deadline = time.monotonic() + 5
    while not any(pausing in line for line in ended.broker.log().splitlines()):
        assert time.monotonic() < deadline, f"no log line has {pausing!r}:\n{ended.broker.log()}"
        ghost.send(PingReq())
        time.sleep(0.1)
    reset(ghost)
    ended.check_end(client_id, "socket_closed", before + 1)  # the publisher is still on
    publisher.send(Disconnect())
    publisher.close()


def test_a_reset_while_the_broker_reads_ends_the_connection(ended: Ends) -> None:
    before = ended.connected()
    client_id = unique("reset")
    reset(ended.willing(client_id))
    ended.check_end(client_id, "socket_closed", before)


def test_keep_alive_expiry_ends_the_connection_MQTT_3_1_2_24(ended: Ends) -> None:
    before = ended.connected()
    client_id = unique("silent")
    silent = ended.willing(client_id, keepalive=1)  # closed 1.5 s after its last packet
    ended.check_end(client_id, "keepalive_timeout", before)
    assert silent.is_closed_by_broker(timeout=1)


def test_a_kick_ends_the_connection(ended: Ends) -> None:
    before = ended.connected()
    client_id = unique("kicked")
    kicked = ended.willing(client_id)
    assert ended.admin.request("DELETE", f"/api/v1/clients/{client_id}").status == 204
    ended.check_end(client_id, "administrative_action", before)
    assert kicked.is_closed_by_broker(timeout=1)


def test_a_takeover_ends_the_old_connection_MQTT_3_1_4_2(ended: Ends) -> None:
    before = ended.connected()
    client_id = unique("taken")
    old = ended.willing(client_id)
    new = connect_raw(ended.broker, client_id)
    ended.check_end(client_id, "taken_over", before + 1, listed_after=1)
    assert old.is_closed_by_broker(timeout=1)
    new.send(Disconnect())
    new.close()
    wait_until(lambda: ended.connected() == before)


def test_a_shutdown_ends_every_connection(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, config(None))
    client_id = unique("at-shutdown")
    client = connect_raw(broker, client_id, will=Will(f"ends/{client_id}", b"gone", qos=1))
    wait_for_log(broker, f"client '{client_id}'")
    assert broker.stop() == 0, broker.log()
    client.close()
    ends = wait_for_events(broker, "client.disconnected", client_id, timeout=0)
    assert [event["reason"] for event in ends] == ["server_shutdown"]
    [will] = wait_for_events(broker, "message.publish", client_id, timeout=0)
    assert will["topic"] == f"ends/{client_id}"
