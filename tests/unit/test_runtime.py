"""The pykka contract that actors/runtime.py relies on (pykka internals, hence the pinned minor).

Actors run in the test process on gevent greenlets, without monkey-patching: a blocking
`ask(...)` or `future.get()` from the test's main greenlet yields to the hub, which runs
the actors' drain greenlets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import gevent
import pykka
import pytest

from actors import runtime
from actors.runtime import DRAIN_BATCH, GeventActor, GeventFuture, tell_if_alive

DRAINED = "after_drain"
START = "on_start"
STOP = "on_stop"


@dataclass(frozen=True)
class Boom:
    """A message the recorder fails on."""

    text: str


@dataclass(frozen=True)
class Urgent:
    """Handled before queued ordinary messages (the session actor's acknowledgements)."""

    label: str
    urgent = True


@dataclass(frozen=True)
class Nap:
    """Makes the handler sleep, so the caller can time out."""

    seconds: float


class Recorder(GeventActor):
    """Records every lifecycle call and message it handles in a shared list."""

    def __init__(self, events: list[Any]) -> None:
        super().__init__()
        self.events = events

    def on_start(self) -> None:
        self.events.append(START)

    def on_stop(self) -> None:
        self.events.append(STOP)

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.events.append(("on_failure", exception_type, str(exception_value)))

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Boom):
            raise ValueError(message.text)
        if isinstance(message, Nap):
            gevent.sleep(message.seconds)
        self.events.append(message)
        return ("handled", message)

    def after_drain(self) -> None:
        self.events.append(DRAINED)

    def double(self, value: int) -> int:
        return 2 * value


class SlowFlusher(Recorder):
    """Yields in its first `after_drain`, as a flush to a slow socket would."""

    def after_drain(self) -> None:
        first = DRAINED not in self.events
        super().after_drain()
        if first:
            gevent.sleep(0.02)


class FailingFlush(Recorder):
    """Its `after_drain` raises, as a flush to a closed store writer does (StoreError)."""

    def after_drain(self) -> None:
        super().after_drain()
        raise OSError("flush failed")


class FailingStart(Recorder):
    def on_start(self) -> None:
        raise RuntimeError("cannot open resource")


class FailingStop(Recorder):
    def on_stop(self) -> None:
        super().on_stop()
        raise RuntimeError("cannot close resource")


Starter = Callable[[], tuple[pykka.ActorRef[Recorder], list[Any]]]


@pytest.fixture
def start_recorder() -> Iterator[Starter]:
    """Start Recorder actors; whichever are still alive are stopped after the test."""
    refs: list[pykka.ActorRef[Recorder]] = []

    def start() -> tuple[pykka.ActorRef[Recorder], list[Any]]:
        events: list[Any] = []
        ref = Recorder.start(events)
        refs.append(ref)
        return ref, events

    yield start
    for ref in refs:
        if ref.is_alive():
            ref.stop(timeout=1)


def handled(events: list[Any]) -> list[Any]:
    """The messages among the recorded events (lifecycle calls left out)."""
    return [event for event in events if event not in (START, STOP, DRAINED)]


# ----- tell, ask, proxies -----------------------------------------------------------------


