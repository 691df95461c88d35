"""A pykka actor runtime on gevent greenlets, with no greenlet while an actor is idle.

pykka 4 ships only a threading runtime. This module implements its three extension points
(`_create_actor_inbox`, `_create_future`, `_start_actor_loop`) on gevent:

- The inbox is a deque. `put` schedules a *drain* if none is running; the drain handles
  envelopes until the inbox is empty and then ends. An idle actor therefore holds no
  greenlet and no stack: with two actors per MQTT connection that is what keeps idle
  connections cheap (measured in loadtest/, see README).
- Drains run in greenlets of a small pool (`run_soon`): a parked greenlet is switched to
  with the drain to run, and parks again afterwards. Creating a greenlet per drain cost about
  ten times as much as switching to a parked one (15 us against 1.5 us, measured), and a
  connection's CONNECT alone takes four drains.
- A drain yields to the hub every `DRAIN_BATCH` envelopes, so one busy actor cannot starve
  the others (gevent never preempts).
- Futures are gevent `AsyncResult`s, so `ask(...).get()` blocks only the calling greenlet.
  Actors must still never `.get()` another actor's future while handling a message: they
  `tell`, and the other side tells back.

Each envelope is handled exactly as pykka's own loop does (`Actor._handle_receive`, replies,
`on_failure`); that reuse of pykka internals is why pyproject pins pykka's minor version, and
tests/unit/test_runtime.py checks the contract.

No monkey-patching is needed or done: the broker uses gevent's socket, queue and timer APIs
directly, and pykka's registry lock is never contended under gevent.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections import deque
from typing import Any, TypeVar

import gevent
import gevent.event
import greenlet
import pykka
from pykka._envelope import Envelope
from pykka._types import OptExcInfo

from actors.refs import Ref

M = TypeVar("M")  # the message a `tell_if_alive` carries

logger = logging.getLogger(__name__)

DRAIN_BATCH = 256
MAX_PARKED = 256  # idle pool greenlets kept; more are let end (each holds a small stack)
_parked: list[greenlet.greenlet] = []


class _Job:
    """What a pool greenlet is switched to with: anything else is a stray switch."""

    __slots__ = ("function",)

    def __init__(self, function: Any) -> None:
        self.function = function


def run_soon(function: Any) -> None:
    """Run `function()` in a pool greenlet: at once when called from the event loop itself,
    else once the loop gets to it (like `spawn_raw`).

    It may block (switch to the hub) like any greenlet; its exceptions are logged. Called
    from the hub (an io watcher's or a timer's callback: a connection's read, a deadline), the
    pool greenlet is switched to directly, as gevent's own watchers switch to the greenlet
    that waits on them: the callback resumes when `function` finishes or blocks. Deferring it
    to the loop's callback phase instead cost a loop turn per hop (16 us of a 1 -> 1
    message's ~130 us in the broker, measured at 1,000 msg/s).

    Called from a greenlet, the loop's callback picks the pool greenlet when it runs, not
    now: the jobs queued in one loop turn (hundreds in a connect storm) then run one after
    another in the same few greenlets, instead of each holding one of its own until the
    callback phase, which made a new greenlet (and its frame stack, mapped and unmapped)
    for nearly every connection once more than `MAX_PARKED` waited at once.
    """
    hub = gevent.get_hub()
    if greenlet.getcurrent() is hub:
        _switch_to_pool_greenlet(function, hub)
    else:
        hub.loop.run_callback(_switch_to_pool_greenlet, function, hub)


def _switch_to_pool_greenlet(function: Any, hub: Any) -> None:
    worker = _parked.pop() if _parked else greenlet.greenlet(_pool_greenlet, parent=hub)
    worker.switch(_Job(function))


def _pool_greenlet(job: Any) -> None:
    hub = gevent.get_hub()
    while True:
        if type(job) is _Job:
            try:
                job.function()
            except Exception:
                logger.exception("unhandled error in %r", job.function)
        else:  # a switch that was not a job (a stale waiter): ignore it
            logger.debug("pool greenlet switched to with %r: ignored", job)
        if len(_parked) >= MAX_PARKED:
            return
        _parked.append(greenlet.getcurrent())
        job = hub.switch()


class GeventFuture(pykka.Future[Any]):
    """A pykka future backed by `gevent.event.AsyncResult`."""

    def __init__(self) -> None:
        super().__init__()
        self._result: gevent.event.AsyncResult[Any] = gevent.event.AsyncResult()

    def get(self, *, timeout: float | None = None) -> Any:
        try:
            return super().get(timeout=timeout)
        except NotImplementedError:
            pass
        try:
            return self._result.get(timeout=timeout)
        except gevent.Timeout as error:
            raise pykka.Timeout(f"{timeout} seconds") from error

    def set(self, value: Any = None) -> None:
        self._result.set(value)

    def set_exception(self, exc_info: OptExcInfo | None = None) -> None:
        exc_value = (exc_info or sys.exc_info())[1]
        if exc_value is None:
            raise ValueError("set_exception needs an exception: none given or being handled")
        self._result.set_exception(exc_value)


class _StoppedFlag:
    """What pykka needs of `actor_stopped` (`is_set`, `set`), without a threading.Event.

    A threading.Event (a Condition, a lock and a deque) costs ~1 KB per actor; with two
    actors per connection that is memory an idle connection does not need: under gevent
    nothing ever waits on it from another thread.
    """

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True


class _DrainingInbox:
    """The actor inbox: deques plus "is a drain greenlet scheduled" state.

    A message whose class sets `urgent = True` is handled before the ordinary backlog
    (urgent messages keep their order among themselves). The session actor uses it for
    acknowledgements: a PUBACK frees an in-flight slot, and waiting behind thousands of
    queued deliveries would throttle the subscriber to one window per backlog.
    """

    __slots__ = ("_actor", "_draining", "_envelopes", "_urgent")

    def __init__(self, actor: GeventActor) -> None:
        self._actor: GeventActor | None = actor
        # Both deques are created on first use: an idle actor holds none (~0.6 KB each).
        self._envelopes: deque[Envelope[Any]] | None = None
        self._urgent: deque[Envelope[Any]] | None = None
        self._draining = False

    def put(self, envelope: Envelope[Any], /) -> None:
        if self._actor is None:
            return  # stopped (pykka refuses to tell a stopped actor; this is the race)
        if getattr(envelope.message, "urgent", False):
            if self._urgent is None:
                self._urgent = deque()
            self._urgent.append(envelope)
        else:
            if self._envelopes is None:
                self._envelopes = deque()
            self._envelopes.append(envelope)
        if not self._draining and self._actor.actor_loop_started:
            self._draining = True
            run_soon(self._actor._drain)

    def get(self) -> Envelope[Any]:
        if self._urgent:
            return self._urgent.popleft()
        assert self._envelopes is not None
        return self._envelopes.popleft()

    def empty(self) -> bool:
        return not self._envelopes and not self._urgent

    def waiting(self) -> list[Any]:
        """The ordinary (not urgent) messages waiting, in order; for a sender that must
        know whether what it told earlier has been handled yet."""
        return [envelope.message for envelope in self._envelopes or ()]

    def schedule_drain(self) -> None:
        if self._actor is not None and not self._draining:
            self._draining = True
            run_soon(self._actor._drain)

    def drain_finished(self) -> None:
        self._draining = False
        if not self._envelopes:
            self._envelopes = None
        if not self._urgent:
            self._urgent = None


def _urn(inbox: Any) -> str:
    """An actor's URN, from its inbox's identity: unique while the actor lives."""
    return f"urn:gevent-actor:{id(inbox):x}"


class _ActorRef(pykka.ActorRef[Any]):
    """pykka's ActorRef with its fields in slots and the URN made when asked: about 0.1 KB
    less for each of a connection's two actors, the same behaviour."""

    __slots__ = ("_actor_weakref", "actor_class", "actor_inbox", "actor_stopped")

    def __init__(self, actor: GeventActor) -> None:  # pykka's, without copying the URN
        self._actor_weakref = weakref.ref(actor)
        self.actor_class = type(actor)
        self.actor_inbox = actor.actor_inbox
        self.actor_stopped = actor.actor_stopped

    @property
    def actor_urn(self) -> str:  # type: ignore[override]  # pykka declares a plain attribute
        return _urn(self.actor_inbox)


class GeventActor(pykka.Actor):
    """Base class of the broker's actors: pykka semantics, greenlets on demand.

    `start` does not add the actor to pykka's `ActorRegistry`: the registry is a list that
    is scanned linearly on every unregister, and the broker keeps its own dicts (client id
    to session, live connections). Subclasses may override `after_drain`, called when the
    inbox has been emptied, to coalesce work over a burst of messages (e.g. one socket write).
    """

    actor_loop_started = False

    def __init__(self) -> None:
        # pykka.Actor.__init__ would add a uuid4 URN and a threading.Event per actor; these
        # are the same attributes, cheaper (tests/unit/test_runtime.py checks pykka still
        # works with them). The URN is made when asked: nothing asks for it on a hot path,
        # and holding one string per actor is 70 bytes per actor for logs that rarely run.
        self.actor_inbox = _DrainingInbox(self)
        self.actor_stopped = _StoppedFlag()  # type: ignore[assignment]
        self._actor_ref = _ActorRef(self)

    @property
    def actor_urn(self) -> str:  # type: ignore[override]  # pykka declares a plain attribute
        return _urn(self.actor_inbox)

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> Any:
        return cls(*args, **kwargs).launch()

    def launch(self) -> Any:
        """Start this already-built actor; for owners that set it up before it runs."""
        self._start_actor_loop()
        return self.actor_ref

    def after_drain(self) -> None:
        """Called after a burst of envelopes, when the inbox is empty (override to flush)."""

    def _create_actor_inbox(self) -> Any:  # type: ignore[override]
        # Part of pykka's runtime contract; `__init__` above builds the inbox itself.
        return _DrainingInbox(self)

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return GeventFuture()

    def _start_actor_loop(self) -> None:
        self.actor_loop_started = True
        self._needs_setup = True
        # on_start runs in the first drain. An actor without on_start and without mail has
        # nothing to run yet: its first message schedules the drain (and the setup), which
        # spares a greenlet per actor start (two per connection).
        if type(self).on_start is not pykka.Actor.on_start or not self.actor_inbox.empty():
            self.actor_inbox.schedule_drain()  # type: ignore[attr-defined]

    def _drain(self) -> None:
        inbox: _DrainingInbox = self.actor_inbox  # type: ignore[assignment]
        try:
            if self._needs_setup:
                self._needs_setup = False
                self._actor_loop_setup()
            handled = 0
            while not inbox.empty() and not self.actor_stopped.is_set():
                self._handle_envelope(inbox.get())
                handled += 1
                if handled % DRAIN_BATCH == 0:
                    gevent.sleep(0)
            if not self.actor_stopped.is_set():
                self._after_drain_guarded()
            if self.actor_stopped.is_set():
                self._actor_loop_teardown()
                inbox._actor = None  # break the actor <-> inbox cycle: freed without the GC
        finally:
            inbox.drain_finished()
        if not inbox.empty() and not self.actor_stopped.is_set():
            inbox.schedule_drain()  # mail arrived while the last handler yielded

    def _after_drain_guarded(self) -> None:
        """`after_drain`, failing the way a failing message handler does (logged, stopped)."""
        try:
            self.after_drain()
        except Exception:
            self._fail()

    def _handle_envelope(self, envelope: Envelope[Any]) -> None:
        """Handle one envelope the way pykka's `_actor_loop_running` does."""
        try:
            response = self._handle_receive(envelope.message)
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)
        except Exception:
            if envelope.reply_to is not None:
                envelope.reply_to.set_exception()
            else:
                self._fail()
        except BaseException:
            logger.debug("%r in %s: stopping it", sys.exc_info()[1], self)
            self._stop()

    def _stop(self) -> None:
        """Stop at once, as pykka's `_stop` does, without its two steps this runtime has no
        use for: taking the actor out of pykka's registry (`start` never puts it there) and
        a debug line whose text pykka formats for every stop, logged or not. With them a
        stop took 5.3 µs, without them 0.2 µs; a connection's end stops two actors."""
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception:
            self._handle_failure(*sys.exc_info())

    def _fail(self) -> None:
        """The exception being handled stops the actor: logged, then `on_failure` (pykka's way)."""
        self._handle_failure(*sys.exc_info())
        try:
            self.on_failure(*sys.exc_info())
        except Exception:
            self._handle_failure(*sys.exc_info())


def tell_if_alive(ref: Ref[M] | None, message: M) -> bool:
    """Tell `message` to `ref` unless it has stopped; returns whether it was delivered.

    Actors that outlive each other (a session and a client it no longer serves) use this
    instead of `tell`, which raises `ActorDeadError` for a stopped actor.
    """
    if ref is None:
        return False
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        return False
    return True
