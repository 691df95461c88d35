"""SCRAM-SHA-256 with paho-mqtt: `plugins.auth_scram.paho_client.ScramPahoClient` against a
real broker running `plugins.auth_scram`, over real sockets.

The paho client connects and verifies the broker's server-final before `on_connect`;
wrong passwords and unknown users see CONNACK 0x86; each connection attempt uses a new
nonce; re-authentication keeps the connection, or (after the user's password changed on the
broker and SIGHUP) ends it with DISCONNECT 0x87. A broker entry with the right StoredKey but
the wrong ServerKey (someone who can check proofs but does not hold the user's keys) makes
the client distrust the broker's success, at CONNECT (no `on_connect`) and at
re-authentication: `on_scram_result` gets the ScramError, the client sends DISCONNECT and
does not reconnect.
"""

from __future__ import annotations

import os
import queue
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from plugins.auth_scram.paho_client import ScramPahoClient
from plugins.auth_scram.scram import ScramCredential, ScramError, make_credential
from tests.support.broker_config import running_broker, wait_for_log, wait_for_log_lines
from tests.support.broker_process import BrokerProcess
from tests.support.clients import unique

PASSWORD = "correct horse battery staple"
ROTATING = "rotating"  # tests change this user's entry, then SIGHUP the broker
DOUBTED = "dave"  # ... and this one's
CREDENTIALS = {
    "alice": make_credential(PASSWORD.encode()),
    ROTATING: make_credential(b"before the rotation"),
    DOUBTED: make_credential(PASSWORD.encode()),
}
IMPOSTOR_TARGET = "carol"  # the broker's entry has her StoredKey but a random ServerKey


def without_server_key(credential: ScramCredential) -> ScramCredential:
    """What someone holds who can check the user's proofs (StoredKey) but not prove that
    they hold the user's keys (ServerKey is random)."""
    return ScramCredential(
        credential.salt, credential.iterations, credential.stored_key, os.urandom(32)
    )


def write_credentials(path: Path, changes: dict[str, ScramCredential]) -> None:
    entries = CREDENTIALS | {IMPOSTOR_TARGET: without_server_key(CREDENTIALS["alice"])} | changes
    temporary = path.with_suffix(".new")
    temporary.write_text("".join(f"{user}:{cred.encode()}\n" for user, cred in entries.items()))
    temporary.replace(path)


def reload_credentials(
    broker: BrokerProcess, path: Path, workers: int, changes: dict[str, ScramCredential]
) -> None:
    """Rewrite the file with `changes`, SIGHUP, and wait until every worker re-read it."""
    already = broker.log().count(f"reloaded {path}")
    write_credentials(path, changes)
    broker.process.send_signal(signal.SIGHUP)
    wait_for_log_lines(broker, f"reloaded {path}", already + workers)


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Path:
    return tmp_path_factory.mktemp(f"scram-paho-{workers}") / "scram-users"


@pytest.fixture(scope="module")
def broker(credentials: Path) -> Iterator[BrokerProcess]:
    write_credentials(credentials, {})
    config = (
        '[store]\nkind = "memory"\n[auth]\nallow_anonymous = false\n'
        '[[plugins]]\nmodule = "plugins.auth_scram"\ncredentials_file = "scram-users"\n'
    )
    with running_broker(credentials.parent, config) as process:
        yield process


class Session:
    """A ScramPahoClient on its own network thread; every callback becomes an event on
    `events`: ("scram", error), ("connect", reason), ("disconnect", reason), ("message", m)."""

    def __init__(self, broker: BrokerProcess, user: str, password: str) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.client = ScramPahoClient(user, password, unique("scram-paho"))
        self.client.on_scram_result = lambda _c, _u, error: self.events.put(("scram", error))
        self.client.on_connect = lambda _c, _u, _f, reason, _p: self.events.put(("connect", reason))
        self.client.on_disconnect = lambda _c, _u, _f, reason, _p: self.events.put(
            ("disconnect", reason)
        )
        self.client.on_message = lambda _c, _u, message: self.events.put(("message", message))
        self.client.on_log = lambda _c, _u, _level, line: self.log.append(line)
        self.log: list[str] = []
        self.client.connect(broker.host, broker.port, keepalive=30)
        self.client.loop_start()

    def next(self, timeout: float = 5.0) -> tuple[str, Any]:
        return self.events.get(timeout=timeout)

    def expect_connected(self) -> None:
        """The server-final verified, then CONNACK 0x00 reached on_connect (in that order)."""
        assert self.next() == ("scram", None)
        kind, reason = self.next()
        assert (kind, reason.value) == ("connect", 0x00), reason
        assert self.client.scram_error is None

    def round_trip(self, topic: str, payload: bytes) -> None:
        """Subscribe to `topic` and publish to it at QoS 1: the broker delivers it back."""
        self.client.subscribe(topic, 1)
        self.client.publish(topic, payload, qos=1).wait_for_publish(5)
        kind, message = self.next()
        assert kind == "message", (kind, message)
        assert (message.topic, message.payload) == (topic, payload)

    def sent_client_firsts(self) -> list[str]:
        """The Authentication Data of every CONNECT paho logged sending."""
        return [
            line.split("AuthenticationData : ")[1] for line in self.log if "Sending CONNECT" in line
        ]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


