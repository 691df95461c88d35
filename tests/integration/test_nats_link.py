"""`cluster.nats_link.NatsLink` in this process's gevent hub, against a real nats-server and a
nats-py client on a thread of its own (one process holds one link, as a broker worker does):
what a greenlet publishes leaves at once although the link's asyncio loop waits in the hub
with nothing due for minutes (nats-py's next ping), in order; what the peer publishes
reaches the hub; a job's answer comes back to the hub; `stop` sends what is queued."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import gevent
import nats
import pytest
from gevent.event import AsyncResult, Event
from nats.aio.client import Client
from nats.aio.msg import Msg

from cluster.config import ClusterConfig
from cluster.nats_link import NatsLink
from tests.support.nats_server import NatsServer

ARRIVAL_TIMEOUT = 5.0
IDLE = 0.3  # seconds a test lets the link's loop wait in the hub before it publishes


class Peer:
    """A nats-py client on a thread with its own asyncio loop: it records what arrives on
    `subject` and publishes on request."""

    def __init__(self, url: str, subject: str) -> None:
        self.bodies: list[bytes] = []  # appended on the peer's thread
        self._loop = asyncio.new_event_loop()
        self._client: Client | None = None
        ready = threading.Event()

        async def connect() -> None:
            self._client = await nats.connect(url)
            await self._client.subscribe(subject, cb=self._received)
            await self._client.flush()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(connect())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(ARRIVAL_TIMEOUT), f"the peer did not connect to {url}"

    async def _received(self, msg: Msg) -> None:
        self.bodies.append(msg.data)

    def publish(self, subject: str, bodies: list[bytes]) -> None:
        async def send() -> None:
            assert self._client is not None
            for body in bodies:
                await self._client.publish(subject, body)
            await self._client.flush()

        asyncio.run_coroutine_threadsafe(send(), self._loop).result(ARRIVAL_TIMEOUT)

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        async def close() -> None:
            assert self._client is not None
            await self._client.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(ARRIVAL_TIMEOUT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(ARRIVAL_TIMEOUT)


class Heard:
    """What the link hands the hub: messages' bodies, and whether it is up."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.up = Event()

    def on_messages(self, batch: list[tuple[str, bytes]]) -> None:
        self.bodies += [body for _subject, body in batch]

    def on_state(self, up: bool) -> None:
        if up:
            self.up.set()


def wait_for(bodies: list[bytes], count: int, what: str) -> None:
    """Poll until `bodies` holds `count`, while the hub runs (the peer's thread is not a
    greenlet)."""
    deadline = time.monotonic() + ARRIVAL_TIMEOUT
    while len(bodies) < count:
        assert time.monotonic() < deadline, f"{len(bodies)} of {count} of {what} arrived"
        gevent.sleep(0.002)


@pytest.fixture
def link(nats: NatsServer) -> Iterator[tuple[NatsLink, Heard]]:
    heard = Heard()
    config = ClusterConfig(name="t", node="a", nats=(nats.url,))
    link = NatsLink(config, "a.0", ["to-link.>"], heard.on_messages, heard.on_state)
    link.start()
    assert heard.up.wait(ARRIVAL_TIMEOUT), f"the link did not connect to {nats.url}"
    yield link, heard
    link.stop()


def test_what_a_greenlet_publishes_after_the_loop_went_idle_leaves_at_once_in_order(
    nats: NatsServer, link: tuple[NatsLink, Heard]
) -> None:
    sender, _heard = link
    with Peer(nats.url, "from-link.>") as peer:
        expected: list[bytes] = []
        for burst in range(5):
            # The link's loop waits in the hub now, with nothing due before nats-py's next
            # ping (minutes away): only the publish's wake-up can start the sender's turn.
            gevent.sleep(IDLE)
            sent_at = time.monotonic()
            bodies = [f"{burst}-{n}".encode() for n in range(1 if burst % 2 else 200)]
            for body in bodies:
                sender.publish("from-link.x", body)
            expected += bodies
            wait_for(peer.bodies, len(expected), f"the messages up to burst {burst}")
            assert time.monotonic() - sent_at < 1.0
        assert peer.bodies == expected


def test_what_the_peer_publishes_reaches_the_hub_in_order(
    nats: NatsServer, link: tuple[NatsLink, Heard]
) -> None:
    _link, heard = link
    with Peer(nats.url, "unused") as peer:
        gevent.sleep(IDLE)
        bodies = [str(n).encode() for n in range(500)]
        peer.publish("to-link.y", bodies)
        wait_for(heard.bodies, len(bodies), "the peer's messages")
        assert heard.bodies == bodies


def test_a_job_runs_on_the_nats_loop_and_answers_in_the_hub(
    nats: NatsServer, link: tuple[NatsLink, Heard]
) -> None:
    runner, _heard = link
    gevent.sleep(IDLE)
    answer: AsyncResult[tuple[object, BaseException | None]] = AsyncResult()

    async def server_port(client: Client) -> int | None:
        await client.flush()
        return client.connected_url.port if client.connected_url else None

    runner.run(server_port, lambda result, error: answer.set((result, error)), timeout=5.0)
    assert answer.get(timeout=ARRIVAL_TIMEOUT) == (nats.port, None)


def test_stop_sends_what_was_queued(nats: NatsServer, link: tuple[NatsLink, Heard]) -> None:
    sender, _heard = link
    with Peer(nats.url, "from-link.>") as peer:
        bodies = [str(n).encode() for n in range(300)]
        for body in bodies:
            sender.publish("from-link.z", body)
        sender.stop()  # at once: none of them has left yet
        wait_for(peer.bodies, len(bodies), "the queued messages")
        assert peer.bodies == bodies
