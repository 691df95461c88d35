"""plugins.acl_file: Mosquitto acl_file parsing and publish/subscribe decisions."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.decisions import Decision
from hooks.events import AuthorizeAction, AuthorizeRequest, ClientInfo
from hooks.hook_bus import HookBus
from mqtt.topics import matches
from plugins.acl_file import AclFileError, Plugin, covers, parse_acl
from plugins.base import PluginConfigError, PluginContext
from plugins.loader import load_plugins
from router.topic_trie import TopicTrie

PUB = AuthorizeAction.PUBLISH
SUB = AuthorizeAction.SUBSCRIBE

ACL = """\
# anonymous clients
topic read public/#
topic write public/anon-inbox

user alice
topic readwrite alice/#
topic read sensors/+/temp
topic deny alice/private

user bob
topic sensors/#

pattern readwrite devices/%c/#
pattern read users/%u/inbox
pattern deny devices/%c/locked
"""


def client(client_id: str = "c1", username: str | None = "alice") -> ClientInfo:
    return ClientInfo(
        client_id=client_id,
        username=username,
        peer="127.0.0.1:1",
        protocol_version=4,
        clean_start=True,
        keepalive=60,
    )


def decide(
    text: str, action: AuthorizeAction, topic: str, client_id: str = "c1", user: str | None = None
) -> Decision:
    return parse_acl(text, "acl").decide(client(client_id, user), action, topic)


# -- grants and access kinds -----------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "action", "topic", "expected"),
    [
        # anonymous block: only clients without a user name
        (None, SUB, "public/news", Decision.ALLOW),
        (None, PUB, "public/news", Decision.IGNORE),  # read only
        (None, PUB, "public/anon-inbox", Decision.ALLOW),
        ("alice", SUB, "public/news", Decision.IGNORE),
        # alice's block
        ("alice", PUB, "alice/notes", Decision.ALLOW),
        ("alice", SUB, "alice/notes/#", Decision.ALLOW),
        ("alice", SUB, "sensors/kitchen/temp", Decision.ALLOW),
        ("alice", PUB, "sensors/kitchen/temp", Decision.IGNORE),  # read only
        ("alice", PUB, "bob/x", Decision.IGNORE),
        # bob: access word omitted means readwrite
        ("bob", PUB, "sensors/a/b", Decision.ALLOW),
        ("bob", SUB, "sensors/#", Decision.ALLOW),
        ("bob", PUB, "alice/notes", Decision.IGNORE),
        # a user without a block gets only the patterns
        ("carol", PUB, "sensors/a", Decision.IGNORE),
    ],
)
def test_blocks_grant_by_access_kind(
    user: str | None, action: AuthorizeAction, topic: str, expected: Decision
) -> None:
    assert decide(ACL, action, topic, user=user) is expected


@pytest.mark.parametrize(
    ("user", "action", "topic"),
    [
        ("alice", PUB, "alice/private"),
        ("alice", SUB, "alice/private"),
        ("alice", PUB, "devices/c1/locked"),  # pattern deny beats pattern grant
        ("alice", SUB, "devices/c1/locked"),
    ],
)
def test_deny_rules_win_over_grants(user: str, action: AuthorizeAction, topic: str) -> None:
    text = ACL.replace("topic readwrite alice/#", "topic readwrite alice/#\ntopic readwrite #")
    assert decide(text, action, topic, user=user) is Decision.DENY


def test_a_deny_in_the_users_block_beats_a_pattern_grant() -> None:
    text = "user alice\ntopic deny devices/c1/secret\npattern readwrite devices/%c/#\n"
    assert decide(text, PUB, "devices/c1/secret", user="alice") is Decision.DENY
    assert decide(text, PUB, "devices/c1/open", user="alice") is Decision.ALLOW


def test_a_wildcard_overlapping_a_deny_rule_is_granted_as_mosquitto_does() -> None:
    """The deny rule is applied to each message instead (`checks_reads`)."""
    text = "topic readwrite #\ntopic deny test/nosubscribe\n"
    for topic_filter in ("#", "+/+", "test/+", "test/#"):
        assert decide(text, SUB, topic_filter) is Decision.ALLOW
    assert decide(ACL, SUB, "alice/#", user="alice") is Decision.ALLOW
    assert decide(ACL, SUB, "alice/+", user="alice") is Decision.ALLOW


@pytest.mark.parametrize(
    ("deny", "topic_filter"),
    [("a/b", "a/b"), ("a/#", "a/+"), ("a/#", "a/#"), ("a/+", "a/x"), ("#", "a/+/c")],
)
def test_a_subscribe_is_denied_when_a_deny_rule_covers_the_whole_filter(
    deny: str, topic_filter: str
) -> None:
    text = f"topic readwrite #\ntopic deny {deny}\n"
    assert decide(text, SUB, topic_filter) is Decision.DENY


def test_reads_are_checked_for_clients_a_deny_rule_applies_to() -> None:
    table = parse_acl(ACL, "acl")
    assert table.checks_reads(client("c1", "alice")) is True  # deny alice/private
    assert table.checks_reads(client("c9", "bob")) is True  # pattern deny devices/%c/locked
    no_patterns = parse_acl("user bob\ntopic sensors/#\nuser eve\ntopic deny x\n", "acl")
    assert no_patterns.checks_reads(client("c9", "bob")) is False
    assert no_patterns.checks_reads(client("c9", "eve")) is True
    assert no_patterns.checks_reads(client("c9", None)) is False
    guarded = parse_acl("pattern read devices/%c/#\n", "acl")
    assert guarded.checks_reads(client("c1", None)) is False
    assert guarded.checks_reads(client("c+", None)) is True  # denied everything


# -- patterns --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_id", "user", "action", "topic", "expected"),
    [
        ("c1", None, PUB, "devices/c1/state", Decision.ALLOW),
        ("c1", None, SUB, "devices/c1/state/#", Decision.ALLOW),
        ("c1", None, SUB, "devices/c1/#", Decision.ALLOW),  # devices/c1/locked: per message
        ("c1", None, SUB, "devices/c1/locked", Decision.DENY),
        ("c2", None, PUB, "devices/c1/state", Decision.IGNORE),
        ("c1", "alice", SUB, "users/alice/inbox", Decision.ALLOW),
        ("c1", "bob", SUB, "users/alice/inbox", Decision.IGNORE),
        ("c1", None, SUB, "users/%u/inbox", Decision.IGNORE),  # %u never applies anonymously
        ("a/b", None, PUB, "devices/a/b/x", Decision.ALLOW),  # substituted as text, like Mosquitto
    ],
)
def test_patterns_substitute_client_id_and_user_name(
    client_id: str, user: str | None, action: AuthorizeAction, topic: str, expected: Decision
) -> None:
    assert decide(ACL, action, topic, client_id=client_id, user=user) is expected


def test_partial_level_placeholders_are_literal_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "pattern readwrite dev-%c/#\n"
    with caplog.at_level(logging.WARNING, logger="plugins.acl_file"):
        table = parse_acl(text, "acl")
    assert "acl line 1" in caplog.records[0].getMessage()
    assert table.decide(client("c1", None), PUB, "dev-c1/x") is Decision.IGNORE
    assert table.decide(client("c1", None), PUB, "dev-%c/x") is Decision.ALLOW


@pytest.mark.parametrize(("client_id", "user"), [("+", None), ("c#", None), ("c1", "a+b")])
def test_wildcards_in_client_id_or_user_name_are_denied_when_patterns_exist(
    client_id: str, user: str | None
) -> None:
    assert decide(ACL, PUB, "devices/x/y", client_id=client_id, user=user) is Decision.DENY
    # Without pattern rules the guard does not apply.
    assert decide("topic write x\n", PUB, "x", client_id=client_id, user=user) is (
        Decision.ALLOW if user is None else Decision.IGNORE
    )


# -- filter coverage and $ topics ------------------------------------------------------


def trie_of(*filters: str) -> TopicTrie:
    trie = TopicTrie()
    for topic_filter in filters:
        trie.add(topic_filter)
    return trie


@pytest.mark.parametrize(
    ("rule", "topic_filter", "expected"),
    [
        ("a/+", "a/+", True),
        ("a/#", "a/+", True),
        ("a/b", "a/+", False),
        ("a/+", "a/#", False),
        ("a/+/#", "a/#", False),  # misses the parent level `a`
        ("a/#", "a/#", True),
        ("#", "a/+/c", True),
        ("+/#", "#", True),
        ("+", "#", False),
        ("#", "$SYS/#", False),  # [MQTT-4.7.2-1]
        ("$SYS/#", "$SYS/broker/+", True),
        ("+/+", "+/+", True),
    ],
)
def test_a_subscription_is_granted_only_by_a_rule_covering_the_filter(
    rule: str, topic_filter: str, expected: bool
) -> None:
    assert covers(trie_of(rule), topic_filter) is expected


def test_dollar_topics_are_not_granted_by_leading_wildcards() -> None:
    text = "topic readwrite #\ntopic read +/status\n"
    assert decide(text, PUB, "$SYS/x") is Decision.IGNORE
    assert decide(text, SUB, "$SYS/status") is Decision.IGNORE
    assert decide(text, PUB, "dev/status") is Decision.ALLOW


LEVEL = st.sampled_from(["a", "b", "+"])
FIRST_LEVEL = st.sampled_from(["a", "b", "+", "$s"])


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = [draw(FIRST_LEVEL), *draw(st.lists(LEVEL, max_size=2))]
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels) if levels != ["#"] else "#"


# Every name of up to 5 levels over the filters' literals plus one fresh letter (so each
# wildcard can be instantiated with a level no literal equals) and a leading `$` level.
NAMES = [
    "/".join(levels)
    for depth in range(1, 6)
    for levels in itertools.product(["a", "b", "c", "$s"], *[["a", "b", "c"]] * (depth - 1))
]


@settings(max_examples=150, deadline=None)
@given(filters(), filters())
def test_covers_agrees_with_the_reference_matcher(rule: str, topic_filter: str) -> None:
    matched = [name for name in NAMES if matches(topic_filter, name)]
    expected = all(matches(rule, name) for name in matched)
    assert covers(trie_of(rule), topic_filter) is expected


@settings(max_examples=150, deadline=None)
@given(filters(), filters(), st.sampled_from(NAMES))
def test_a_delivery_is_read_only_if_no_deny_rule_matches_and_a_grant_does(
    grant: str, deny: str, name: str
) -> None:
    """A message on `name` reaches a client through a granted subscription exactly when the
    reference matcher says the grant matches it and the deny rule does not."""
    table = parse_acl(f"topic read {grant}\ntopic deny {deny}\n", "acl")
    expected = matches(grant, name) and not matches(deny, name)
    assert (table.decide(client("c1", None), SUB, name) is Decision.ALLOW) is expected


# -- parse errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("topics read a", "acl line 3: unknown keyword 'topics'"),
        ("topic reed a/b", "acl line 3: access 'reed' must be read, write, readwrite or deny"),
        ("topic read a/#/b", "acl line 3: .*'#' must be a whole level"),
        ("pattern write a+/b", "acl line 3: .*'\\+' must occupy a whole level"),
        ("user", "acl line 3: 'user' needs a user name"),
        ("topic", "acl line 3: missing topic"),
    ],
)
def test_malformed_lines_are_reported_with_their_number(line: str, message: str) -> None:
    with pytest.raises(AclFileError, match=message):
        parse_acl(f"# header\ntopic read x\n{line}\n", "acl")


def test_topic_may_contain_spaces_and_comments_and_blank_lines_are_skipped() -> None:
    text = "\n   # indented comment\nuser alice\ntopic write my topic/with space\n"
    assert decide(text, PUB, "my topic/with space", user="alice") is Decision.ALLOW


# -- the plugin ------------------------------------------------------------------------


def make_plugin(tmp_path: Path, text: str) -> Plugin:
    (tmp_path / "acl").write_text(text, encoding="utf-8")
    context = PluginContext(
        config_dir=tmp_path, node_name="n", worker_id=0, plugin_name="plugins.acl_file"
    )
    return Plugin({"acl_file": "acl"}, context)


def authorize_request(
    action: AuthorizeAction, topic: str, user: str | None = "alice"
) -> AuthorizeRequest:
    return AuthorizeRequest(client=client("c1", user), action=action, topic=topic, qos=1)


def test_on_the_bus_ungranted_requests_are_denied(tmp_path: Path) -> None:
    bus = HookBus()
    context = PluginContext(config_dir=tmp_path, node_name="n", worker_id=0)
    (tmp_path / "acl").write_text(ACL, encoding="utf-8")
    load_plugins([{"module": "plugins.acl_file", "acl_file": "acl"}], bus, context)
    assert bus.authorize(authorize_request(PUB, "alice/x")) is True
    assert bus.authorize(authorize_request(PUB, "elsewhere")) is False
    assert bus.authorize(authorize_request(PUB, "alice/private")) is False


def test_reload_applies_a_new_file_and_keeps_the_rules_on_a_bad_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = make_plugin(tmp_path, ACL)
    assert plugin.authorize(authorize_request(PUB, "alice/x")) is Decision.ALLOW
    (tmp_path / "acl").write_text("user alice\ntopic write other/#\n", encoding="utf-8")
    plugin.reload()
    assert plugin.authorize(authorize_request(PUB, "alice/x")) is Decision.IGNORE
    assert plugin.authorize(authorize_request(PUB, "other/x")) is Decision.ALLOW
    (tmp_path / "acl").write_text("user alice\ntopic scribble other/#\n", encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="plugins.acl_file"):
        plugin.reload()
    assert plugin.authorize(authorize_request(PUB, "other/x")) is Decision.ALLOW
    [record] = caplog.records
    assert "previous rules kept" in record.getMessage() and "line 2" in record.getMessage()


def test_a_bad_or_missing_file_at_start_up_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(PluginConfigError, match=r"plugin plugins\.acl_file: option 'acl_file'"):
        make_plugin(tmp_path, "bogus line\n")
    context = PluginContext(config_dir=tmp_path, node_name="n", worker_id=0)
    with pytest.raises(PluginConfigError, match="cannot read ACL file"):
        Plugin({"acl_file": "nope"}, context)