OpenSession = Callable[[str, str], Session]


@pytest.fixture
def open_session(broker: BrokerProcess) -> Iterator[OpenSession]:
    """Sessions against `broker` (user, password), closed at the end of the test."""
    opened: list[Session] = []

    def open_one(user: str, password: str) -> Session:
        session = Session(broker, user, password)
        opened.append(session)
        return session

    yield open_one
    for session in opened:
        session.close()


def test_right_password_connects_verifies_the_broker_and_carries_messages(
    broker: BrokerProcess, open_session: OpenSession
) -> None:
    session = open_session("alice", PASSWORD)
    session.expect_connected()
    wait_for_log(broker, "authenticated as 'alice' (SCRAM-SHA-256)")
    session.round_trip(unique("scram/topic"), b"through the broker")


@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", "wrong horse"), ("mallory", PASSWORD)],
    ids=["wrong-password", "unknown-user"],
)
def test_refusal_is_connack_0x86_in_on_connect(
    open_session: OpenSession, user: str, password: str
) -> None:
    session = open_session(user, password)
    kind, reason = session.next()
    assert (kind, reason.value, str(reason)) == ("connect", 0x86, "Bad user name or password")
    assert not session.client.is_connected()
    assert session.client.scram_error is None  # the broker refused; nothing to distrust


def test_each_connection_attempt_uses_a_new_nonce(open_session: OpenSession) -> None:
    session = open_session("alice", PASSWORD)
    session.expect_connected()
    session.client.disconnect()
    session.client.loop_stop()
    assert session.next()[0] == "disconnect"
    session.client.reconnect()
    session.client.loop_start()
    session.expect_connected()
    first, second = session.sent_client_firsts()
    assert first.startswith("b'n,,n=alice,r=") and second.startswith("b'n,,n=alice,r="), (
        first,
        second,
    )
    assert first != second
    session.round_trip(unique("scram/again"), b"after the reconnect")


def test_reauthentication_succeeds_and_the_connection_carries_on(open_session: OpenSession) -> None:
    session = open_session("alice", PASSWORD)
    session.expect_connected()
    topic = unique("scram/reauth")
    session.round_trip(topic, b"before")
    assert session.client.reauthenticate() == 0
    assert session.next() == ("scram", None)  # AUTH 0x00 with a server-final that verified
    session.round_trip(unique("scram/reauth"), b"after")
    assert session.client.is_connected()


def test_reauthentication_after_a_password_change_is_disconnect_0x87(
    broker: BrokerProcess, credentials: Path, workers: int, open_session: OpenSession
) -> None:
    session = open_session(ROTATING, "before the rotation")
    session.expect_connected()
    reload_credentials(
        broker, credentials, workers, {ROTATING: make_credential(b"after the rotation")}
    )
    assert session.client.reauthenticate() == 0
    kind, reason = session.next()
    assert (kind, reason.value) == ("disconnect", 0x87), (kind, reason)
    assert session.client.scram_error is None  # the broker refused; nothing to distrust


def test_reauthentication_with_a_broker_without_the_server_key_is_not_trusted(
    broker: BrokerProcess, credentials: Path, workers: int, open_session: OpenSession
) -> None:
    session = open_session(DOUBTED, PASSWORD)
    session.expect_connected()
    reload_credentials(
        broker, credentials, workers, {DOUBTED: without_server_key(CREDENTIALS[DOUBTED])}
    )
    assert session.client.reauthenticate() == 0
    kind, error = session.next()  # the broker's AUTH 0x00 carries a server-final that fails
    assert kind == "scram" and isinstance(error, ScramError), (kind, error)
    assert session.client.scram_error is error
    kind, reason = session.next()  # after our DISCONNECT, which paho reports as 0x00
    assert (kind, reason.value) == ("disconnect", 0x00), (kind, reason)
    with pytest.raises(queue.Empty):
        session.next(timeout=1.5)  # no reconnect
    assert not session.client.is_connected()


def test_a_broker_without_the_server_key_is_not_trusted(
    broker: BrokerProcess, open_session: OpenSession, caplog: pytest.LogCaptureFixture
) -> None:
    # The broker's entry for carol checks her proof (right StoredKey), so it answers
    # CONNACK 0x00, but its server-final is signed with the wrong ServerKey.
    session = open_session(IMPOSTOR_TARGET, PASSWORD)
    kind, error = session.next()
    assert kind == "scram" and isinstance(error, ScramError), (kind, error)
    assert session.client.scram_error is error
    kind, reason = session.next()  # on_connect was never called
    assert (kind, reason.value) == ("disconnect", 0x00), (kind, reason)
    with pytest.raises(queue.Empty):
        session.next(timeout=1.5)  # and no reconnect
    assert not session.client.is_connected()
    wait_for_log(broker, f"authenticated as {IMPOSTOR_TARGET!r}")  # the broker did accept
    assert "does not trust the broker, disconnecting: server-final does not prove" in caplog.text
