"""Replica rows for cold starts and the several-model cache (profiles that export them).

The startup gauge holds the last cold start's seconds per phase (one series per replica, model
and phase); the cache gauges and counters come from ``engine serve --model``. Replica-wide
series (readiness, budget, resident bytes) carry no model label, so they are selected by replica
alone.
"""

from __future__ import annotations

from grafana_foundation_sdk.models import units

from fleetwatch.core.profiles import Signal
from fleetwatch.dashboards.panels import Kind, PanelSpec, Query, RowSpec, legend_of
from fleetwatch.dashboards.promql import Scope

__all__ = ["startup_rows"]


def _startup(scope: Scope) -> list[PanelSpec]:
    profile, replica, model = scope.profile, scope.replica, scope.model
    panels: list[PanelSpec] = []
    if profile.has(Signal.ENGINE_STARTUP):
        ref = profile.metric(Signal.ENGINE_STARTUP)
        panels.append(
            PanelSpec(
                "Cold start by phase",
                "Seconds each phase of the last cold start took (process start, weights load, "
                "KV cache allocation, server start, warm-up, readiness), per replica and model. "
                "The phases follow each other: their sum is the start. A start that grew shows "
                "which phase grew; the warm pool and cooldowns are sized from the sum "
                "(fleetwatch fleet capacity --cold-start-from).",
                (
                    Query(
                        f"max by ({replica}, {model}, phase) ({ref.selector(scope.chosen())})",
                        f"{legend_of(replica)} {legend_of(model)} {legend_of('phase')}",
                    ),
                ),
                units.Seconds,
                empty_when="until a replica has started with its phases timed",
            )
        )
    if profile.has(Signal.ENGINE_READY):
        ref = profile.metric(Signal.ENGINE_READY)
        panels.append(
            PanelSpec(
                "Ready",
                "1 while the replica is warm and takes traffic (/ready answers 200); 0 while it "
                "starts or drains. /health answers from the moment the listener is up.",
                (Query(scope.gauge(ref, replica, "max", device=True), legend_of(replica)),),
                units.Short,
                Kind.STATE,
                value_names=((0, "not ready"), (1, "ready")),
                value_colors=((0, "orange"), (1, "green")),
            )
        )
    return panels


def _cache(scope: Scope) -> list[PanelSpec]:
    profile, replica, model = scope.profile, scope.replica, scope.model
    if not profile.has(Signal.MODEL_CACHE_BYTES):
        return []
    legend, by_model = legend_of(replica), f"{legend_of(replica)} {legend_of(model)}"
    used = scope.gauge(profile.metric(Signal.MODEL_CACHE_BYTES), replica, "max", device=True)
    budget = scope.gauge(profile.metric(Signal.MODEL_CACHE_BUDGET), replica, "max", device=True)
    pinned = scope.gauge(profile.metric(Signal.MODEL_CACHE_PINNED), f"{replica}, {model}", "max")
    resident = scope.gauge(
        profile.metric(Signal.MODEL_CACHE_RESIDENT), f"{replica}, {model}", "max"
    )
    loads = profile.metric(Signal.MODEL_CACHE_LOADS)
    evictions = profile.metric(Signal.MODEL_CACHE_EVICTIONS)
    refusals = profile.metric(Signal.MODEL_CACHE_REFUSALS)
    load_time = profile.metric(Signal.MODEL_CACHE_LOAD_TIME)
    only = "on a replica serving a single model (no --model flags)"
    return [
        PanelSpec(
            "Model cache: resident bytes against the budget",
            "Bytes of models loaded (and loading, and being unloaded) against "
            "--model-cache-bytes. The cache never goes over the budget: a model that does not "
            "fit is refused, never squeezed in.",
            (Query(used, f"{legend} resident"), Query(budget, f"{legend} budget")),
            units.BytesIEC,
            empty_when=only,
        ),
        PanelSpec(
            "Resident models and requests pinning them",
            "1 while a model is loaded; beside it the requests holding it (a model with "
            "requests in flight, streams included, is never evicted).",
            (
                Query(resident, f"{by_model} resident"),
                Query(pinned, f"{by_model} requests"),
            ),
            units.Short,
            empty_when=only,
        ),
        PanelSpec(
            "Model loads and evictions per second",
            "Each load is a cold start that requests wait for. Loads and evictions of the same "
            "models again and again (thrashing) mean the budget holds less than the working set.",
            (
                Query(scope.rate(loads, f"{replica}, {model}"), f"{by_model} loads"),
                Query(scope.rate(evictions, f"{replica}, {model}"), f"{by_model} evictions"),
            ),
            units.OpsPerSecond,
            empty_when=only,
        ),
        PanelSpec(
            "Model load time p50 and p99",
            "From the request that asked for a model to the model serving: what a request "
            "for a model not resident waits before its first token can start.",
            (
                Query(scope.quantile(0.5, load_time, f"{replica}, {model}"), f"{by_model} p50"),
                Query(scope.quantile(0.99, load_time, f"{replica}, {model}"), f"{by_model} p99"),
            ),
            units.Seconds,
            empty_when=only,
        ),
        PanelSpec(
            "Requests refused for a model that cannot be resident",
            "503s by reason: too_large (the model is bigger than the whole budget: retrying "
            "cannot help) and all_pinned (every resident model serves requests: Retry-After).",
            (
                Query(
                    scope.rate(refusals, f"{replica}, {model}, reason"),
                    f"{by_model} {legend_of('reason')}",
                ),
            ),
            units.OpsPerSecond,
            empty_when="while every requested model fits",
        ),
    ]


def startup_rows(scope: Scope) -> list[RowSpec]:
    """The cold-start row and the model-cache row, for the panels the profile has."""
    rows = [
        RowSpec("Cold start", tuple(_startup(scope))),
        RowSpec("Model cache", tuple(_cache(scope))),
    ]
    return [r for r in rows if r.panels]
