"""ACL plugin reading a Mosquitto `acl_file`: who may publish to and subscribe to what.

File format (Mosquitto's, so existing files work unchanged):

    # comment
    topic [read|write|readwrite|deny] TOPIC    # before any `user` line: anonymous clients
    user NAME                                  # starts NAME's block; its `topic` lines follow
    pattern [read|write|readwrite|deny] TOPIC  # anywhere: every client, %c and %u substituted

The access word may be left out (readwrite). TOPIC is a topic filter and may contain spaces.
`%c` (client id) and `%u` (user name) are substituted only where they form a whole level, as
in recent Mosquitto (`devices/%c/#`, not `dev-%c`); a pattern with `%u` does not apply to a
client without a user name. While pattern lines exist, a client whose id or user name
contains `+` or `#` is denied everything (Mosquitto's guard against widening a pattern).

Decisions (client.authorize):
- PUBLISH needs a `write` or `readwrite` rule matching the topic name; SUBSCRIBE needs a
  `read` or `readwrite` rule that covers the topic filter: the rule must match every topic
  the filter can match. Checked with the router's TopicTrie by matching the filter as if it
  were a name (its `+`/`#` levels taken literally), then rejecting a rule whose `+` stands
  where the filter has `#`: `a/+` is covered by `a/+` and `a/#`, not by `a/b`, and `a/#` not
  by `a/+/#` (which misses `a`).
- `deny` rules win over grants, whichever block they are in. For PUBLISH a deny rule applies
  when it matches the topic; for SUBSCRIBE when it covers the filter (every topic the filter
  matches is denied: `a/b` refuses `a/b`, `a/#` refuses `a/+`), so a wildcard that only
  overlaps a deny rule (`#` beside `deny secret/x`) is granted, as in Mosquitto.
- Reading what such a subscription matches is checked message by message, as Mosquitto's
  `MOSQ_ACL_READ`: client.check_reads answers True for a client with a deny rule in its
  block or its patterns, and the broker then asks client.authorize, as a SUBSCRIBE of the
  topic name, before each message on a new topic reaches it (cached per client and topic
  until the next reload): `secret/x` is denied, every other topic granted by `#`.
- A request that no rule grants or denies is IGNORE: the bus then denies it unless another
  ACL plugin allows it (with only this plugin loaded, that is Mosquitto's default deny).

`reload()` (SIGHUP) re-reads the file; if the new file is bad the old rules stay in force
and the error is logged with the line number.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Flag
from pathlib import Path

from hooks.decisions import Decision
from hooks.events import AuthorizeAction, AuthorizeRequest, CheckReads, ClientInfo
from hooks.hook_bus import HookBus
from hooks.hookpoints import HookPoint
from mqtt.topics import TopicError, validate_topic_filter
from plugins.base import PluginConfigError, PluginContext, parse_options
from router.topic_trie import TopicTrie

logger = logging.getLogger(__name__)

PATTERN_CACHE_SIZE = 4096  # clients whose substituted pattern rules are kept compiled


class AclFileError(ValueError):
    """The ACL file cannot be used; the message names the file and the line."""


class Access(Flag):
    DENY = 0
    READ = 1
    WRITE = 2
    READWRITE = READ | WRITE


_ACCESS_WORDS = {
    "read": Access.READ,
    "write": Access.WRITE,
    "readwrite": Access.READWRITE,
    "deny": Access.DENY,
}


@dataclass(frozen=True, slots=True)
class AclRule:
    access: Access
    topic: str  # a topic filter; for a pattern rule, still with its %c / %u levels
    line: int


def covers(rules: TopicTrie, topic: str) -> bool:
    """True if a filter in `rules` matches every topic name that `topic` matches.

    `topic` is a topic name (PUBLISH) or a topic filter (SUBSCRIBE). The trie matches it as a
    name, so a `+`/`#` level in it is met only by a rule's `+` or `#`; that is exactly
    coverage, except that a rule's `+` also meets the filter's final `#`, which matches more
    than one level (and, after a parent level, none): such a rule does not cover, the one
    exception being `+/#` for `#` (both match every topic not starting with `$`).
    """
    candidates = rules.match(topic)
    if not topic.endswith("#"):
        return bool(candidates)
    hash_index = topic.count("/")
    return any(
        not _has_plus_at(rule, hash_index) or (hash_index == 0 and rule == "+/#")
        for rule in candidates
    )


def _has_plus_at(topic_filter: str, index: int) -> bool:
    levels = topic_filter.split("/")
    return len(levels) > index and levels[index] == "+"


class RuleSet:
    """The rules of one block compiled into one TopicTrie per kind of access."""

    def __init__(self, rules: Iterable[AclRule]) -> None:
        self._deny = TopicTrie()
        self._read = TopicTrie()
        self._write = TopicTrie()
        self.denies = False  # whether any rule denies (the client's reads are then checked)
        for rule in rules:
            if rule.access is Access.DENY:
                self._deny.add(rule.topic)
                self.denies = True
            if Access.READ in rule.access:
                self._read.add(rule.topic)
            if Access.WRITE in rule.access:
                self._write.add(rule.topic)

    def decide(self, action: AuthorizeAction, topic: str) -> Decision:
        if action is AuthorizeAction.PUBLISH:
            if self._deny.match(topic):
                return Decision.DENY
            return Decision.ALLOW if covers(self._write, topic) else Decision.IGNORE
        if covers(self._deny, topic):
            return Decision.DENY
        return Decision.ALLOW if covers(self._read, topic) else Decision.IGNORE


def substitute(topic_filter: str, client_id: str, username: str | None) -> str | None:
    """`topic_filter` with whole `%c` / `%u` levels replaced; None if `%u` and no user name."""
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if level == "%c":
            levels[index] = client_id
        elif level == "%u":
            if username is None:
                return None
            levels[index] = username
    return "/".join(levels)


class AclTable:
    """A parsed ACL file: the anonymous block, one block per user, and the pattern rules."""

    def __init__(
        self,
        anonymous: Iterable[AclRule],
        users: Mapping[str, Iterable[AclRule]],
        patterns: Iterable[AclRule],
    ) -> None:
        self._anonymous = RuleSet(anonymous)
        self._users = {name: RuleSet(rules) for name, rules in users.items()}
        self._patterns = tuple(patterns)
        self._pattern_sets: dict[tuple[str, str | None], RuleSet] = {}

    def decide(self, client: ClientInfo, action: AuthorizeAction, topic: str) -> Decision:
        """DENY if any applicable rule denies, ALLOW if one grants, else IGNORE."""
        own = self._anonymous if client.username is None else self._users.get(client.username)
        decisions = [own.decide(action, topic)] if own is not None else []
        if self._patterns:
            if _has_wildcard(client.client_id) or _has_wildcard(client.username):
                logger.info(
                    "ACL denies %s on %r to client %r (user %r): '+' or '#' in its client id "
                    "or user name would widen the pattern rules",
                    action.value,
                    topic,
                    client.client_id,
                    client.username,
                )
                return Decision.DENY
            decisions.append(self._pattern_set(client).decide(action, topic))
        if Decision.DENY in decisions:
            return Decision.DENY
        return Decision.ALLOW if Decision.ALLOW in decisions else Decision.IGNORE

    def checks_reads(self, client: ClientInfo) -> bool:
        """Whether a deny rule applies to `client` (its own block's or a pattern's): what its
        wildcard subscriptions match is then checked message by message. A client that the
        pattern guard denies everything is checked too."""
        own = self._anonymous if client.username is None else self._users.get(client.username)
        if own is not None and own.denies:
            return True
        if not self._patterns:
            return False
        if _has_wildcard(client.client_id) or _has_wildcard(client.username):
            return True
        return self._pattern_set(client).denies

    def _pattern_set(self, client: ClientInfo) -> RuleSet:
        key = (client.client_id, client.username)
        rules = self._pattern_sets.get(key)
        if rules is None:
            if len(self._pattern_sets) >= PATTERN_CACHE_SIZE:
                self._pattern_sets.clear()
            rules = RuleSet(
                AclRule(rule.access, topic, rule.line)
                for rule in self._patterns
                if (topic := substitute(rule.topic, client.client_id, client.username)) is not None
            )
            self._pattern_sets[key] = rules
        return rules


def _has_wildcard(value: str | None) -> bool:
    return value is not None and ("+" in value or "#" in value)


def parse_acl(text: str, source: str) -> AclTable:
    """Parse the text of an ACL file; errors name `source` and the line number."""
    anonymous: list[AclRule] = []
    users: dict[str, list[AclRule]] = {}
    patterns: list[AclRule] = []
    block = anonymous
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        rest = rest.strip()
        where = f"{source} line {number}"
        if keyword == "user":
            if not rest:
                raise AclFileError(f"{where}: 'user' needs a user name")
            block = users.setdefault(rest, [])
        elif keyword in ("topic", "pattern"):
            rule = _parse_rule(rest, number, where)
            if keyword == "pattern":
                _warn_partial_substitution(rule.topic, where)
                patterns.append(rule)
            else:
                block.append(rule)
        else:
            raise AclFileError(
                f"{where}: unknown keyword {keyword!r}; expected 'topic', 'user' or 'pattern'"
            )
    return AclTable(anonymous, users, patterns)


def _parse_rule(rest: str, number: int, where: str) -> AclRule:
    words = rest.split(None, 1)
    if not words:
        raise AclFileError(f"{where}: missing topic after the keyword")
    if len(words) == 1:
        access, topic = Access.READWRITE, words[0]
    else:
        found = _ACCESS_WORDS.get(words[0])
        if found is None:
            raise AclFileError(
                f"{where}: access {words[0]!r} must be read, write, readwrite or deny"
            )
        access, topic = found, words[1].strip()
    try:
        validate_topic_filter(topic)
    except TopicError as error:
        raise AclFileError(f"{where}: {error}") from error
    return AclRule(access, topic, number)


def _warn_partial_substitution(topic: str, where: str) -> None:
    for level in topic.split("/"):
        if level not in ("%c", "%u") and ("%c" in level or "%u" in level):
            logger.warning(
                "%s: %r is not a whole level, so it is matched literally; write %s as a level "
                "of its own (e.g. devices/%%c/#)",
                where,
                level,
                "%c or %u",
            )


def load_acl_file(path: Path) -> AclTable:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise AclFileError(f"cannot read ACL file {path}: {error}") from error
    return parse_acl(text, str(path))


@dataclass(frozen=True, slots=True)
class Config:
    acl_file: Path  # relative paths are resolved against the broker's configuration directory


class Plugin:
    """Registers on client.authorize and client.check_reads and answers from the ACL file."""

    def __init__(self, options: Mapping[str, object], context: PluginContext) -> None:
        self._name = context.plugin_name or __name__
        config = parse_options(Config, options, self._name)
        self._path = context.resolve(config.acl_file)
        try:
            self._table = load_acl_file(self._path)
        except AclFileError as error:
            raise PluginConfigError(f"plugin {self._name}: option 'acl_file': {error}") from error

    def register(self, bus: HookBus) -> None:
        bus.register(HookPoint.CLIENT_AUTHORIZE, self.authorize, owner=self._name)
        bus.register(HookPoint.CLIENT_CHECK_READS, self.checks_reads, owner=self._name)

    def authorize(self, request: AuthorizeRequest) -> Decision:
        return self._table.decide(request.client, request.action, request.topic)

    def checks_reads(self, request: CheckReads) -> bool:
        return self._table.checks_reads(request.client)

    def reload(self) -> None:
        """Re-read the file; a bad file leaves the rules in force and logs why."""
        try:
            table = load_acl_file(self._path)
        except AclFileError as error:
            logger.error("plugin %s: reload failed, previous rules kept: %s", self._name, error)
            return
        self._table = table
        logger.info("plugin %s: reloaded %s", self._name, self._path)

    def close(self) -> None:
        """Nothing to release: the file is read whole at load and reload."""