def test_ask_returns_the_handlers_value(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    assert ref.ask("ping") == ("handled", "ping")
    assert handled(events) == ["ping"]


def test_tell_is_handled_without_a_reply(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    assert ref.tell("one") is None
    assert handled(events) == []  # nothing runs until the caller yields
    ref.ask("barrier")
    assert handled(events) == ["one", "barrier"]


def test_proxy_method_call_from_outside_an_actor(start_recorder: Starter) -> None:
    ref, _events = start_recorder()
    future = ref.proxy().double(21)
    assert isinstance(future, GeventFuture)
    assert future.get(timeout=1) == 42


def test_a_ref_names_its_actor_by_one_urn_and_keeps_no_strong_hold_on_it(
    start_recorder: Starter,
) -> None:
    first, _events = start_recorder()
    second, _events = start_recorder()
    assert isinstance(first, pykka.ActorRef)
    assert first.actor_class is Recorder
    assert first.actor_urn.startswith("urn:gevent-actor:")
    assert first.actor_urn != second.actor_urn
    actor = first._actor_weakref()
    assert actor is not None and actor.actor_urn == first.actor_urn
    assert first.actor_urn in str(first) and str(first) == str(actor)
    del actor
    first.stop(timeout=1)
    gevent.sleep(0)
    assert first._actor_weakref() is None  # a stopped actor is not kept alive by its refs


def test_ask_reraises_the_handlers_exception_and_the_actor_keeps_running(
    start_recorder: Starter,
) -> None:
    ref, events = start_recorder()
    with pytest.raises(ValueError, match="bad request"):
        ref.ask(Boom("bad request"))
    assert ref.is_alive()
    assert ref.ask("after") == ("handled", "after")
    assert not [event for event in events if isinstance(event, tuple) and event[0] == "on_failure"]


def test_ask_block_false_returns_a_future(start_recorder: Starter) -> None:
    ref, _events = start_recorder()
    future = ref.ask("later", block=False)
    assert isinstance(future, GeventFuture)
    assert future.get(timeout=1) == ("handled", "later")
    assert future.get(timeout=1) == ("handled", "later")  # a value can be read again


# ----- lifecycle --------------------------------------------------------------------------


def test_on_start_runs_before_the_first_message(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    ref.tell("first")
    ref.ask("second")
    assert events[:3] == [START, "first", "second"]


def test_messages_told_before_launch_wait_for_on_start() -> None:
    events: list[Any] = []
    actor = Recorder(events)
    actor.actor_ref.tell("early")  # the owner may wire an actor up before it runs
    gevent.sleep(0)
    assert events == []
    ref = actor.launch()
    try:
        ref.ask("late")
        assert events[:3] == [START, "early", "late"]
    finally:
        ref.stop()


def test_a_failing_on_start_stops_the_actor_and_fails_pending_asks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[Any] = []
    with caplog.at_level(logging.ERROR, logger="pykka"):
        ref = FailingStart.start(events)
        pending = ref.ask("queued before start ran", block=False)
        with pytest.raises(pykka.ActorDeadError):
            pending.get(timeout=1)
    assert not ref.is_alive()
    assert events == []
    assert any(
        record.exc_info is not None and record.exc_info[0] is RuntimeError
        for record in caplog.records
    )


def test_stop_runs_on_stop_and_the_actor_is_no_longer_alive(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    ref.ask("work")
    assert ref.is_alive()
    assert ref.stop() is True
    assert not ref.is_alive()
    assert events[-1] == STOP
    assert events.count(STOP) == 1
    assert ref.stop() is False  # already dead


def test_a_failing_on_stop_is_logged_and_the_actor_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[Any] = []
    ref = FailingStop.start(events)
    ref.ask("work")
    with caplog.at_level(logging.ERROR, logger="pykka"):
        assert ref.stop() is True
    assert not ref.is_alive()
    assert events[-1] == STOP
    assert [
        record.exc_info[0]
        for record in caplog.records
        if record.levelno == logging.ERROR and record.exc_info is not None
    ] == [RuntimeError]


def test_messages_told_before_stop_are_handled_first(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    ref.tell("a")
    ref.tell("b")
    ref.stop()
    assert handled(events) == ["a", "b"]
    assert events[-1] == STOP


def test_ask_sent_after_stop_was_requested_gets_actor_dead_error(start_recorder: Starter) -> None:
    ref, _events = start_recorder()
    stopping = ref.stop(block=False)
    late = ref.ask("late", block=False)  # still alive: the stop is not handled yet
    assert stopping.get(timeout=1) is True
    with pytest.raises(pykka.ActorDeadError):
        late.get(timeout=1)


def test_tell_to_a_stopped_actor_raises_actor_dead_error(start_recorder: Starter) -> None:
    ref, _events = start_recorder()
    ref.stop()
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("too late")
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("too late", timeout=1)


def test_tell_if_alive_delivers_to_a_live_actor_only(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    assert tell_if_alive(ref, "hello") is True
    ref.ask("barrier")
    assert handled(events) == ["hello", "barrier"]
    ref.stop()
    assert tell_if_alive(ref, "goodbye") is False
    assert tell_if_alive(None, "nobody") is False
    assert "goodbye" not in events


def test_a_failing_tell_stops_the_actor_logs_and_calls_on_failure(
    start_recorder: Starter, caplog: pytest.LogCaptureFixture
) -> None:
    ref, events = start_recorder()
    with caplog.at_level(logging.ERROR, logger="pykka"):
        ref.tell(Boom("handler broke"))
        ref.tell("never handled")
        gevent.sleep(0.01)
    assert not ref.is_alive()
    assert ("on_failure", ValueError, "handler broke") in events
    assert "never handled" not in events
    assert STOP not in events  # pykka: on_failure replaces on_stop
    assert DRAINED not in events
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "Unhandled exception" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert errors[0].exc_info[0] is ValueError
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("after failure")


def test_a_failing_after_drain_is_handled_like_a_failing_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[Any] = []
    with caplog.at_level(logging.ERROR):
        ref = FailingFlush.start(events)
        ref.tell("work")
        gevent.sleep(0.01)
    try:
        assert ("on_failure", OSError, "flush failed") in events
        assert any(
            record.exc_info is not None and record.exc_info[0] is OSError
            for record in caplog.records
        )
        assert not ref.is_alive()
    finally:
        if ref.is_alive():
            ref.stop(timeout=1)


# ----- order, urgency, bursts -------------------------------------------------------------


def test_messages_are_handled_in_the_order_told(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    for number in range(50):
        ref.tell(number)
    ref.ask("end")
    assert handled(events) == [*range(50), "end"]


def test_urgent_messages_overtake_queued_ordinary_ones_in_their_own_order(
    start_recorder: Starter,
) -> None:
    ref, events = start_recorder()
    ref.ask("started")
    events.clear()
    ref.tell("a")
    ref.tell(Urgent("u1"))
    ref.tell("b")
    ref.tell(Urgent("u2"))
    ref.tell("c")
    ref.ask("end")
    assert handled(events) == [Urgent("u1"), Urgent("u2"), "a", "b", "c", "end"]


def test_after_drain_runs_once_after_a_burst(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    ref.ask("started")
    events.clear()
    for number in range(100):
        ref.tell(number)
    gevent.sleep(0.01)
    assert events == [*range(100), DRAINED]


def test_after_drain_runs_once_per_burst(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    ref.ask("started")
    events.clear()
    ref.tell("x1")
    ref.tell("x2")
    gevent.sleep(0.01)
    ref.tell("y1")
    gevent.sleep(0.01)
    assert events == ["x1", "x2", DRAINED, "y1", DRAINED]


def test_mail_arriving_while_after_drain_yields_is_handled() -> None:
    events: list[Any] = []
    ref = SlowFlusher.start(events)
    try:
        ref.tell("first")
        gevent.sleep(0.001)  # the drain is now inside its first after_drain
        assert events == [START, "first", DRAINED]
        ref.tell("second")  # a drain is still running: no new one is spawned
        gevent.sleep(0.05)
        assert events == [START, "first", DRAINED, "second", DRAINED]
    finally:
        ref.stop()


def test_a_busy_actor_yields_every_drain_batch(start_recorder: Starter) -> None:
    ref, events = start_recorder()
    ref.ask("started")
    events.clear()
    total = 2 * DRAIN_BATCH + 10
    seen_by_other_greenlet: list[int] = []

    def observe() -> None:
        while len(handled(events)) < total:
            seen_by_other_greenlet.append(len(handled(events)))
            gevent.sleep(0)

    for number in range(total):
        ref.tell(number)
    observer = gevent.spawn(observe)
    observer.join(timeout=5)
    observer.kill()
    assert handled(events) == list(range(total))
    # The observer ran between batches, never in the middle of one.
    assert seen_by_other_greenlet == [DRAIN_BATCH, 2 * DRAIN_BATCH]
    assert events.count(DRAINED) == 1


def test_drain_batch_is_read_at_run_time(
    start_recorder: Starter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "DRAIN_BATCH", 3)
    ref, events = start_recorder()
    ref.ask("started")
    events.clear()
    seen: list[int] = []

    def observe() -> None:
        while len(handled(events)) < 7:
            seen.append(len(handled(events)))
            gevent.sleep(0)

    for number in range(7):
        ref.tell(number)
    observer = gevent.spawn(observe)
    observer.join(timeout=5)
    observer.kill()
    assert handled(events) == list(range(7))
    assert seen == [3, 6]


def test_a_tell_from_the_event_loop_is_handled_before_the_callback_returns(
    start_recorder: Starter,
) -> None:
    # A connection's read callback runs in the hub; its tell starts the client actor's drain
    # at once instead of a loop turn later (runtime.run_soon).
    ref, events = start_recorder()
    ref.ask("started")
    events.clear()
    seen_after_tell: list[list[Any]] = []

    def read_callback() -> None:
        ref.tell("from the loop")
        seen_after_tell.append(list(events))

    gevent.get_hub().loop.run_callback(read_callback)
    gevent.sleep(0.01)
    assert seen_after_tell == [["from the loop", DRAINED]]


def test_a_handler_started_from_the_event_loop_may_block(start_recorder: Starter) -> None:
    # The hub's callback resumes when the handler blocks; the handler finishes later.
    ref, events = start_recorder()
    ref.ask("started")
    events.clear()
    seen_after_tell: list[list[Any]] = []

    def read_callback() -> None:
        ref.tell(Nap(0.01))
        ref.tell("next")  # queued behind the nap: a drain is running
        seen_after_tell.append(list(events))

    gevent.get_hub().loop.run_callback(read_callback)
    gevent.sleep(0.05)
    assert seen_after_tell == [[]]
    assert events == [Nap(0.01), "next", DRAINED]


# ----- memory hygiene ---------------------------------------------------------------------


def test_an_idle_inbox_holds_no_deque(start_recorder: Starter) -> None:
    ref, _events = start_recorder()
    ref.tell("ordinary")
    ref.tell(Urgent("urgent"))
    ref.ask("barrier")
    inbox = ref.actor_inbox
    assert isinstance(inbox, runtime._DrainingInbox)
    assert inbox.empty()
    assert inbox._envelopes is None
    assert inbox._urgent is None


def test_actors_are_not_added_to_pykkas_registry(start_recorder: Starter) -> None:
    before = len(pykka.ActorRegistry.get_all())
    refs = [start_recorder()[0] for _ in range(10)]
    for ref in refs:
        ref.ask("barrier")
    assert len(pykka.ActorRegistry.get_all()) == before
    assert not pykka.ActorRegistry.get_by_class(Recorder)


def test_the_stopped_flag_is_not_a_threading_event(start_recorder: Starter) -> None:
    ref, _events = start_recorder()
    assert isinstance(ref.actor_stopped, runtime._StoppedFlag)
    assert not ref.actor_stopped.is_set()
    ref.stop()
    assert ref.actor_stopped.is_set()


# ----- futures ----------------------------------------------------------------------------


def test_future_get_times_out_with_pykka_timeout() -> None:
    future = GeventFuture()
    with pytest.raises(pykka.Timeout):
        future.get(timeout=0.01)


def test_ask_times_out_while_the_handler_is_busy(start_recorder: Starter) -> None:
    ref, _events = start_recorder()
    with pytest.raises(pykka.Timeout):
        ref.ask(Nap(0.05), timeout=0.01)
    assert ref.ask("after the nap", timeout=1) == ("handled", "after the nap")


def test_future_carries_a_value_or_an_exception() -> None:
    answered = GeventFuture()
    answered.set(7)
    assert answered.get(timeout=0) == 7
    failed = GeventFuture()
    try:
        raise KeyError("missing")
    except KeyError:
        failed.set_exception()
    with pytest.raises(KeyError, match="missing"):
        failed.get(timeout=0)


def test_future_map_uses_pykkas_get_hook() -> None:
    future = GeventFuture()
    mapped = future.map(lambda value: value + 1)
    future.set(1)
    assert mapped.get(timeout=1) == 2


def test_waiting_lists_the_ordinary_messages_not_handled_yet(start_recorder: Starter) -> None:
    # Told from a greenlet, the drain runs later: the client actor reads a session's
    # waiting messages this way to know whether what it told before was handled.
    ref, events = start_recorder()
    ref.ask("first")  # started, idle
    ref.tell("a")
    ref.tell(Urgent("u"))
    ref.tell("b")
    assert ref.actor_inbox.waiting() == ["a", "b"]
    ref.ask("sync")
    assert ref.actor_inbox.waiting() == []
    assert handled(events)[-4:] == [Urgent("u"), "a", "b", "sync"]
