"""plugins.auth_postgres and plugins.auth_redis options: every mistake stops the plugin at
start-up with a message naming the option; queries become bound parameters. Building a
plugin connects nowhere (the servers are tested in tests/integration)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from plugins import auth_postgres, auth_redis
from plugins.base import PluginConfigError, PluginContext
from plugins.user_store import flag

CONNINFO = "host=127.0.0.1 port=1 dbname=mqtt user=broker"


def context(tmp_path: Path, name: str) -> PluginContext:
    return PluginContext(tmp_path, "node", 0, name)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option 'conninfo' is required"),
        ({"conninfo": "host=a port"}, "option 'conninfo' is not a libpq connection string"),
        ({"conninfo": CONNINFO, "auth_query": "", "acl_query": ""}, "both empty"),
        (
            {"conninfo": CONNINFO, "auth_query": "SELECT 1 WHERE x = ${user}"},
            "option 'auth_query': unknown placeholder ${user}; known: ${username}",
        ),
        ({"conninfo": CONNINFO, "acl_query": "SELECT ${username"}, "unclosed"),
        (
            {"conninfo": CONNINFO, "password_hash_algorithm": "md5"},
            "password hash algorithm 'md5' is not one of",
        ),
        ({"conninfo": CONNINFO, "pbkdf2_iterations": 0}, "pbkdf2_iterations must be"),
        ({"conninfo": CONNINFO, "on_failure": "allow"}, "option 'on_failure' must be"),
    ],
)
def test_postgres_options_are_checked(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    with pytest.raises(
        PluginConfigError, match="plugin plugins.auth_postgres: .*" + re.escape(message)
    ):
        auth_postgres.Plugin(options, context(tmp_path, "plugins.auth_postgres"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "http://127.0.0.1"}, "option 'url': "),
        ({"auth_cmd": "", "acl_cmd": ""}, "both empty"),
        ({"auth_cmd": "GET mqtt_user:${username}"}, "option 'auth_cmd' must be HMGET and a key"),
        ({"auth_cmd": "HMGET mqtt_user:${username} salt"}, "password_hash included"),
        ({"auth_cmd": "HMGET k password_hash secret"}, "password_hash included"),
        ({"acl_cmd": "HGETALL a b"}, "HGETALL takes one key only"),
        ({"acl_cmd": "LRANGE k 0 -1"}, "must be HGETALL or SMEMBERS"),
        ({"acl_cmd": "HGETALL acl:${client}"}, "unknown placeholder ${client}"),
        ({"salt_position": "middle"}, "salt_position 'middle' is not one of"),
    ],
)
def test_redis_options_are_checked(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    with pytest.raises(
        PluginConfigError, match="plugin plugins.auth_redis: .*" + re.escape(message)
    ):
        auth_redis.Plugin(options, context(tmp_path, "plugins.auth_redis"))


def test_a_query_s_placeholders_become_bound_parameters() -> None:
    sql = auth_postgres.to_sql(
        "SELECT a FROM t WHERE u = ${username} AND c = ${clientid} AND p LIKE '10.%'", "p", "q"
    )
    assert sql == "SELECT a FROM t WHERE u = %(username)s AND c = %(clientid)s AND p LIKE '10.%%'"


def test_a_plugin_built_and_closed_unused_connects_nowhere(tmp_path: Path) -> None:
    before = threading.active_count()
    for plugin in (
        auth_postgres.Plugin({"conninfo": CONNINFO}, context(tmp_path, "plugins.auth_postgres")),
        auth_redis.Plugin({}, context(tmp_path, "plugins.auth_redis")),
    ):
        plugin.close()
    assert threading.active_count() == before


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (1, True),
        ("1", True),
        ("true", True),
        ("T", True),
        (" yes ", True),
        (False, False),
        (0, False),
        ("0", False),
        ("false", False),
        ("", False),
        (None, False),
    ],
)
def test_a_superuser_flag_is_read_as_databases_write_it(value: object, expected: bool) -> None:
    assert flag(value) is expected
