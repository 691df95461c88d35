"""plugins.auth_postgres against a real PostgreSQL (a private cluster made by the test with
`initdb`, tests/support/postgres.py), clients over real sockets.

The tables are EMQX's, with an `algorithm` column so users hashed with salted SHA-256,
PBKDF2 and bcrypt live side by side (tests/support/user_stores.py). CONNACK codes: 3.1.1
section 3.2.2.3, 5.0 section 3.2.2.2; a database that cannot answer is 0x88 Server
unavailable (3.1.1: 3) under `on_failure = "deny"`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqtt.packets import Publish
from tests.support.broker_config import running_broker
from tests.support.broker_process import BrokerProcess
from tests.support.clients import connect_raw, expect_publish, subscribe_raw, unique
from tests.support.postgres import PostgresServer
from tests.support.user_stores import (
    BAD_CREDENTIALS,
    NOT_AUTHORIZED,
    PBKDF2_ITERATIONS,
    SERVER_UNAVAILABLE,
    Traffic,
    await_backend_on_every_worker,
    connack,
    login,
    stored_users,
    wrong_password_codes,
)

SCHEMA = """
CREATE TABLE mqtt_user (id serial PRIMARY KEY, username text UNIQUE NOT NULL,
                        password_hash text, salt text, is_superuser boolean DEFAULT false,
                        algorithm text);
CREATE TABLE mqtt_acl (id serial PRIMARY KEY, username text NOT NULL, permission text NOT NULL,
                       action text NOT NULL, topic text NOT NULL, qos smallint);
