"""Token buckets, a client's rate limiter, and the refused-CONNECT delays, in-process."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.auth_failures import AuthFailureDelays
from core.rate_limit import RateLimiter, RateLimits, TokenBucket


def test_a_bucket_starts_full_with_one_second_of_tokens() -> None:
    bucket = TokenBucket(rate=100, now=0.0)
    assert bucket.take(100, now=0.0) == 0.0
    assert bucket.take(50, now=0.0) == pytest.approx(0.5)  # 50 tokens of debt at 100/s


def test_a_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(rate=10, now=0.0, burst=5)
    bucket.take(5, now=0.0)
    assert bucket.wait(5, now=0.25) == pytest.approx(0.25)  # 2.5 there, 2.5 missing
    assert bucket.wait(5, now=100.0) == 0.0  # never more than the burst
    assert bucket.take(6, now=100.0) == pytest.approx(0.1)


def test_wait_spends_nothing() -> None:
    bucket = TokenBucket(rate=1, now=0.0)
    assert bucket.wait(1, now=0.0) == 0.0
    assert bucket.wait(1, now=0.0) == 0.0
    assert bucket.take(1, now=0.0) == 0.0
    assert bucket.wait(1, now=0.0) == pytest.approx(1.0)


def test_a_bucket_refuses_a_rate_of_zero() -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate=0, now=0.0)


@given(
    rate=st.floats(min_value=1, max_value=10_000),
    reads=st.lists(st.integers(min_value=1, max_value=2000), min_size=1, max_size=200),
)
def test_a_reader_that_waits_what_it_is_told_never_beats_the_rate(
    rate: float, reads: list[int]
) -> None:
    """Whatever the read sizes, a reader that pauses as told takes at most one burst more
    than `rate` a second: the long-run rate holds."""
    bucket = TokenBucket(rate=rate, now=0.0)
    now = 0.0
    taken = 0
    for amount in reads:
        taken += amount
        now += bucket.take(amount, now)
    assert taken <= rate * now + rate + max(reads)


def test_the_limiter_waits_for_the_slower_of_its_buckets() -> None:
    limiter = RateLimiter(RateLimits(messages_rate=10, bytes_rate=1000), now=0.0)
    assert limiter.take(10, 1000, now=0.0) == 0.0
    assert limiter.take(5, 100, now=0.0) == pytest.approx(0.5)  # messages: 5 of debt at 10/s
    limiter = RateLimiter(RateLimits(messages_rate=10, bytes_rate=1000), now=0.0)
    assert limiter.take(1, 3000, now=0.0) == pytest.approx(2.0)  # bytes: 2000 of debt


def test_a_read_without_publishes_costs_no_message_tokens() -> None:
    limiter = RateLimiter(RateLimits(messages_rate=1), now=0.0)
    for _ in range(100):
        assert limiter.take(0, 10, now=0.0) == 0.0


def test_rate_limits_with_zeros_are_unlimited() -> None:
    assert RateLimits().unlimited
    assert not RateLimits(bytes_rate=1).unlimited


def test_the_first_refusal_is_free_then_the_delay_doubles_up_to_the_maximum() -> None:
    delays = AuthFailureDelays(base=0.1, maximum=1.0)
    answers = [delays.failed("10.0.0.1", now=float(n)) for n in range(6)]
    assert answers == pytest.approx([0.0, 0.1, 0.2, 0.4, 0.8, 1.0])
    assert delays.failed("10.0.0.2", now=6.0) == 0.0  # per address


def test_an_accepted_connect_or_a_long_pause_forgets_the_failures() -> None:
    delays = AuthFailureDelays(base=0.1, maximum=1.0, forget_after=60.0)
    delays.failed("a", now=0.0)
    assert delays.failed("a", now=1.0) > 0
    delays.succeeded("a")
    assert delays.failed("a", now=2.0) == 0.0
    assert delays.failed("a", now=3.0) > 0
    assert delays.failed("a", now=100.0) == 0.0  # 97 s after the last one


def test_the_remembered_addresses_are_bounded_oldest_out() -> None:
    delays = AuthFailureDelays(base=0.1, maximum=1.0, max_addresses=3)
    for number in range(5):
        delays.failed(f"10.0.0.{number}", now=0.0)
    assert len(delays) == 3
    assert delays.failed("10.0.0.0", now=0.0) == 0.0  # forgotten: first failure again
    assert delays.failed("10.0.0.4", now=0.0) == pytest.approx(0.1)  # still known
