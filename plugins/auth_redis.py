"""auth_redis: users and ACL rules in Redis hashes and sets, in EMQX's key layout by default.

    HSET mqtt_user:alice password_hash <hex or bcrypt> salt <salt> is_superuser 0
    HSET mqtt_acl:alice devices/${clientid}/# all news/# subscribe

`auth_cmd` (default `HMGET mqtt_user:${username} password_hash salt is_superuser`) reads a
CONNECT's user: an HMGET of one key and the fields it names, among `password_hash`
(required), `salt`, `is_superuser` and `algorithm` (that user's hash algorithm, overriding
`password_hash_algorithm`); a key without them is an unknown user. `acl_cmd` (default
`HGETALL mqtt_acl:${username}`) reads the rules: an HGETALL of a hash from topic filter to
action (`publish`, `subscribe` or `all`), or an SMEMBERS of a set of topic filters (every
action); all are allow rules, as in EMQX, and placeholders in the filters are replaced
(`plugins.acl_rules`). Keys name `${username}`, `${clientid}` or `${peerhost}`; a key naming
the user name of a client without one is not read. An empty command turns that half off.

The commands run with redis-py (its connection pool, `pool_size` connections, one immediate
retry for a connection the server closed) in the plugin's `Offload` threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from plugins.base import PluginConfigError, PluginContext, parse_options
from plugins.user_store import (
    Identity,
    UserRecord,
    UserStoreOptions,
    UserStorePlugin,
    check_placeholders,
    flag,
    substitute,
)

DEFAULT_AUTH_CMD = "HMGET mqtt_user:${username} password_hash salt is_superuser"
DEFAULT_ACL_CMD = "HGETALL mqtt_acl:${username}"
USER_FIELDS = ("password_hash", "salt", "is_superuser", "algorithm")


@dataclass(frozen=True, slots=True, kw_only=True)
class Config(UserStoreOptions):
    url: str = "redis://127.0.0.1:6379/0"  # redis:// or rediss:// (TLS), credentials allowed
    auth_cmd: str = DEFAULT_AUTH_CMD  # "": no authentication
    acl_cmd: str = DEFAULT_ACL_CMD  # "": no ACL


@dataclass(frozen=True, slots=True)
class Command:
    verb: str  # HMGET, HGETALL or SMEMBERS
    key: str  # with placeholders
    fields: tuple[str, ...]  # HMGET's


def parse_command(text: str, verbs: tuple[str, ...], plugin: str, option: str) -> Command:
    """`text` as a Command whose verb is one of `verbs`; PluginConfigError saying why not."""
    words = text.split()
    verb = words[0].upper() if words else ""
    if verb not in verbs:
        raise PluginConfigError(
            f"plugin {plugin}: option {option!r} must be {' or '.join(verbs)} and a key, "
            f"got {text!r}"
        )
    check_placeholders(text, plugin, option)
    fields = tuple(words[2:])
    if verb == "HMGET":
        unknown = set(fields) - set(USER_FIELDS)
        if len(words) < 3 or "password_hash" not in fields or unknown:
            raise PluginConfigError(
                f"plugin {plugin}: option {option!r}: HMGET a key and fields among "
                f"{', '.join(USER_FIELDS)}, password_hash included; got {text!r}"
            )
    elif len(words) != 2:
        raise PluginConfigError(f"plugin {plugin}: option {option!r}: {verb} takes one key only")
    return Command(verb, words[1], fields)


class RedisStore:
    """The Redis side; called in `Offload` threads (redis-py's pool is thread-safe)."""

    def __init__(self, client: redis.Redis, auth: Command | None, acl: Command | None) -> None:
        self._client = client
        self._auth = auth
        self._acl = acl

    def find_user(self, identity: Identity) -> UserRecord | None:
        command = self._auth
        key = None if command is None else substitute(command.key, identity)
        if command is None or key is None:
            return None
        # redis-py's types cover its asyncio client too; this one answers at once.
        answer = cast(list[str | None], self._client.hmget(key, list(command.fields)))
        values = dict(zip(command.fields, answer, strict=True))
        if all(value is None for value in values.values()):
            return None
        return UserRecord(
            password_hash=values.get("password_hash"),
            salt=values.get("salt") or "",
            superuser=flag(values.get("is_superuser")),
            algorithm=values.get("algorithm"),
        )

    def find_rules(self, identity: Identity) -> list[dict[str, Any]]:
        command = self._acl
        key = None if command is None else substitute(command.key, identity)
        if command is None or key is None:
            return []
        if command.verb == "SMEMBERS":
            grants = {topic: "all" for topic in cast(set[str], self._client.smembers(key))}
        else:
            grants = cast(dict[str, str], self._client.hgetall(key))
        return [
            {"permission": "allow", "action": action, "topic": topic}
            for topic, action in sorted(grants.items())
        ]

    def close(self) -> None:
        self._client.close()


class Plugin(UserStorePlugin):
    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        name = context.plugin_name
        config = parse_options(Config, options, name)
        if not config.auth_cmd and not config.acl_cmd:
            raise PluginConfigError(
                f"plugin {name}: 'auth_cmd' and 'acl_cmd' are both empty (nothing to ask)"
            )
        auth = acl = None
        if config.auth_cmd:
            auth = parse_command(config.auth_cmd, ("HMGET",), name, "auth_cmd")
        if config.acl_cmd:
            acl = parse_command(config.acl_cmd, ("HGETALL", "SMEMBERS"), name, "acl_cmd")
        try:
            client = redis.Redis.from_url(  # connects at the first command
                config.url,
                socket_timeout=config.timeout,
                socket_connect_timeout=config.timeout,
                max_connections=config.pool_size,
                retry=Retry(NoBackoff(), 1),
                decode_responses=True,
                encoding_errors="replace",
            )
        except ValueError as error:
            raise PluginConfigError(f"plugin {name}: option 'url': {error}") from None
        super().__init__(
            name,
            config,
            RedisStore(client, auth, acl),
            authenticates=auth is not None,
            authorises=acl is not None,
        )
