"""Micro-benchmark of the router's hot path: a topic's fan-out plan at 1e3, 1e4, 1e5 filters.

`python -m loadtest.bench_topic_trie [--sizes 1000 10000 100000]` builds a table of
subscriptions shaped like a device fleet (`site/dev/metric`: 80 % exact filters, 20 % with
`+` or `#`, one subscriber each) and writes one line per size to stdout: microseconds per
`add`, per `FanOut.plan` served by its cache (a working set of names smaller than the cache),
per plan that misses it (more distinct names than the cache holds: `RouteTable.match` and
the merge), per bare `RouteTable.match` and per bare `TopicTrie.match`, and the mean number
of filters a name matched. Seeded, so runs are comparable.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.session_state import SubscriptionOptions
from mqtt.topics import is_wildcard
from router.fan_out import DEFAULT_CACHE_SIZE, FanOut, Route
from router.route_table import RouteTable
from router.topic_trie import TopicTrie

METRICS = ("temp", "humidity", "power", "status", "door", "alarm", "gps", "battery")
DEVICES_PER_SITE = 100
HOT_NAMES = 1_000  # fits in the cache: every match after the first round is a hit
COLD_NAMES = 4 * DEFAULT_CACHE_SIZE  # cycled in order: every match misses the cache
MIN_CALLS = 50_000


@dataclass(frozen=True, slots=True)
class BenchResult:
    filters: int
    wildcard_filters: int
    add_us: float
    hit_us: float
    miss_us: float
    match_us: float
    trie_us: float
    mean_matched: float

    def line(self) -> str:
        return (
            f"filters={self.filters:>7} (wildcard {self.wildcard_filters:>6})  "
            f"add {self.add_us:6.2f} us  plan: cache hit {self.hit_us:5.2f} us, "
            f"miss {self.miss_us:6.2f} us; match only {self.match_us:6.2f} us, "
            f"trie only {self.trie_us:6.2f} us  "
            f"matched/name {self.mean_matched:.2f}"
        )


def fleet_filters(count: int, rng: random.Random) -> list[str]:
    """`count` distinct filters: 80 % exact, 10 % `site/dev/#`, 10 % with `+`."""
    sites = max(1, count // DEVICES_PER_SITE)
    chosen: set[str] = set()
    while len(chosen) < count:
        site, device = rng.randrange(sites), rng.randrange(DEVICES_PER_SITE)
        metric, shape = rng.choice(METRICS), rng.random()
        if shape < 0.8:
            chosen.add(f"site{site}/dev{device}/{metric}")
        elif shape < 0.9:
            chosen.add(f"site{site}/dev{device}/#")
        elif shape < 0.97:
            chosen.add(f"site{site}/+/{metric}")
        else:
            chosen.add(f"+/dev{device}/{metric}")
    return sorted(chosen)


def fleet_names(count: int, filter_count: int, rng: random.Random) -> list[str]:
    sites = max(1, filter_count // DEVICES_PER_SITE)
    return [
        f"site{rng.randrange(sites)}/dev{rng.randrange(DEVICES_PER_SITE)}/{rng.choice(METRICS)}"
        for _ in range(count)
    ]


def us_per_call(call: Callable[[str], object], names: Sequence[str]) -> float:
    """Mean microseconds of `call(name)` over whole passes through `names`."""
    rounds = max(1, MIN_CALLS // len(names))
    start = time.perf_counter()
    for _ in range(rounds):
        for name in names:
            call(name)
    return (time.perf_counter() - start) * 1e6 / (rounds * len(names))


def bench(filter_count: int, seed: int = 1) -> BenchResult:
    rng = random.Random(seed)
    filters = fleet_filters(filter_count, rng)
    table: RouteTable[str, Route] = RouteTable()
    route = Route(None, SubscriptionOptions(qos=1))
    start = time.perf_counter()
    for index, topic_filter in enumerate(filters):
        table.add(topic_filter, f"client{index}", route)
    add_us = (time.perf_counter() - start) * 1e6 / len(filters)
    hot = fleet_names(HOT_NAMES, filter_count, rng)
    cold = fleet_names(COLD_NAMES, filter_count, rng)
    fan_out = FanOut(table)
    for name in hot:
        fan_out.plan(name)  # warm the cache
    hit_us = us_per_call(fan_out.plan, hot)
    miss_us = us_per_call(fan_out.plan, cold)
    match_us = us_per_call(table.match, cold)
    wildcard_filters = [f for f in filters if is_wildcard(f)]
    trie = TopicTrie()
    for topic_filter in wildcard_filters:
        trie.add(topic_filter)
    trie_us = us_per_call(trie.match, cold)  # the wildcard walk alone, as inside `match`
    mean_matched = sum(len(table.match(name)) for name in cold) / len(cold)
    return BenchResult(
        filters=filter_count,
        wildcard_filters=len(wildcard_filters),
        add_us=add_us,
        hit_us=hit_us,
        miss_us=miss_us,
        match_us=match_us,
        trie_us=trie_us,
        mean_matched=mean_matched,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for size in args.sizes:
        sys.stdout.write(bench(size, args.seed).line() + "\n")


if __name__ == "__main__":
    main()
