"""ACL rules in EMQX's shape, shared by the plugins whose rules come from a token or a database.

A rule is `{"permission": "allow" | "deny", "action": "publish" | "subscribe" | "all",
"topic": "devices/${clientid}/#", "qos": [0, 1]}` (`qos` optional): `${clientid}` and
`${username}` in the topic are replaced by the client's (a rule naming `${username}` never
applies to a client without one), and a topic `eq t/#` is that filter literally rather than
what it matches. A PUBLISH matches a rule whose filter matches its topic; a SUBSCRIBE one
whose filter covers the whole requested filter (as `plugins.acl_file`). The plugin applies
the first rule that matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hooks.events import AuthorizeRequest
from mqtt.topics import TopicError, validate_topic_filter
from plugins.acl_file import covers
from router.topic_trie import TopicTrie

ACTIONS = {"publish": ("publish",), "subscribe": ("subscribe",), "all": ("publish", "subscribe")}


@dataclass(frozen=True, slots=True)
class Rule:
    allow: bool
    actions: tuple[str, ...]  # "publish", "subscribe"
    topic: str  # a filter, placeholders replaced
    exact: bool  # `eq`: the filter itself, not what it matches
    qos: tuple[int, ...] | None

    def decides(self, request: AuthorizeRequest) -> bool:
        if request.action.value not in self.actions:
            return False
        if self.qos is not None and request.qos not in self.qos:
            return False
        if self.exact:
            return request.topic == self.topic
        trie = TopicTrie()
        trie.add(self.topic)
        return covers(trie, request.topic)


def parse_rule(entry: Any, client_id: str, username: str | None, source: str) -> Rule | None:
    """The rule `entry` for this client, None if it names `${username}` and the client has
    none; ValueError starting with `source` (where the rule came from) and saying what is
    wrong with it."""
    if not isinstance(entry, dict) or set(entry) - {"permission", "action", "topic", "qos"}:
        raise ValueError(
            f"{source}: rule {entry!r}: expected permission, action, topic and optional qos"
        )
    permission, action, topic = entry.get("permission"), entry.get("action"), entry.get("topic")
    qos = entry.get("qos")
    if permission not in ("allow", "deny") or action not in ACTIONS or not isinstance(topic, str):
        raise ValueError(f"{source}: rule {entry!r}: bad permission, action or topic")
    if qos is not None and not (isinstance(qos, list) and all(q in (0, 1, 2) for q in qos)):
        raise ValueError(f"{source}: rule {entry!r}: qos must be a list of 0, 1, 2")
    exact = topic.startswith("eq ")
    if exact:
        topic = topic[3:]
    if "${username}" in topic and username is None:
        return None  # a rule for the user name never applies to a client without one
    topic = topic.replace("${clientid}", client_id).replace("${username}", username or "")
    try:
        validate_topic_filter(topic)
    except TopicError as error:
        raise ValueError(f"{source}: rule {entry!r}: {error}") from None
    return Rule(
        permission == "allow", ACTIONS[action], topic, exact, None if qos is None else tuple(qos)
    )
