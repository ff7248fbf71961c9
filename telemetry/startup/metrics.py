"""``fleetwatch_engine_startup_seconds{replica,model,phase}``: the phases of the last cold start.

A gauge, not a histogram: a replica starts once (a model cache: once per load), so a per-replica
histogram would hold one observation per process and its quantiles would say nothing; what a
dashboard and a capacity planner want is "how long did this replica's last start take, phase by
phase". The fleet-wide distribution is a ``quantile by (phase)`` over the replicas' gauges, and
a start's total is ``sum by (replica, model)`` (phases are sequential, so they add up). No
``phase="total"`` series: it would double every such sum.

``fleetwatch_engine_ready{replica}`` is 1 once the server is warm and accepts traffic (``/ready``
answers 200), 0 while it starts or drains.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["READY", "STARTUP_SECONDS", "StartupMetrics"]

STARTUP_SECONDS: Final = "fleetwatch_engine_startup_seconds"
READY: Final = "fleetwatch_engine_ready"


class StartupMetrics(Collector):
    """The last cold start of each (model) on one replica; thread-safe ``record``.

    >>> from prometheus_client import CollectorRegistry
    >>> reg = CollectorRegistry()
    >>> m = StartupMetrics("r0"); reg.register(m)
    >>> m.record("m", {"weights_load": 1.5, "warmup": 0.5})
    >>> reg.get_sample_value(STARTUP_SECONDS, {"replica": "r0", "model": "m", "phase": "warmup"})
    0.5
    """

    def __init__(self, replica: str, ready: Callable[[], bool] | None = None) -> None:
        self.replica = replica
        self.ready = ready
        self._last: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def record(self, model: str, seconds: Mapping[str, float]) -> None:
        """Replace ``model``'s last start with these phase seconds (model names: bounded by the
        caller, which serves a fixed list of models)."""
        with self._lock:
            self._last[model] = dict(seconds)

    def last(self, model: str) -> dict[str, float]:
        with self._lock:
            return dict(self._last.get(model, {}))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(
            STARTUP_SECONDS,
            "Seconds each phase of the last cold start took (weights_load, kv_cache_alloc, "
            "warmup, readiness); sum by (replica, model) for the total.",
            labels=["replica", "model", "phase"],
        )
        with self._lock:
            items = [(m, dict(p)) for m, p in self._last.items()]
        for model, phases in items:
            for phase, s in phases.items():
                g.add_metric([self.replica, model, phase], s)
        yield g
        if self.ready is not None:
            r = GaugeMetricFamily(
                READY, "1 when the server is warm and accepts traffic, else 0.", labels=["replica"]
            )
            r.add_metric([self.replica], 1.0 if self.ready() else 0.0)
            yield r
