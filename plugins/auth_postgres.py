"""auth_postgres: users and ACL rules in PostgreSQL tables, as EMQX's PostgreSQL backends keep them.

The default queries read EMQX's schema:

    CREATE TABLE mqtt_user (id serial PRIMARY KEY, username text UNIQUE NOT NULL,
                            password_hash text, salt text, is_superuser boolean DEFAULT false);
    CREATE TABLE mqtt_acl (id serial PRIMARY KEY, username text NOT NULL,
                           permission text NOT NULL, action text NOT NULL, topic text NOT NULL);

`auth_query` finds a CONNECT's user: its row's `password_hash` (how it was made:
`plugins.password_hash`), `salt`, `is_superuser` and, if the query selects one, `algorithm`
(that user's hash algorithm, overriding `password_hash_algorithm`: a table can mix
algorithms while users move to a stronger one) are read by column name. `acl_query` gives
the rules of a PUBLISH or SUBSCRIBE, one per row (`permission`, `action`, `topic`, optional
`qos`), applied in the order of the rows (`plugins.user_store` has what each answer means).
A query names the client's `${username}`, `${clientid}` and `${peerhost}`; they are sent as
bound parameters, never spliced into the SQL (a client without a user name: NULL, which
`username = ${username}` matches in no row). An empty query turns that half off.

The queries run with psycopg 3 on a `psycopg_pool` connection pool (`pool_size`
connections, each checked before use so a restarted server costs no failed query), always
in the plugin's `Offload` threads, in autocommit, with a statement timeout of `timeout`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from plugins.base import PluginConfigError, PluginContext, parse_options
from plugins.user_store import (
    PLACEHOLDERS,
    Identity,
    UserRecord,
    UserStoreOptions,
    UserStorePlugin,
    check_placeholders,
    flag,
)

DEFAULT_AUTH_QUERY = (
    "SELECT password_hash, salt, is_superuser FROM mqtt_user WHERE username = ${username} LIMIT 1"
)
DEFAULT_ACL_QUERY = (
    "SELECT permission, action, topic FROM mqtt_acl WHERE username = ${username} ORDER BY id"
)


class _OncePerSecond(logging.Filter):
    """psycopg_pool logs every failed connection attempt (several a second while the server
    is away, from each worker); the plugin's own failure line is already rate-limited, so
    one of psycopg_pool's lines a second is kept, for its reason ("Connection refused")."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -math.inf

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if record.levelno >= logging.ERROR or now - self._last >= 1.0:
            self._last = now
            return True
        return False


logging.getLogger("psycopg.pool").addFilter(_OncePerSecond())


@dataclass(frozen=True, slots=True, kw_only=True)
class Config(UserStoreOptions):
    conninfo: str  # libpq connection string or postgresql:// URL
    auth_query: str = DEFAULT_AUTH_QUERY  # "": no authentication
    acl_query: str = DEFAULT_ACL_QUERY  # "": no ACL


def to_sql(template: str, plugin: str, option: str) -> str:
    """A query with `${name}` placeholders as psycopg's named parameters `%(name)s`."""
    check_placeholders(template, plugin, option)
    text = template.replace("%", "%%")
    for name in PLACEHOLDERS:
        text = text.replace("${" + name + "}", f"%({name})s")
    return text


class PostgresStore:
    """The PostgreSQL side; called in `Offload` threads (the pool is thread-safe)."""

    def __init__(self, name: str, config: Config, auth_sql: str, acl_sql: str) -> None:
        self._auth_sql = auth_sql
        self._acl_sql = acl_sql
        self._pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] = ConnectionPool(
            config.conninfo,
            connection_class=psycopg.Connection[dict[str, Any]],
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": max(2, math.ceil(config.timeout)),  # libpq's minimum: 2
                "options": f"-c statement_timeout={math.ceil(config.timeout * 1000)}",
            },
            min_size=1,
            max_size=config.pool_size,
            open=False,  # on the first query: a plugin built and closed unused connects nowhere
            timeout=config.timeout,
            # Give up reconnecting in the background soon: the next query then starts a
            # new attempt at once, so a server that is back is used without a long backoff.
            reconnect_timeout=config.timeout,
            check=ConnectionPool.check_connection,
            name=name,
        )
        self._lock = threading.Lock()
        self._opened = False

    def find_user(self, identity: Identity) -> UserRecord | None:
        rows = self._query(self._auth_sql, identity)
        if not rows:
            return None
        row = rows[0]
        if "password_hash" not in row:
            raise ValueError("auth_query must select a column named password_hash")
        algorithm = row.get("algorithm")
        return UserRecord(
            password_hash=_text(row["password_hash"]),
            salt=_text(row.get("salt")) or "",
            superuser=flag(row.get("is_superuser")),
            algorithm=None if algorithm is None else str(algorithm),
        )

    def find_rules(self, identity: Identity) -> list[dict[str, Any]]:
        return [_rule(row) for row in self._query(self._acl_sql, identity)]

    def _query(self, sql: str, identity: Identity) -> list[dict[str, Any]]:
        if not self._opened:
            with self._lock:
                if not self._opened:
                    self._pool.open(wait=False)
                    self._opened = True
        parameters = {name: getattr(identity, name) for name in PLACEHOLDERS}
        with self._pool.connection() as connection:
            return connection.execute(sql, parameters).fetchall()

    def close(self) -> None:
        if self._opened:
            self._pool.close(timeout=1.0)


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes | memoryview):  # a bytea column
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _rule(row: dict[str, Any]) -> dict[str, Any]:
    """A row as an EMQX rule: NULL columns left out, a `qos` number as a list."""
    rule = {column: value for column, value in row.items() if value is not None}
    if isinstance(rule.get("qos"), int):
        rule["qos"] = [rule["qos"]]
    return rule


class Plugin(UserStorePlugin):
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        name = context.plugin_name
        config = parse_options(Config, options, name)
        try:
            conninfo_to_dict(config.conninfo)
        except psycopg.ProgrammingError as error:
            raise PluginConfigError(
                f"plugin {name}: option 'conninfo' is not a libpq connection string or URL: {error}"
            ) from None
        if not config.auth_query and not config.acl_query:
            raise PluginConfigError(
                f"plugin {name}: 'auth_query' and 'acl_query' are both empty (nothing to ask)"
            )
        auth_sql = to_sql(config.auth_query, name, "auth_query")
        acl_sql = to_sql(config.acl_query, name, "acl_query")
        super().__init__(
            name,
            config,
            PostgresStore(name, config, auth_sql, acl_sql),
            authenticates=bool(auth_sql),
            authorises=bool(acl_sql),
        )
