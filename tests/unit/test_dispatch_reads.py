"""Dispatcher read checks in-process: a subscriber that client.check_reads names is not given
(nor stored) a message its ACL denies, on a publish and on messages forwarded from another
pool worker; subscribers nobody names cost no decision at all."""

from __future__ import annotations

from collections import Counter

from core.session_state import SubscriptionOptions
from hooks.decisions import Decision
from hooks.events import AuthorizeRequest, CheckReads, ClientInfo
from hooks.hookpoints import HookPoint
from plugins.acl_file import AclTable, parse_acl
from store.base import PutMessage
from tests.unit.test_dispatch import Broker, message

ACL = "topic readwrite #\ntopic deny test/nosubscribe\nuser bob\ntopic read #\n"


def client(client_id: str, username: str | None) -> ClientInfo:
    return ClientInfo(
        client_id=client_id,
        username=username,
        peer="127.0.0.1:1",
        protocol_version=4,
        clean_start=True,
        keepalive=60,
    )


class Acl:
    """An acl_file table on a dispatcher's bus; `asked` counts client.authorize calls."""

    def __init__(self, broker: Broker, *, check_reads: bool = True) -> None:
        self.table: AclTable = parse_acl(ACL, "acl")
        self.asked: Counter[str] = Counter()
        broker.hooks.register(HookPoint.CLIENT_AUTHORIZE, self.authorize, owner="acl")
        if check_reads:
            broker.hooks.register(HookPoint.CLIENT_CHECK_READS, self.checks_reads, owner="acl")

    def authorize(self, request: AuthorizeRequest) -> Decision:
        self.asked[request.client.client_id] += 1
        return self.table.decide(request.client, request.action, request.topic)

    def checks_reads(self, request: CheckReads) -> bool:
        return self.table.checks_reads(request.client)


def acl_broker(*, check_reads: bool = True) -> tuple[Broker, Acl]:
    broker = Broker(persistent_store=True)
    return broker, Acl(broker, check_reads=check_reads)


def subscribe(broker: Broker, client_id: str, username: str | None) -> None:
    session = broker.subscribe(client_id, "#", SubscriptionOptions(1), persistent=True)
    broker.dispatcher.read_checks.identify(session, client(client_id, username))


def topics_of(broker: Broker, client_id: str) -> list[str]:
    return [delivery.message.topic for delivery in broker.sessions[client_id].deliveries()]


def stored_for(broker: Broker) -> Counter[str]:
    return Counter(
        op.client_id
        for ops, _then in broker.writer.submitted
        for op in ops
        if type(op) is PutMessage
    )


def test_a_denied_topic_is_neither_delivered_nor_stored_for_a_checked_subscriber() -> None:
    broker, acl = acl_broker()
    subscribe(broker, "anon", None)  # a deny rule applies: checked
    subscribe(broker, "bob", "bob")  # none applies: not checked
    for _ in range(3):
        broker.dispatcher.publish(
            [message("test/nosubscribe", qos=1), message("test/other", qos=1)]
        )
    assert topics_of(broker, "anon") == ["test/other"] * 3
    assert topics_of(broker, "bob") == ["test/nosubscribe", "test/other"] * 3
    assert stored_for(broker) == {"anon": 3, "bob": 6}
    assert acl.asked == {"anon": 2}  # one decision per topic, for the checked subscriber only


def test_messages_forwarded_from_another_worker_are_checked_too() -> None:
    broker, _acl = acl_broker()
    subscribe(broker, "anon", None)
    broker.dispatcher.publish_forwarded(
        (message("test/nosubscribe", qos=0), message("test/other", qos=0))
    )
    assert topics_of(broker, "anon") == ["test/other"]


def test_without_client_check_reads_no_delivery_is_decided() -> None:
    broker, acl = acl_broker(check_reads=False)
    subscribe(broker, "anon", None)
    assert broker.dispatcher.read_checks.active is False
    broker.dispatcher.publish([message("test/nosubscribe", qos=0)])
    assert topics_of(broker, "anon") == ["test/nosubscribe"]
    assert acl.asked == {}


def test_a_reload_that_adds_a_check_applies_to_the_next_message() -> None:
    broker, acl = acl_broker()
    subscribe(broker, "carol", "carol")  # no rule for carol yet: not checked
    broker.dispatcher.publish([message("test/nosubscribe", qos=0)])
    assert topics_of(broker, "carol") == ["test/nosubscribe"]
    # The plugin's reload swaps its table, then the broker resets the checks.
    acl.table = parse_acl("user carol\ntopic read #\ntopic deny test/nosubscribe\n", "acl")
    broker.dispatcher.read_checks.reset()
    broker.dispatcher.publish([message("test/nosubscribe", qos=0)])
    assert topics_of(broker, "carol") == ["test/nosubscribe"]  # the second one was not given