"""
RULES = [  # for sha-user, in this order (the default acl_query orders by id)
    ("deny", "publish", "users/${username}/secret"),
    ("allow", "all", "users/${username}/#"),
    ("allow", "all", "devices/${clientid}/#"),
    ("allow", "subscribe", "eq news/#"),
]
ACL_QUERY = (
    "SELECT permission, action, topic, qos FROM mqtt_acl WHERE username = ${username} ORDER BY id"
)
AUTH_QUERY = (
    "SELECT password_hash, salt, is_superuser, algorithm FROM mqtt_user "
    "WHERE username = ${username}"
)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        server.execute(SCHEMA)
        for user in stored_users():
            server.execute(
                "INSERT INTO mqtt_user (username, password_hash, salt, is_superuser, algorithm) "
                "VALUES (%s, %s, %s, %s, %s)",
                user.name,
                user.password_hash,
                user.salt,
                user.superuser,
                user.algorithm,
            )
        for permission, action, topic in RULES:
            server.execute(
                "INSERT INTO mqtt_acl (username, permission, action, topic) "
                "VALUES ('sha-user', %s, %s, %s)",
                permission,
                action,
                topic,
            )
        server.execute(
            "INSERT INTO mqtt_acl (username, permission, action, topic, qos) "
            "VALUES ('pbkdf2-user', 'allow', 'publish', 'qos/limited', 1)"
        )
        yield server
    finally:
        server.remove()


def plugin_config(postgres: PostgresServer, extra: str = "", anonymous: bool = False) -> str:
    # Refused CONNECTs are answered at once (no [overload] auth_failure_delay): the test
    # makes many from one address.
    return (
        '[store]\nkind = "memory"\n[overload]\nauth_failure_delay = 0.0\n'
        f"[auth]\nallow_anonymous = {str(anonymous).lower()}\n"
        f'[[plugins]]\nmodule = "plugins.auth_postgres"\nconninfo = "{postgres.conninfo}"\n'
        f"timeout = 1.0\n{extra}"
    )


@pytest.fixture(scope="module")
def pg_broker(
    postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory, workers: int
) -> Iterator[BrokerProcess]:
    extra = (
        f'auth_query = "{AUTH_QUERY}"\nacl_query = "{ACL_QUERY}"\n'
        f"pbkdf2_iterations = {PBKDF2_ITERATIONS}\n"
    )
    with running_broker(tmp_path_factory.mktemp("auth-pg"), plugin_config(postgres, extra)) as b:
        yield b


@pytest.mark.parametrize("version", [4, 5])
def test_users_of_each_hash_algorithm_log_in_and_wrong_passwords_do_not(
    pg_broker: BrokerProcess, version: int
) -> None:
    for user in ("sha-user", "pbkdf2-user", "bcrypt-user", "root"):
        assert connack(pg_broker, version, user, f"pw-{user}") == 0, user
        assert connack(pg_broker, version, user, "wrong") == BAD_CREDENTIALS[version], user
    # Unknown: ignored, and nothing else allows it ([auth] allow_anonymous = false).
    assert connack(pg_broker, version, "nobody-here", "x") == BAD_CREDENTIALS[version]
    assert connack(pg_broker, version, None, "x") == NOT_AUTHORIZED[version]  # found by no query


def test_a_hash_no_password_can_match_is_refused_and_logged(pg_broker: BrokerProcess) -> None:
    assert connack(pg_broker, 4, "broken", "pw-broken") == BAD_CREDENTIALS[4]
    assert (
        "user 'broken' cannot log in: the stored sha256 hash is not hexadecimal; fix the "
        "user's row" in pg_broker.log()
    )


def test_acl_rules_with_placeholders_decide_in_order(pg_broker: BrokerProcess) -> None:
    client_id = unique("acl")
    client = login(pg_broker, "sha-user", client_id)
    suback = subscribe_raw(
        client,
        1,
        ("users/sha-user/#", 0),
        (f"devices/{client_id}/#", 0),
        ("devices/someone-else/#", 0),
        ("users/other-user/#", 0),
        ("news/#", 0),  # eq: this filter itself
        ("news/today", 0),
    )
    assert list(suback.reason_codes) == [0, 0, 0x80, 0x80, 0, 0x80]
    client.send(Publish("users/sha-user/secret", b"denied", qos=0))  # the deny row comes first
    client.send(Publish("users/sha-user/notes", b"allowed", qos=0))
    client.send(Publish(f"devices/{client_id}/state", b"mine", qos=0))
    assert expect_publish(client).payload == b"allowed"
    assert expect_publish(client).payload == b"mine"
    client.expect_nothing(within=0.3)
    client.close()


def test_a_qos_column_limits_a_rule(pg_broker: BrokerProcess) -> None:
    watcher = connect_raw(pg_broker, unique("watch"), username="root", password=b"pw-root")
    subscribe_raw(watcher, 1, ("qos/limited", 1))
    client = login(pg_broker, "pbkdf2-user")
    client.send(Publish("qos/limited", b"qos0", qos=0))
    client.send(Publish("qos/limited", b"qos1", qos=1, packet_id=1))
    client.expect()  # PUBACK
    assert expect_publish(watcher).payload == b"qos1"
    watcher.expect_nothing(within=0.3)
    client.close()
    watcher.close()


def test_a_superuser_may_do_anything(pg_broker: BrokerProcess) -> None:
    client = connect_raw(pg_broker, unique("root"), username="root", password=b"pw-root")
    assert list(subscribe_raw(client, 1, ("#", 0)).reason_codes) == [0]
    topic = f"anything/{unique('t')}"
    client.send(Publish(topic, b"mine", qos=0))
    assert expect_publish(client).payload == b"mine"
    client.close()


def test_a_database_stopped_then_back(
    postgres: PostgresServer, tmp_path: Path, workers: int
) -> None:
    """With the default (EMQX) queries: while PostgreSQL is down, new CONNECTs wait
    `timeout` and are refused with Server unavailable (or let through under
    `on_failure = "ignore"` and allow_anonymous); a client whose answers are cached keeps
    publishing on the same worker; once it is back, CONNECTs are allowed again."""
    refusing = running_broker(tmp_path / "deny", plugin_config(postgres))
    ignoring = running_broker(
        tmp_path / "ignore", plugin_config(postgres, 'on_failure = "ignore"\n', anonymous=True)
    )
    (tmp_path / "deny").mkdir()
    (tmp_path / "ignore").mkdir()
    with refusing as deny_broker, ignoring as ignore_broker:
        traffic = Traffic(deny_broker, "sha-user")
        postgres.stop()
        try:
            for version in (4, 5):
                started = time.monotonic()
                code = connack(deny_broker, version, "sha-user", "pw-sha-user")
                assert code == SERVER_UNAVAILABLE[version]
                assert time.monotonic() - started < 3.0  # timeout = 1.0, plus the connect
            assert connack(ignore_broker, 4, "sha-user", "wrong") == 0  # let through
        finally:
            latencies = traffic.stop()
            postgres.start()
        assert len(latencies) >= 20, "the cached client stopped publishing"
        assert max(latencies) < 0.5, f"a round trip took {max(latencies):.2f} s"
        assert "on_failure = 'deny'" in deny_broker.log()
        assert "on_failure = 'ignore'" in ignore_broker.log()
        await_backend_on_every_worker(deny_broker, workers, "sha-user", seconds=15)
        assert wrong_password_codes(deny_broker, workers, 5, "sha-user") == {BAD_CREDENTIALS[5]}
