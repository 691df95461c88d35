"""plugins.offload: blocking calls run in real threads while the gevent loop goes on; the
timeout, the bound on waiting calls, the failure policy and its rate-limited log."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import gevent
import pytest

from core.backend_figures import figures_for
from hooks.decisions import AUTH_SERVER_UNAVAILABLE, AuthFailure, Decision
from mqtt.encoder import encode
from mqtt.packets import ConnAck
from mqtt.reason_codes import ReasonCode
from plugins.base import PluginConfigError
from plugins.offload import (
    BackendBusyError,
    BackendFailedError,
    BackendTimeoutError,
    Offload,
    OffloadOptions,
)


def offload(name: str, **options: object) -> Offload:
    return Offload(name, OffloadOptions(**options))  # type: ignore[arg-type]


def test_a_blocking_call_answers_while_the_loop_goes_on() -> None:
    backend = offload("test.offload.answers", pool_size=2)
    ticks: list[float] = []

    def ticker() -> None:
        for _ in range(20):
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    ticking = gevent.spawn(ticker)
    caller = gevent.spawn(backend.call, lambda: (time.sleep(0.3), "answer")[1])
    assert caller.get(timeout=5) == "answer"
    ticking.join(timeout=5)
    # time.sleep(0.3) in the loop would have stopped the ticker for 0.3 s.
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    assert len(ticks) == 20 and max(gaps) < 0.2
    figures = figures_for("test.offload.answers")
    assert figures.calls == 1 and figures.errors == 0 and sum(figures.latency.counts) == 1
    assert backend.outstanding == 0
    backend.close()


def test_a_call_that_raises_is_a_backend_failure_with_its_cause() -> None:
    backend = offload("test.offload.raises")

    def refused() -> None:
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(BackendFailedError, match="connection refused") as caught:
        gevent.spawn(backend.call, refused).get(timeout=5)
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)
    assert figures_for("test.offload.raises").errors == 1
    backend.close()


def test_a_slow_call_times_out_and_holds_its_slot_until_its_thread_ends() -> None:
    backend = offload("test.offload.slow", timeout=0.1, pool_size=1, max_waiting=1)
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(BackendTimeoutError, match=r"within 0\.1 s"):
        gevent.spawn(backend.call, release.wait, 10).get(timeout=5)
    assert time.monotonic() - started < 2
    assert backend.outstanding == 1  # the thread still runs: it counts against max_waiting
    with pytest.raises(BackendBusyError, match="max_waiting = 1"):
        gevent.spawn(backend.call, lambda: None).get(timeout=5)
    release.set()
    deadline = time.monotonic() + 5
    while backend.outstanding and time.monotonic() < deadline:
        gevent.sleep(0.01)
    assert backend.outstanding == 0
    assert gevent.spawn(backend.call, lambda: 7).get(timeout=5) == 7
    figures = figures_for("test.offload.slow")
    assert (figures.timeouts, figures.busy) == (1, 1)
    backend.close()


def test_beyond_max_waiting_calls_are_refused_at_once() -> None:
    backend = offload("test.offload.bound", pool_size=1, max_waiting=2, timeout=10)
    release = threading.Event()
    waiting = [gevent.spawn(backend.call, release.wait, 10) for _ in range(2)]
    gevent.sleep(0.05)
    assert backend.outstanding == 2
    started = time.monotonic()
    with pytest.raises(BackendBusyError):
        gevent.spawn(backend.call, lambda: None).get(timeout=5)
    assert time.monotonic() - started < 0.5
    release.set()
    assert [greenlet.get(timeout=5) for greenlet in waiting] == [True, True]
    backend.close()


def test_the_failure_policy_answers_deny_or_ignore() -> None:
    failure = BackendTimeoutError("no answer")
    deny = offload("test.offload.deny")
    assert deny.auth_failure(failure) is AUTH_SERVER_UNAVAILABLE
    assert deny.acl_failure(failure) is Decision.DENY
    ignore = offload("test.offload.ignore", on_failure="ignore")
    assert ignore.auth_failure(failure) is Decision.IGNORE
    assert ignore.acl_failure(failure) is Decision.IGNORE


def test_server_unavailable_is_connack_0x88_and_return_code_3() -> None:
    assert AuthFailure.SERVER_UNAVAILABLE.connack_v5 == ReasonCode.SERVER_UNAVAILABLE == 0x88
    reason = AuthFailure.SERVER_UNAVAILABLE.connack_v5
    assert encode(ConnAck(reason_code=reason), 4) == b"\x20\x02\x00\x03"
    assert encode(ConnAck(reason_code=reason), 5)[3] == 0x88


def test_failures_are_logged_at_most_once_per_second(caplog: pytest.LogCaptureFixture) -> None:
    backend = offload("test.offload.log")
    with caplog.at_level(logging.WARNING, logger="plugins.offload"):
        for _ in range(50):
            backend.auth_failure(BackendBusyError("busy now"))
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1
    assert "busy now" in lines[0] and "on_failure = 'deny'" in lines[0]


def test_calling_from_the_event_loop_itself_is_refused() -> None:
    backend = offload("test.offload.hub")
    outcome: list[BaseException] = []

    def from_the_hub() -> None:
        try:
            backend.call(lambda: None)
        except RuntimeError as error:
            outcome.append(error)

    gevent.get_hub().loop.run_callback(from_the_hub)
    gevent.sleep(0.01)
    assert len(outcome) == 1 and "from a greenlet" in str(outcome[0])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0.0}, "'timeout' must be > 0"),
        ({"pool_size": 0}, "'pool_size' must be at least 1"),
        ({"pool_size": 8, "max_waiting": 4}, "'max_waiting' \\(4\\) must be at least"),
        ({"on_failure": "allow"}, "'on_failure' must be \"deny\" or \"ignore\", got 'allow'"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(PluginConfigError, match=message):
        offload("test.offload.options", **options)
