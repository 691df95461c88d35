"""What the plugins' backends count, per backend, for `/metrics`: pure counters, no locking.

A plugin that asks a service (an HTTP endpoint, a database) owns one `BackendFigures`,
named after the plugin (`figures_for(name)`), and counts its calls, refusals for being busy,
timeouts, failures and latency (`plugins.offload`), and its decision cache's hits and misses
(`plugins.decision_cache`). The worker's figures (`actors.figures`) copy `all_backends()`
on each reading; a pool adds the workers' counts up. Written and read from the worker's event
loop only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.latency import LatencyHistogram

# The integer counters of a backend, in the order /metrics lists them.
COUNTER_NAMES = ("calls", "busy", "timeouts", "errors", "cache_hits", "cache_misses")


@dataclass(slots=True)
class BackendFigures:
    calls: int = 0  # blocking calls started
    busy: int = 0  # calls refused: `max_waiting` calls already waiting or running
    timeouts: int = 0  # calls that did not answer within their timeout
    errors: int = 0  # calls that raised (connection refused, bad answer, ...)
    cache_hits: int = 0  # decisions answered from the cache
    cache_misses: int = 0  # decisions the cache did not hold (the backend was asked)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)  # answered calls

    def counters(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTER_NAMES}


_BACKENDS: dict[str, BackendFigures] = {}


def figures_for(name: str) -> BackendFigures:
    """The figures of backend `name` (a plugin's module name), made on first use: a plugin
    loaded again under the same name goes on counting where it left off."""
    figures = _BACKENDS.get(name)
    if figures is None:
        figures = _BACKENDS[name] = BackendFigures()
    return figures


def all_backends() -> dict[str, BackendFigures]:
    """Every backend's figures in this process, by name (the live objects: copy to keep)."""
    return _BACKENDS
