"""What the broker's surfaces read and ask of one running worker: the admin API and
dashboard (`admin/`), the figures (`actors.figures`) and the `$SYS` publisher depend on
this narrow view, not on `actors.broker.Broker`, which starts them. `Broker` (and a pool's
`PoolBroker`) satisfy it; nothing here imports them, so no import circle runs through it."""

from __future__ import annotations

from typing import Any, Protocol

from actors.cluster_part import ClusterPart
from actors.config import BrokerConfig
from actors.context import BrokerContext
from bridge.service import Bridges
from core.message import Message
from net.endpoint import Endpoint
from plugins.loader import LoadedPlugin
from router.retained_index import RetainedIndex
from store.writer import StoreWriter

Gathered = tuple[dict[int, list[dict[str, Any]]], list[int]]  # rows by worker, left out


class OtherWorkers(Protocol):
    """A pool's way to ask every other worker for its rows of an operation."""

    def gather(self, op: str, args: dict[str, Any], timeout: float = ...) -> Gathered: ...


class BrokerView(Protocol):
    """One worker as its surfaces see it."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def context(self) -> BrokerContext: ...

    @property
    def worker_id(self) -> int: ...

    @property
    def ready(self) -> bool: ...

    @property
    def ops(self) -> OtherWorkers | None: ...

    @property
    def plugins(self) -> list[LoadedPlugin]: ...

    @property
    def endpoints(self) -> list[Endpoint]: ...

    @property
    def store_writer(self) -> StoreWriter | None: ...

    @property
    def retained_index(self) -> RetainedIndex[Message] | None: ...

    @property
    def bridges(self) -> Bridges | None: ...

    @property
    def cluster(self) -> ClusterPart | None: ...

    def reload(self) -> None: ...


class Surface(Protocol):
    """A service started over the view once the worker is ready (the admin HTTP server):
    `start` is given a socket already listening, or None to bind `[http]` itself."""

    def start(self, listener: Any) -> None: ...

    def stop(self) -> None: ...
