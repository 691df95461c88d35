"""A pool worker's CONNECT that the cluster's fence refuses (pool/registry.py): what the
client id's home is told, against a real arbiter (pool/ownership.py).

In a node of a cluster, two workers take connections of one client id at once. Worker 0
holds the id's session; worker 1's CONNECT is granted the id (previous owner: worker 0), but
a claim on another node fenced worker 1 meanwhile, so its CONNECT is refused before it asks
worker 0 for the session. Worker 0's session stays, and the id must stay with it: given back
to nobody, worker 1's next CONNECT of the id would open a second session beside worker 0's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gevent

from actors.context import BrokerContext
from actors.messages import ClientMessage, ConnectRefused
from core.client import ClientInfo
from mqtt.reason_codes import ReasonCode
from net.transport import Transport
from pool.frames.ownership import Granted
from pool.node import ClaimAnswer, PoolNode
from pool.ownership import ClientIdArbiter
from pool.registry import PoolRegistry

FENCED = "a later connection on another node of the cluster took its client id"


class HomeElsewhere:
    """The part of `PoolNode` a registry's claim uses, for a worker whose ids are homed at
    another worker running `arbiter` (its frames reach it at once)."""

    def __init__(self, arbiter: ClientIdArbiter, worker: int) -> None:
        self.arbiter = arbiter
        self.worker = worker

    def claim_now(self, _client_id: str) -> None:
        return None  # homed elsewhere: the claim is a frame and its answer a callback

    def claim(self, client_id: str, answer: Callable[[ClaimAnswer], object]) -> None:
        (granted,) = self.arbiter.claim(client_id, self.worker)  # nothing waits before it
        answer(granted)

    def settle(self, client_id: str, has_session: bool) -> None:
        if has_session:
            self.arbiter.settled(client_id, self.worker)
        else:
            self.arbiter.release(client_id, self.worker)

    def decline(self, client_id: str) -> None:
        self.arbiter.declined(client_id, self.worker)


class Connection:
    """A client actor's reference: what the registry tells it."""

    def __init__(self) -> None:
        self.told: list[ClientMessage] = []

    def tell(self, message: ClientMessage) -> None:
        self.told.append(message)

    def is_alive(self) -> bool:
        return True


def fenced_registry(arbiter: ClientIdArbiter, worker: int) -> PoolRegistry:
    """Worker `worker`'s registry, which the cluster's fence refuses every id."""
    node = cast(PoolNode, HomeElsewhere(arbiter, worker))
    registry = PoolRegistry(cast(BrokerContext, None), {}, node, resume=lambda *_: None)
    registry.fence = lambda _client_id: FENCED
    return registry


def connect(registry: PoolRegistry, client_id: str) -> Connection:
    connection = Connection()
    client = ClientInfo(
        client_id=client_id,
        username=None,
        peer="127.0.0.1:1",
        protocol_version=4,
        clean_start=True,
        keepalive=60,
    )
    registry.open(client, connection, cast(Transport, None), {})
    gevent.sleep(0)  # the claim's answer opens the session in a pool greenlet
    gevent.sleep(0)
    return connection


def refused_with(connection: Connection) -> Any:
    (refusal,) = connection.told
    assert isinstance(refusal, ConnectRefused)
    return refusal.reason_code


def test_a_fenced_connect_leaves_the_id_with_the_worker_that_holds_its_session() -> None:
    arbiter = ClientIdArbiter()
    arbiter.claim("c", 0)
    arbiter.settled("c", 0)  # worker 0 holds the session of "c"
    registry = fenced_registry(arbiter, worker=1)

    connection = connect(registry, "c")

    assert refused_with(connection) == ReasonCode.SERVER_UNAVAILABLE
    assert arbiter.owner("c") == 0
    assert not arbiter.granting("c")
    # The next claim of the id is told to take the session from worker 0.
    assert arbiter.claim("c", 1) == [Granted("c", 1, 0)]


def test_a_fenced_connect_of_an_id_nobody_holds_gives_it_back() -> None:
    arbiter = ClientIdArbiter()
    registry = fenced_registry(arbiter, worker=1)

    connection = connect(registry, "c")

    assert refused_with(connection) == ReasonCode.SERVER_UNAVAILABLE
    assert arbiter.owner("c") is None
    assert arbiter.claim("c", 0) == [Granted("c", 0, None)]
