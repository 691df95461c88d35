"""What a worker keeps for the persistent sessions of another node's worker that is down
(cluster.kept_for_down): the messages their filters match, in order, up to the bound."""

from __future__ import annotations

from cluster.kept_for_down import KeptForDown
from core.message import Message


def message(topic: str, n: int) -> Message:
    return Message(topic=topic, payload=str(n).encode(), qos=1, message_id=n)


def test_what_a_down_peers_filters_match_is_kept_in_order_until_it_is_back() -> None:
    kept = KeptForDown(bound=10)
    assert not kept
    kept.down(3, frozenset({"plant/+/temp", "alarms/#"}))
    assert kept
    sent = [message("plant/7/temp", 1), message("plant/7/load", 2), message("alarms/a/b", 3)]
    for each in sent:
        assert kept.offer(each) is None
    assert kept.up(3) == ((sent[0], sent[2]), 0)
    assert not kept
    assert kept.offer(message("alarms/x", 4)) is None  # back: nothing kept any more
    assert kept.up(3) == ((), 0)


def test_past_the_bound_the_oldest_go_and_the_first_drop_is_reported_once() -> None:
    kept = KeptForDown(bound=2)
    kept.down(1, frozenset({"t"}))
    kept.down(2, frozenset({"t", "u"}))
    assert kept.offer(message("t", 1)) is None
    assert kept.offer(message("u", 2)) is None
    assert kept.offer(message("t", 3)) == [2]  # peer 2 had two already; peer 1 one
    assert kept.offer(message("t", 4)) == [1]  # peer 2's second drop is not reported
    assert [int(m.payload) for m in kept.up(1)[0]] == [3, 4]
    back, dropped = kept.up(2)
    assert ([int(m.payload) for m in back], dropped) == ([3, 4], 2)


def test_nothing_is_kept_without_a_bound_or_without_persistent_filters() -> None:
    off = KeptForDown(bound=0)
    off.down(1, frozenset({"t"}))
    assert not off
    none = KeptForDown(bound=5)
    none.down(1, frozenset())
    assert not none
