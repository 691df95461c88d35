"""plugins.auth_redis against a real Redis (`redis-server` on loopback, started by the test:
tests/support/redis_server.py), clients over real sockets.

Users in EMQX's `mqtt_user:<name>` hashes (with an `algorithm` field, so SHA-256, PBKDF2 and
bcrypt users live side by side: tests/support/user_stores.py), rules in `mqtt_acl:<name>`
hashes (topic filter -> action) or, configured so, in a set of topic filters. CONNACK codes:
3.1.1 section 3.2.2.3, 5.0 section 3.2.2.2.
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
from tests.support.redis_server import RedisServer
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

RULES = {  # mqtt_acl:sha-user
    "users/${username}/#": "all",
    "devices/${clientid}/#": "all",
    "eq news/#": "subscribe",
    "feeds/in": "publish",
}
AUTH_CMD = "HMGET mqtt_user:${username} password_hash salt is_superuser algorithm"


def seed(server: RedisServer) -> None:
    client = server.client()
    for user in stored_users():
        fields = {
            "password_hash": user.password_hash,
            "salt": user.salt,
            "is_superuser": "1" if user.superuser else "0",
        }
        if user.algorithm is not None:
            fields["algorithm"] = user.algorithm
        client.hset(f"mqtt_user:{user.name}", mapping=fields)
    client.hset("mqtt_acl:sha-user", mapping=RULES)
    client.sadd("mqtt_topics:sha-user", "sets/${username}/#", "sets/shared")
    client.close()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        server.start()
        seed(server)
        yield server
    finally:
        server.remove()


def plugin_config(server: RedisServer, extra: str = "", anonymous: bool = False) -> str:
    # Refused CONNECTs are answered at once (no [overload] auth_failure_delay): the test
    # makes many from one address.
    return (
        '[store]\nkind = "memory"\n[overload]\nauth_failure_delay = 0.0\n'
        f"[auth]\nallow_anonymous = {str(anonymous).lower()}\n"
        f'[[plugins]]\nmodule = "plugins.auth_redis"\nurl = "{server.url}"\n'
        f"timeout = 1.0\n{extra}"
    )


@pytest.fixture(scope="module")
def redis_broker(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory, workers: int
) -> Iterator[BrokerProcess]:
    extra = f'auth_cmd = "{AUTH_CMD}"\npbkdf2_iterations = {PBKDF2_ITERATIONS}\n'
    config = plugin_config(redis_server, extra)
    with running_broker(tmp_path_factory.mktemp("auth-redis"), config) as broker:
        yield broker


@pytest.mark.parametrize("version", [4, 5])
def test_users_of_each_hash_algorithm_log_in_and_wrong_passwords_do_not(
    redis_broker: BrokerProcess, version: int
) -> None:
    for user in ("sha-user", "pbkdf2-user", "bcrypt-user", "root"):
        assert connack(redis_broker, version, user, f"pw-{user}") == 0, user
        assert connack(redis_broker, version, user, "wrong") == BAD_CREDENTIALS[version], user
    # Unknown: ignored, and nothing else allows it ([auth] allow_anonymous = false).
    assert connack(redis_broker, version, "nobody-here", "x") == BAD_CREDENTIALS[version]
    assert connack(redis_broker, version, None, "x") == NOT_AUTHORIZED[version]  # found by no query


def test_a_hash_no_password_can_match_is_refused_and_logged(redis_broker: BrokerProcess) -> None:
    assert connack(redis_broker, 4, "broken", "pw-broken") == BAD_CREDENTIALS[4]
    assert "user 'broken' cannot log in: the stored sha256 hash is not hexadecimal" in (
        redis_broker.log()
    )


def test_acl_hash_with_placeholders(redis_broker: BrokerProcess) -> None:
    client_id = unique("acl")
    client = login(redis_broker, "sha-user", client_id)
    suback = subscribe_raw(
        client,
        1,
        ("users/sha-user/#", 0),
        (f"devices/{client_id}/#", 0),
        ("devices/someone-else/#", 0),
        ("news/#", 0),  # eq: this filter itself
        ("news/today", 0),
        ("feeds/in", 0),  # publish only
    )
    assert list(suback.reason_codes) == [0, 0, 0x80, 0, 0x80, 0x80]
    client.send(Publish("users/other-user/x", b"denied", qos=0))
    client.send(Publish("users/sha-user/notes", b"allowed", qos=0))
    client.send(Publish(f"devices/{client_id}/state", b"mine", qos=0))
    assert expect_publish(client).payload == b"allowed"
    assert expect_publish(client).payload == b"mine"
    client.expect_nothing(within=0.3)
    client.close()


def test_a_superuser_may_do_anything(redis_broker: BrokerProcess) -> None:
    client = connect_raw(redis_broker, unique("root"), username="root", password=b"pw-root")
    assert list(subscribe_raw(client, 1, ("#", 0)).reason_codes) == [0]
    topic = f"anything/{unique('t')}"
    client.send(Publish(topic, b"mine", qos=0))
    assert expect_publish(client).payload == b"mine"
    client.close()


def test_acl_from_a_set_of_topic_filters(redis_server: RedisServer, tmp_path: Path) -> None:
    config = plugin_config(redis_server, 'acl_cmd = "SMEMBERS mqtt_topics:${username}"\n')
    with running_broker(tmp_path, config) as broker:
        client = login(broker, "sha-user")
        suback = subscribe_raw(client, 1, ("sets/sha-user/#", 0), ("sets/shared", 0), ("x", 0))
        assert list(suback.reason_codes) == [0, 0, 0x80]
        client.send(Publish("sets/shared", b"both ways", qos=0))
        assert expect_publish(client).payload == b"both ways"
        client.close()


def test_redis_stopped_then_back(redis_server: RedisServer, tmp_path: Path, workers: int) -> None:
    """With the default (EMQX) commands: while Redis is down, new CONNECTs are refused with
    Server unavailable (or let through under `on_failure = "ignore"` and allow_anonymous);
    a client whose answers are cached keeps publishing on the same worker; once Redis is
    back (and its data put back: the test's server keeps nothing), CONNECTs are allowed."""
    (tmp_path / "deny").mkdir()
    (tmp_path / "ignore").mkdir()
    refusing = running_broker(tmp_path / "deny", plugin_config(redis_server))
    ignoring = running_broker(
        tmp_path / "ignore",
        plugin_config(redis_server, 'on_failure = "ignore"\n', anonymous=True),
    )
    with refusing as deny_broker, ignoring as ignore_broker:
        traffic = Traffic(deny_broker, "sha-user")
        redis_server.stop()
        try:
            for version in (4, 5):
                started = time.monotonic()
                code = connack(deny_broker, version, "sha-user", "pw-sha-user")
                assert code == SERVER_UNAVAILABLE[version]
                assert time.monotonic() - started < 3.0  # timeout = 1.0, plus the connect
            assert connack(ignore_broker, 4, "sha-user", "wrong") == 0  # let through
            time.sleep(0.5)  # the cached client's traffic goes on meanwhile
        finally:
            latencies = traffic.stop()
            redis_server.start()
            seed(redis_server)
        assert len(latencies) >= 15, "the cached client stopped publishing"
        assert max(latencies) < 0.5, f"a round trip took {max(latencies):.2f} s"
        assert "on_failure = 'deny'" in deny_broker.log()
        assert "on_failure = 'ignore'" in ignore_broker.log()
        await_backend_on_every_worker(deny_broker, workers, "sha-user", seconds=15)
        assert wrong_password_codes(deny_broker, workers, 5, "sha-user") == {BAD_CREDENTIALS[5]}
