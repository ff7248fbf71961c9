"""The model cache's metrics (``fleetwatch_model_cache_*``), labelled by replica and model.

The model label's values are the configured models (a fixed, short list), so every child is
bound once at start. Bytes are the cache's accounting (each model's estimated footprint).

- ``fleetwatch_model_cache_budget_bytes``, ``fleetwatch_model_cache_resident_bytes`` (gauges),
- ``fleetwatch_model_cache_resident{model}`` (1 while loaded), ``..._pinned_requests{model}``
  (leases held: requests in flight on it),
- ``fleetwatch_model_cache_loads_total{model}``, ``..._evictions_total{model}``,
  ``..._refusals_total{model,reason}`` (``too_large``, ``all_pinned``, ``unload_failed``),
- ``fleetwatch_model_cache_load_seconds{model}`` (histogram: a load is a cold start, from the
  request that asked to the model serving).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from fleetwatch.core.profiles.buckets import FLEETWATCH_MODEL_LOAD_BUCKETS
from fleetwatch.engine_probe.serve.multi.cache import CacheEvents, ModelCache

__all__ = ["LOAD_BUCKETS", "CacheMetrics"]

LOAD_BUCKETS: Final = FLEETWATCH_MODEL_LOAD_BUCKETS
"""Seconds (the fleetwatch profile's buckets for this histogram)."""

_REASONS: Final = ("too_large", "all_pinned", "unload_failed")


class CacheMetrics(CacheEvents):
    """``CacheEvents`` that count into ``registry``."""

    def __init__(
        self, registry: CollectorRegistry, replica: str, models: Sequence[str], budget: int
    ) -> None:
        labels = ["replica", "model"]
        p = "fleetwatch_model_cache"
        budget_g = Gauge(
            f"{p}_budget_bytes", "Bytes models may take.", ["replica"], registry=registry
        )
        budget_g.labels(replica).set(budget)
        self._bytes = Gauge(
            f"{p}_resident_bytes",
            "Bytes of models loaded, loading or being unloaded.",
            ["replica"],
            registry=registry,
        ).labels(replica)
        resident = Gauge(f"{p}_resident", "1 while the model is loaded.", labels, registry=registry)
        pinned = Gauge(
            f"{p}_pinned_requests", "Requests holding the model.", labels, registry=registry
        )
        loads = Counter(f"{p}_loads", "Models loaded (cold starts).", labels, registry=registry)
        evictions = Counter(f"{p}_evictions", "Models evicted.", labels, registry=registry)
        refusals = Counter(
            f"{p}_refusals",
            "Requests refused because their model could not be made resident.",
            [*labels, "reason"],
            registry=registry,
        )
        seconds = Histogram(
            f"{p}_load_seconds",
            "Seconds from a load's start until the model serves.",
            labels,
            buckets=LOAD_BUCKETS,
            registry=registry,
        )
        self._resident = {m: resident.labels(replica, m) for m in models}
        self._pinned = {m: pinned.labels(replica, m) for m in models}
        self._loads = {m: loads.labels(replica, m) for m in models}
        self._evictions = {m: evictions.labels(replica, m) for m in models}
        self._seconds = {m: seconds.labels(replica, m) for m in models}
        self._refusals = {(m, r): refusals.labels(replica, m, r) for m in models for r in _REASONS}

    def loaded(self, model: str, seconds: float) -> None:
        self._loads[model].inc()
        self._seconds[model].observe(seconds)

    def evicted(self, model: str) -> None:
        self._evictions[model].inc()

    def refused(self, model: str, reason: str) -> None:
        self._refusals[(model, reason)].inc()

    def changed(self, cache: ModelCache[Any]) -> None:
        self._bytes.set(cache.resident_bytes)
        for model, g in self._resident.items():
            entry = cache.entry(model)
            g.set(1.0 if entry is not None and entry.ready else 0.0)
            self._pinned[model].set(entry.pins if entry is not None else 0)
