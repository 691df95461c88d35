"""HookBus: ordering, Stop, folds, decisions, message.publish, exception isolation."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.decisions import (
    AUTH_ALLOWED,
    AUTH_BAD_CREDENTIALS,
    AUTH_NOT_AUTHORIZED,
    DROP,
    AuthFailure,
    AuthResult,
    Decision,
    Stop,
)
from hooks.events import (
    AuthenticateRequest,
    AuthorizeAction,
    AuthorizeRequest,
    ClientInfo,
    Message,
    SessionEvent,
)
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt import ConnAck, encode

POINT = HookPoint.SESSION_CREATED


def client(username: str | None = "alice") -> ClientInfo:
    return ClientInfo(
        client_id="c1",
        username=username,
        peer="127.0.0.1:5000",
        protocol_version=4,
        clean_start=True,
        keepalive=60,
    )


def auth_request(username: str | None = "alice") -> AuthenticateRequest:
    return AuthenticateRequest(client=client(username), password=b"pw")


def acl_request() -> AuthorizeRequest:
    return AuthorizeRequest(client=client(), action=AuthorizeAction.PUBLISH, topic="a/b", qos=0)


def recorder(calls: list[str], name: str, result: Any = None) -> Any:
    def callback(*_args: Any) -> Any:
        calls.append(name)
        return result

    return callback


def boom(*_args: Any) -> Any:
    raise RuntimeError("plugin bug")


# -- registration and ordering ----------------------------------------------------------


def test_higher_priority_runs_first_and_ties_keep_registration_order() -> None:
    bus = HookBus()
    calls: list[str] = []
    bus.register(POINT, recorder(calls, "low"), priority=-5, owner="p1")
    bus.register(POINT, recorder(calls, "first0"), owner="p2")
    bus.register(POINT, recorder(calls, "high"), priority=10, owner="p3")
    bus.register(POINT, recorder(calls, "second0"), owner="p4")
    bus.run(POINT, SessionEvent(client_id="c1"))
    assert calls == ["high", "first0", "second0", "low"]
    assert bus.owners(POINT) == ["p3", "p2", "p4", "p1"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=-3, max_value=3), max_size=12))
def test_run_order_is_a_stable_sort_by_descending_priority(priorities: list[int]) -> None:
    bus = HookBus()
    calls: list[str] = []
    for index, priority in enumerate(priorities):
        bus.register(POINT, recorder(calls, str(index)), priority=priority)
    bus.run(POINT, SessionEvent(client_id="c1"))
    expected = sorted(range(len(priorities)), key=lambda i: -priorities[i])
    assert calls == [str(i) for i in expected]


def test_has_is_true_only_while_a_callback_is_registered() -> None:
    bus = HookBus()
    assert not bus.has(POINT)
    bus.register(POINT, recorder([], "x"), owner="p")
    assert bus.has(POINT)
    assert not bus.has(HookPoint.MESSAGE_PUBLISH)
    bus.unregister("p")
    assert not bus.has(POINT)


def test_unregister_removes_only_that_owners_callbacks() -> None:
    bus = HookBus()
    calls: list[str] = []
    bus.register(POINT, recorder(calls, "a"), owner="plugin.a")
    bus.register(POINT, recorder(calls, "b"), owner="plugin.b")
    bus.register(HookPoint.CLIENT_CONNECTED, recorder(calls, "a2"), owner="plugin.a")
    bus.unregister("plugin.a")
    bus.run(POINT, SessionEvent(client_id="c1"))
    assert calls == ["b"]
    assert not bus.has(HookPoint.CLIENT_CONNECTED)


@pytest.mark.parametrize(
    ("point", "callback", "priority"),
    [("session.created", print, 0), (POINT, "not callable", 0), (POINT, print, 1.5)],
)
def test_register_rejects_a_string_point_a_non_callable_or_a_float_priority(
    point: Any, callback: Any, priority: Any
) -> None:
    with pytest.raises(TypeError):
        HookBus().register(point, callback, priority=priority)


def test_a_callback_may_register_another_while_its_chain_runs() -> None:
    bus = HookBus()
    calls: list[str] = []

    def adds_one(_event: object) -> None:
        calls.append("adder")
        bus.register(POINT, recorder(calls, "late"))

    bus.register(POINT, adds_one)
    bus.run(POINT, SessionEvent(client_id="c1"))
    assert calls == ["adder"]  # the running chain is a snapshot
    bus.run(POINT, SessionEvent(client_id="c1"))
    assert calls == ["adder", "adder", "late"]


# -- run and run_fold ------------------------------------------------------------------


def test_run_stops_at_a_callback_returning_stop() -> None:
    bus = HookBus()
    calls: list[str] = []
    bus.register(POINT, recorder(calls, "one"), priority=2)
    bus.register(POINT, recorder(calls, "two", Stop()), priority=1)
    bus.register(POINT, recorder(calls, "three"))
    bus.run(POINT, SessionEvent(client_id="c1"))
    assert calls == ["one", "two"]


def test_run_fold_threads_the_accumulator_in_priority_order() -> None:
    bus = HookBus()
    bus.register(POINT, lambda _e, acc: [*acc, "low"], priority=0)
    bus.register(POINT, lambda _e, acc: [*acc, "high"], priority=1)
    assert bus.run_fold(POINT, object(), []) == ["high", "low"]


def test_run_fold_without_callbacks_returns_the_initial_accumulator() -> None:
    initial = object()
    assert HookBus().run_fold(POINT, object(), initial) is initial


def test_run_fold_stop_value_is_the_result_and_later_callbacks_do_not_run() -> None:
    bus = HookBus()
    calls: list[str] = []
    bus.register(POINT, lambda _e, acc: Stop(acc + 100), priority=1)
    bus.register(POINT, recorder(calls, "later", 0))
    assert bus.run_fold(POINT, object(), 1) == 101
    assert calls == []


# -- exception isolation ---------------------------------------------------------------


def test_a_raising_callback_is_logged_with_its_owner_and_the_chain_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = HookBus()
    calls: list[str] = []
    bus.register(POINT, boom, priority=1, owner="plugins.broken")
    bus.register(POINT, recorder(calls, "after"))
    with caplog.at_level(logging.ERROR, logger="hooks.hook_bus"):
        bus.run(POINT, SessionEvent(client_id="c1"))
    assert calls == ["after"]
    [record] = caplog.records
    assert "plugins.broken" in record.getMessage()
    assert "session.created" in record.getMessage()
    assert record.exc_info is not None


def test_a_raising_fold_callback_leaves_the_accumulator_unchanged() -> None:
    bus = HookBus()
    bus.register(POINT, boom, priority=1)
    bus.register(POINT, lambda _e, acc: acc * 2)
    assert bus.run_fold(POINT, object(), 21) == 42


def test_base_exceptions_are_not_swallowed() -> None:
    bus = HookBus()

    def interrupt(_event: object) -> None:
        raise KeyboardInterrupt

    bus.register(POINT, interrupt)
    with pytest.raises(KeyboardInterrupt):
        bus.run(POINT, SessionEvent(client_id="c1"))


# -- authenticate ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allow_anonymous", "username", "expected"),
    [
        (True, None, AUTH_ALLOWED),
        (True, "alice", AUTH_ALLOWED),
        (False, None, AUTH_NOT_AUTHORIZED),
        (False, "alice", AUTH_BAD_CREDENTIALS),
    ],
)
def test_authenticate_without_callbacks_follows_allow_anonymous(
    allow_anonymous: bool, username: str | None, expected: AuthResult
) -> None:
    bus = HookBus(allow_anonymous=allow_anonymous)
    assert bus.authenticate(auth_request(username)) == expected


def test_authenticate_all_ignore_falls_back_to_allow_anonymous() -> None:
    for allow, expected in ((True, AUTH_ALLOWED), (False, AUTH_BAD_CREDENTIALS)):
        bus = HookBus(allow_anonymous=allow)
        bus.register(HookPoint.CLIENT_AUTHENTICATE, lambda _r: Decision.IGNORE)
        assert bus.authenticate(auth_request()) == expected


def test_authenticate_first_non_ignore_wins() -> None:
    bus = HookBus(allow_anonymous=True)
    calls: list[str] = []
    bus.register(
        HookPoint.CLIENT_AUTHENTICATE, recorder(calls, "ignore", Decision.IGNORE), priority=3
    )
    bus.register(HookPoint.CLIENT_AUTHENTICATE, recorder(calls, "deny", Decision.DENY), priority=2)
    bus.register(
        HookPoint.CLIENT_AUTHENTICATE, recorder(calls, "allow", Decision.ALLOW), priority=1
    )
    assert bus.authenticate(auth_request("alice")) == AUTH_BAD_CREDENTIALS
    assert bus.authenticate(auth_request(None)) == AUTH_NOT_AUTHORIZED
    assert calls == ["ignore", "deny", "ignore", "deny"]


def test_authenticate_passes_an_auth_result_through() -> None:
    bus = HookBus(allow_anonymous=True)
    bus.register(HookPoint.CLIENT_AUTHENTICATE, lambda _r: AUTH_NOT_AUTHORIZED)
    assert bus.authenticate(auth_request("alice")) == AUTH_NOT_AUTHORIZED


def test_authenticate_treats_a_raising_or_misbehaving_callback_as_ignore(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = HookBus(allow_anonymous=False)
    bus.register(HookPoint.CLIENT_AUTHENTICATE, boom, priority=2, owner="plugins.boom")
    bus.register(HookPoint.CLIENT_AUTHENTICATE, lambda _r: True, priority=1, owner="plugins.bool")
    with caplog.at_level(logging.ERROR, logger="hooks.hook_bus"):
        assert bus.authenticate(auth_request()) == AUTH_BAD_CREDENTIALS
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "plugins.boom" in messages[0]
    assert "plugins.bool" in messages[1] and "returned True" in messages[1]


@pytest.mark.parametrize(
    ("failure", "reason_code", "return_code_v311"),
    [
        (AuthFailure.BAD_CREDENTIALS, 0x86, 0x04),  # 3.1.1 section 3.2.2.3: table 3.1
        (AuthFailure.NOT_AUTHORIZED, 0x87, 0x05),
    ],
)
def test_auth_failure_connack_codes_in_5_0_and_3_1_1(
    failure: AuthFailure, reason_code: int, return_code_v311: int
) -> None:
    assert failure.connack_v5 == reason_code
    connack = ConnAck(session_present=False, reason_code=failure.connack_v5)
    assert encode(connack, 5)[3] == reason_code
    assert encode(connack, 4)[3] == return_code_v311
    assert encode(connack, 3)[3] == return_code_v311


def test_auth_result_consistency() -> None:
    with pytest.raises(ValueError):
        AuthResult(allowed=False)
    with pytest.raises(ValueError):
        AuthResult(allowed=True, reason=AuthFailure.NOT_AUTHORIZED)


# -- authorize -------------------------------------------------------------------------


def test_authorize_without_callbacks_allows() -> None:
    assert HookBus().authorize(acl_request()) is True


def test_authorize_with_only_ignoring_callbacks_denies() -> None:
    bus = HookBus()
    bus.register(HookPoint.CLIENT_AUTHORIZE, lambda _r: Decision.IGNORE)
    assert bus.authorize(acl_request()) is False


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (Decision.IGNORE, Decision.ALLOW, True),
        (Decision.DENY, Decision.ALLOW, False),
        (Decision.ALLOW, Decision.DENY, True),
    ],
)
def test_authorize_first_non_ignore_wins(first: Decision, second: Decision, expected: bool) -> None:
    bus = HookBus()
    bus.register(HookPoint.CLIENT_AUTHORIZE, lambda _r: first, priority=1)
    bus.register(HookPoint.CLIENT_AUTHORIZE, lambda _r: second)
    assert bus.authorize(acl_request()) is expected


def test_authorize_a_raising_callback_does_not_grant() -> None:
    bus = HookBus()
    bus.register(HookPoint.CLIENT_AUTHORIZE, boom)
    assert bus.authorize(acl_request()) is False


# -- message.publish -------------------------------------------------------------------


def message(topic: str = "a/b") -> Message:
    return Message(topic=topic, payload=b"x", publisher="c1")


def test_publish_without_callbacks_returns_the_same_object() -> None:
    original = message()
    assert HookBus().publish(original) is original


def test_publish_chains_replacements_in_priority_order() -> None:
    bus = HookBus()
    seen: list[str] = []

    def rewrite(msg: Message) -> Message:
        seen.append(msg.topic)
        return dataclasses.replace(msg, topic="rewritten/" + msg.topic)

    def observe(msg: Message) -> None:
        seen.append(msg.topic)

    bus.register(HookPoint.MESSAGE_PUBLISH, rewrite, priority=1)
    bus.register(HookPoint.MESSAGE_PUBLISH, observe)
    result = bus.publish(message("a/b"))
    assert result is not None
    assert result.topic == "rewritten/a/b"
    assert seen == ["a/b", "rewritten/a/b"]


def test_publish_drop_returns_none_and_skips_the_rest() -> None:
    bus = HookBus()
    calls: list[str] = []
    bus.register(HookPoint.MESSAGE_PUBLISH, recorder(calls, "dropper", DROP), priority=1)
    bus.register(HookPoint.MESSAGE_PUBLISH, recorder(calls, "later"))
    assert bus.publish(message()) is None
    assert calls == ["dropper"]


def test_publish_stop_with_a_message_skips_the_rest() -> None:
    bus = HookBus()
    calls: list[str] = []
    replaced = message("other")
    bus.register(HookPoint.MESSAGE_PUBLISH, lambda _m: Stop(replaced), priority=1)
    bus.register(HookPoint.MESSAGE_PUBLISH, recorder(calls, "later", DROP))
    assert bus.publish(message()) is replaced
    assert calls == []


def test_publish_a_raising_or_misbehaving_callback_passes_the_message_through() -> None:
    bus = HookBus()
    original = message()
    bus.register(HookPoint.MESSAGE_PUBLISH, boom, priority=1)
    bus.register(HookPoint.MESSAGE_PUBLISH, lambda _m: "not a message")
    assert bus.publish(original) is original
