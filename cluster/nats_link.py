"""One broker worker's connection to NATS: nats-py's asyncio loop run on a greenlet of the
worker's gevent hub, its messages handed to and from the broker's greenlets in batches.

nats-py is asyncio-only and the broker runs on gevent without monkey-patching, so the client
gets an asyncio loop of its own, on the worker's one thread (docs/cluster.md "How it is built"):
the loop's selector waits on the hub (`_HubSelector`: an epoll fd is readable while one of
the fds it watches is ready, so the hub watches that one fd), and the loop runs on a
greenlet like any other. Nothing crosses threads, so a NATS message costs no thread
wake-up and no hand-over of the GIL: with the client on a thread of its own, a message
crossing nodes at 1,000 msg/s cost about 15 % more CPU, at high rates the same.
- `publish` (called from any greenlet) appends to a queue and, once for however many
  messages a loop turn publishes, sets the sender's event and wakes the loop's greenlet
  from its wait in the hub (`_HubSelector.wake`: a callback of the hub, no system call;
  asyncio's own `call_soon_threadsafe` writes to a self-pipe that the loop then reads);
- messages received on the subscriptions are appended to a queue, taken in one callback of
  the hub (`loop.run_callback`) for all that came meanwhile;
- the connection's ups and downs reach the broker's greenlets the same way.

Publishing keeps the order of the calls, so what one worker sends another arrives in order
(NATS keeps one connection's order), which the cluster's route rounds rest on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import selectors
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

import gevent
import nats
from gevent.hub import Hub, Waiter
from nats.aio.client import Client
from nats.aio.msg import Msg

from cluster.config import ClusterConfig

logger = logging.getLogger(__name__)

RETRY_FIRST = 0.5  # seconds before the first new attempt to reach NATS ...
RETRY_MAX = 5.0  # ... doubling up to this
STOP_WAIT = 3.0  # seconds `stop` waits for the last messages to leave
ERROR_LOG_INTERVAL = 10.0  # seconds between two log lines of NATS errors

# What the gevent side hears: a message (subject, body), or the link's state (True: up).
Received = Callable[[list[tuple[str, bytes]]], None]
StateChanged = Callable[[bool], None]
T = TypeVar("T")
# A coroutine `run` runs on the NATS loop, given the connected client.
Job = Callable[[Client], Coroutine[Any, Any, T]]


class _HubSelector(selectors.EpollSelector):
    """asyncio's selector, waiting on the gevent hub: its epoll fd is readable while one of
    the fds it watches is ready, so the loop's greenlet waits for that (one io watcher of
    the hub, kept), and the broker's greenlets run meanwhile; then it takes what is ready
    without blocking. `wake` ends a wait early, for work another greenlet gave the loop."""

    def __init__(self, hub: Hub) -> None:
        super().__init__()
        self._hub = hub
        self._readable = hub.loop.io(self.fileno(), 1)  # 1: READ
        self._waiter: Waiter[None] | None = None  # while the loop's greenlet waits

    def wake(self) -> None:
        """From a greenlet of this thread: let the loop run its ready callbacks now."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._hub.loop.run_callback(waiter.switch, None)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout > 0:
            # A fresh waiter per wait: a wake-up that comes late (the fd was ready and a
            # `wake` too) only stores a value in the old one.
            waiter: Waiter[None] = Waiter(self._hub)
            self._waiter = waiter
            self._readable.start(waiter.switch, None)
            timer = None
            if timeout is not None:
                timer = self._hub.loop.timer(timeout)
                timer.start(waiter.switch, None)
            try:
                waiter.get()
            finally:
                self._waiter = None
                self._readable.stop()
                if timer is not None:
                    timer.close()
        return super().select(0)

    def close(self) -> None:
        self._readable.close()
        super().close()


