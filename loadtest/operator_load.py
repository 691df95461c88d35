"""`python -m loadtest.operator_load`: what an operator's tools ask of a broker, once a second.

To measure what the operations surface costs the MQTT path (docs/operations.md, "Speed"),
run this beside a broker under load: every second it scrapes `/metrics` as Prometheus would
(and parses it with `prometheus_client`'s parser), and asks what the open dashboard asks on
each of its ticks (`/api/v1/stats`, the clients page, the retained page). It runs while the
process `--while-pid` lives, so a benchmark harness that starts a fresh broker per run can
start it in the same command line:

    sh -c 'python -m loadtest.operator_load --port 18090 --api-key KEY --while-pid $$ &
           exec python -m actors.main --http-port 18090 ...'

It logs one line at the end: how many rounds ran, how many requests failed. Every request
has a 2 s timeout and goes to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

logger = logging.getLogger("loadtest.operator_load")

# What admin/static/app.js fetches on every tick of the open dashboard.
DASHBOARD_TICK = (
    "/api/v1/stats",
    "/api/v1/clients?limit=100&clientid=",
    "/api/v1/retained?limit=50&topic=%23",
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def fetch(base: str, path: str, api_key: str) -> bytes:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(request, timeout=2) as response:
        body: bytes = response.read()
        return body


def one_round(base: str, api_key: str) -> int:
    """Scrape and tick once; the number of requests that failed."""
    failed = 0
    try:
        families = list(text_string_to_metric_families(fetch(base, "/metrics", api_key).decode()))
        failed += not families
    except (OSError, urllib.error.URLError, ValueError):
        failed += 1
    for path in DASHBOARD_TICK:
        try:
            fetch(base, path, api_key)
        except (OSError, urllib.error.URLError):
            failed += 1
    return failed


def wait_until_serving(base: str, pid: int, timeout: float = 30.0) -> bool:
    """Whether the HTTP listener answered `/api/v1/health` before `pid` ended or `timeout`."""
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/api/v1/health", timeout=2):
                return True
        except (OSError, urllib.error.URLError):
            time.sleep(0.1)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=18083, help="the broker's [http] port")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--while-pid", type=int, required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    base = f"http://127.0.0.1:{args.port}"
    if not wait_until_serving(base, args.while_pid):
        logger.error("the broker's HTTP listener on %s never answered: is [http] port set?", base)
        return 1
    rounds = failed = 0
    next_round = time.monotonic()
    while alive(args.while_pid):
        failed += one_round(base, args.api_key)
        rounds += 1
        next_round += args.interval
        time.sleep(max(0.0, next_round - time.monotonic()))
    logger.info("%d rounds of /metrics and the dashboard's requests, %d failed", rounds, failed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
