"""RetainedClears: what a cluster's retainer remembers of clears, and for how long."""

from __future__ import annotations

from router.retained_clears import RetainedClears


def test_a_clear_overrides_what_is_older_or_as_old_and_not_what_is_newer() -> None:
    clears = RetainedClears()
    clears.cleared("a/b", 100.0, now=100.0)
    assert clears.overrides("a/b", 99.0)
    assert clears.overrides("a/b", 100.0)
    assert not clears.overrides("a/b", 101.0)
    assert not clears.overrides("a/c", 1.0)


def test_a_newer_message_forgets_the_clear_and_an_older_one_does_not() -> None:
    clears = RetainedClears()
    clears.cleared("t", 100.0, now=100.0)
    clears.retained("t", 50.0)
    assert clears.overrides("t", 60.0)
    clears.retained("t", 150.0)
    assert not clears.overrides("t", 60.0)
    assert len(clears) == 0


def test_two_clears_of_a_topic_keep_the_later_time() -> None:
    clears = RetainedClears()
    clears.cleared("t", 200.0, now=200.0)
    clears.cleared("t", 100.0, now=200.0)  # an older clear learnt later
    assert clears.overrides("t", 150.0)
    assert list(clears.items(now=200.0)) == [("t", 200.0)]


def test_clears_are_forgotten_after_keep_for_seconds() -> None:
    clears = RetainedClears(keep_for=10.0)
    clears.cleared("old", 100.0, now=100.0)
    clears.cleared("new", 105.0, now=105.0)
    assert [topic for topic, _ in clears.items(now=109.0)] == ["old", "new"]
    assert [topic for topic, _ in clears.items(now=112.0)] == ["new"]
    assert not clears.overrides("old", 50.0)


def test_past_the_capacity_the_first_learnt_are_forgotten() -> None:
    clears = RetainedClears(capacity=3)
    for index in range(5):
        clears.cleared(f"t/{index}", 100.0 + index, now=105.0)
    assert [topic for topic, _ in clears.items(now=105.0)] == ["t/2", "t/3", "t/4"]
    assert not clears.overrides("t/0", 1.0)