class NatsLink:
    """A NATS connection on an asyncio loop of its own, run on a greenlet; every callback
    it makes (`on_messages`, `on_state`, `run`'s `then`) runs in a callback of the hub."""

    def __init__(
        self,
        config: ClusterConfig,
        name: str,
        subjects: list[str],
        on_messages: Received,
        on_state: StateChanged,
    ) -> None:
        self._config = config
        self._name = name
        self._subjects = subjects
        self._on_messages = on_messages
        self._on_state = on_state
        self._out: deque[tuple[str, bytes]] = deque()
        self._in: deque[tuple[str, bytes] | bool | Callable[[], None]] = deque()
        self._in_due = False
        self._hub_loop = gevent.get_hub().loop
        self._selector: _HubSelector | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._client: Client | None = None
        self._greenlet: gevent.Greenlet[..., None] | None = None
        self._stopping: asyncio.Event | None = None
        self._out_ready: asyncio.Event | None = None  # set: the queue has messages
        self._connected: asyncio.Event | None = None  # set once the client first connects
        self._jobs: set[asyncio.Future[None]] = set()  # `run`'s, until they end
        self._reconnect_waiters: list[asyncio.Future[None]] = []  # `reconnected`'s
        self.max_payload = 1 << 20  # NATS's default; the server's own once connected
        self._errors = 0  # NATS errors not logged yet
        self._error_logged = -ERROR_LOG_INTERVAL  # monotonic time of the last such line

    def start(self) -> None:
        self._selector = _HubSelector(gevent.get_hub())
        aloop = asyncio.SelectorEventLoop(self._selector)
        self._aloop = aloop
        self._stopping = asyncio.Event()
        self._connected = asyncio.Event()
        self._greenlet = gevent.spawn(self._run, aloop)

    def stop(self) -> None:
        """Send what is queued (at most STOP_WAIT seconds), then close the connection; once
        the link has stopped, nothing."""
        greenlet = self._greenlet
        if greenlet is None or greenlet.dead:
            return
        if self._stopping is not None:
            self._call_soon(self._stopping.set)
        greenlet.join(STOP_WAIT + 1)

    def publish(self, subject: str, body: bytes) -> None:
        """Queue one message; it leaves in the order of the calls."""
        self._out.append((subject, body))
        ready = self._out_ready  # None until connected: `_main` sets it then
        if ready is not None and not ready.is_set():
            ready.set()  # the sender's task is woken by the loop's next turn ...
            assert self._selector is not None
            self._selector.wake()  # ... which starts now

    def run(
        self,
        job: Job[T],
        then: Callable[[T | None, BaseException | None], None],
        timeout: float | None,
    ) -> None:
        """Run `job(client)` on the NATS loop, waiting for the first connection if need
        be, and call `then(result, None)` or `then(None, error)` in a callback of the hub; a job
        that takes longer than `timeout` seconds (waiting included; None: no limit) fails
        with TimeoutError."""
        assert self._aloop is not None, "run() before start()"
        self._call_soon(self._start_job, job, then, timeout)

    def post(self, call: Callable[[], None]) -> None:
        """From the NATS loop: run `call` in a callback of the hub (in order with the
        messages)."""
        self._hand_in(call)

    def _call_soon(self, call: Callable[..., object], *args: Any) -> None:
        """From a greenlet of this thread: run `call(*args)` on the NATS loop, in order."""
        assert self._aloop is not None and self._selector is not None
        self._aloop.call_soon(call, *args)
        self._selector.wake()

    # ----- the NATS loop ------------------------------------------------------------------

    def _start_job(
        self,
        job: Job[T],
        then: Callable[[T | None, BaseException | None], None],
        timeout: float | None,
    ) -> None:
        async def attempt() -> T:
            assert self._connected is not None
            await self._connected.wait()
            assert self._client is not None
            return await job(self._client)

        async def run() -> None:
            try:
                result = await asyncio.wait_for(attempt(), timeout)
            except Exception as error:  # every failure goes to `then`, which decides
                self._hand_in(partial(then, None, error))
            else:
                self._hand_in(partial(then, result, None))

        task = asyncio.ensure_future(run())
        self._jobs.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._jobs.discard)

    def _run(self, aloop: asyncio.AbstractEventLoop) -> None:
        try:
            aloop.run_until_complete(self._main())
        finally:
            aloop.close()

    async def _main(self) -> None:
        assert self._stopping is not None
        delay = RETRY_FIRST
        while not self._stopping.is_set():
            try:
                self._client = await nats.connect(**self._options())
                break
            except Exception as error:  # nats-py raises several kinds; all mean "not yet"
                logger.warning(
                    "cluster: cannot reach NATS at %s (%s); retrying in %.1f s. Is nats-server "
                    "running there, and do [cluster] nats, user/token and TLS match it?",
                    ", ".join(self._config.nats),
                    error or type(error).__name__,
                    delay,
                )
                await self._sleep_or_stop(delay)
                delay = min(delay * 2, RETRY_MAX)
        client = self._client
        if client is None:
            return
        self.max_payload = client.max_payload
        for subject in self._subjects:
            await client.subscribe(subject, cb=self._received)
        await client.flush()
        assert self._connected is not None
        self._connected.set()
        self._out_ready = asyncio.Event()
        sender = asyncio.ensure_future(self._sender(client))
        self._out_ready.set()  # what was published while connecting
        self._hand_in(True)
        await self._stopping.wait()
        self._out_ready.set()
        try:
            await asyncio.wait_for(sender, STOP_WAIT)
        except TimeoutError:
            logger.warning("cluster: %d messages to NATS not sent at stop", len(self._out))
        try:
            await asyncio.wait_for(client.drain(), STOP_WAIT)
        except Exception as error:  # closing anyway
            logger.info("cluster: NATS connection closed without draining: %s", error)

    async def _sleep_or_stop(self, delay: float) -> None:
        assert self._stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay)

    def _options(self) -> dict[str, Any]:
        config = self._config
        options: dict[str, Any] = {
            "servers": list(config.nats),
            "name": self._name,
            "connect_timeout": config.connect_timeout,
            "max_reconnect_attempts": -1,  # forever: the peers' timeout says who is gone
            "reconnect_time_wait": RETRY_FIRST,
            "disconnected_cb": self._disconnected,
            "reconnected_cb": self._reconnected,
            "error_cb": self._error,
            "allow_reconnect": True,
        }
        if config.user:
            options["user"], options["password"] = config.user, config.password
        if config.token:
            options["token"] = config.token
        if config.credentials:
            options["user_credentials"] = config.credentials
        if config.uses_tls:
            context = ssl.create_default_context(cafile=config.cafile or None)
            if config.certfile:
                context.load_cert_chain(config.certfile, config.keyfile or None)
            options["tls"] = context
        return options

    async def _disconnected(self) -> None:
        logger.warning("cluster: lost the NATS connection; reconnecting")
        self._hand_in(False)

    async def _reconnected(self) -> None:
        logger.info("cluster: NATS connection back")
        waiters, self._reconnect_waiters = self._reconnect_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._hand_in(True)

    async def reconnected(self) -> None:
        """On the NATS loop (in a job): return once the client has reconnected after a lost
        connection. A JetStream watch does not resume by itself until its heartbeats have
        been missed (about 10 s) when the server lost its consumer (it restarted): a job
        that watches starts its watch again then."""
        assert self._aloop is not None
        waiter = self._aloop.create_future()
        self._reconnect_waiters.append(waiter)
        await waiter

    async def _error(self, error: Exception) -> None:
        """nats-py's errors, among them each failed attempt to (re)connect: the first logged
        with what to check, then one line per ERROR_LOG_INTERVAL with their count."""
        now = time.monotonic()
        self._errors += 1
        if now - self._error_logged < ERROR_LOG_INTERVAL:
            return
        logger.warning(
            "cluster: cannot reach NATS at %s (%s; %d errors since the last line); retrying. "
            "Is nats-server running there, and do [cluster] nats, user/token and TLS match it?",
            ", ".join(self._config.nats),
            error or type(error).__name__,
            self._errors,
        )
        self._errors = 0
        self._error_logged = now

    async def _received(self, msg: Msg) -> None:
        self._hand_in((msg.subject, msg.data))

    async def _sender(self, client: Client) -> None:
        """Publish the queue in order: one task, so a publish that waits for nats-py's
        buffer to drain holds back the ones after it."""
        assert self._out_ready is not None and self._stopping is not None
        out = self._out
        while True:
            await self._out_ready.wait()
            self._out_ready.clear()
            while out:
                subject, body = out.popleft()
                try:
                    await client.publish(subject, body)
                except Exception as error:  # closed or reconnecting with a full buffer
                    logger.warning("cluster: a message to NATS was not sent: %s", error)
            if self._stopping.is_set():
                return

    def _hand_in(self, item: tuple[str, bytes] | bool | Callable[[], None]) -> None:
        self._in.append(item)
        if not self._in_due:
            self._in_due = True
            self._hub_loop.run_callback(self._take_in)

    # ----- the broker's side -------------------------------------------------------------

    def _take_in(self) -> None:
        self._in_due = False
        batch: list[tuple[str, bytes]] = []
        take = self._in.popleft
        while self._in:
            item = take()
            if type(item) is tuple:
                batch.append(item)
                continue
            if batch:
                self._on_messages(batch)
                batch = []
            if isinstance(item, bool):
                self._on_state(item)
            else:
                assert callable(item)
                item()
        if batch:
            self._on_messages(batch)
