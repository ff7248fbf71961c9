"""Fleet view: each model's fleet as one line per quantile, and the worst ``$topk`` replicas
(slowest, furthest above their fleet median, least busy, most failing) rather than every
replica: 200 replicas draw 10 lines, not 400."""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.models import units

from fleetwatch.core.profiles import Profile, Signal
from fleetwatch.dashboards.panels import PanelSpec, Query, RowSpec, Threshold, legend_of
from fleetwatch.dashboards.promql import Scope
from fleetwatch.dashboards.recordings import FLEET_QUANTILES, FLEET_WINDOW, recorded
from fleetwatch.dashboards.views.common import (
    LATENCY_SIGNALS,
    error_ratio_queries,
    request_rate_panel,
)

__all__ = ["fleet_rows"]

_RATIO_STEPS: Final = (Threshold(None, "green"), Threshold(1.5, "orange"), Threshold(2.0, "red"))


TOPK: Final = "$topk"
"""The fleet view's variable: how many replicas a per-replica panel shows (the worst)."""


def _latency_panels(scope: Scope, signal: Signal, title: str) -> tuple[PanelSpec, ...]:
    ref = scope.profile.metric(signal)
    replica, model = scope.replica, scope.model
    by = f"{replica}, {model}"
    legend, model_legend = legend_of(replica), legend_of(model)
    mine = scope.quantile(0.99, ref, by)
    fleet = scope.quantile(0.99, ref, by, fleet=True)
    return (
        PanelSpec(
            f"{title}: fleet p50 and p99",
            f"{title} quantiles of each model's whole fleet, from the {ref.name} histogram "
            f"summed over its replicas over {FLEET_WINDOW} (interpolated within buckets, so read "
            "them to the nearest bucket boundary). One line per model, however many replicas "
            "serve it, read from the recording rules fleetwatch dashboards alerts writes "
            f"({recorded(signal, 0.5)}): load them, or these lines stay empty.",
            tuple(
                Query(scope.recorded(recorded(signal, q)), f"{model_legend} p{q * 100:g}")
                for q in FLEET_QUANTILES
            ),
            units.Seconds,
        ),
        PanelSpec(
            f"{title}: p99 of the slowest replicas",
            f"The $topk replicas with the highest {title.lower()} p99 at each moment (the "
            "Replicas shown variable), each line one replica.",
            (Query(f"topk({TOPK}, {mine})", f"{legend} p99"),),
            units.Seconds,
        ),
        PanelSpec(
            f"{title}: p99 against the fleet median",
            "The $topk replicas furthest above their fleet: each one's p99 divided by the median "
            "of all replicas' p99 for the same model. 1 is typical; a replica persistently above "
            "1.5 is an outlier candidate (run fleetwatch fleet outliers to say whether it is the "
            "replica or its traffic).",
            (
                Query(
                    f"topk({TOPK}, {mine} / on ({model}) group_left () "
                    f"quantile by ({model}) (0.5, {fleet}))",
                    legend,
                ),
            ),
            units.Short,
            thresholds=_RATIO_STEPS,
        ),
    )


def fleet_rows(profile: Profile) -> tuple[RowSpec, ...]:
    scope = Scope(profile)
    replica, model = scope.replica, scope.model
    fleet_by = scope.fleet_by
    legend, model_legend = legend_of(replica), legend_of(model)
    rows = [
        RowSpec(title, _latency_panels(scope, signal, title))
        for signal, title in LATENCY_SIGNALS
        if profile.has(signal)
    ]
    total = profile.outcomes.total
    throughput = [
        request_rate_panel(scope, fleet_by, model_legend),
        PanelSpec(
            "Least busy replicas",
            "The $topk replicas finishing the fewest requests per second: a replica the "
            "router no longer sends to, or one that stalls, sits at the bottom.",
            (Query(f"bottomk({TOPK}, {scope.rate(total, replica)})", legend),),
            units.RequestsPerSecond,
        ),
    ]
    token_queries = [
        Query(scope.rate(profile.metric(signal), fleet_by), f"{model_legend} {kind}")
        for signal, kind in ((Signal.GENERATION_TOKENS, "output"), (Signal.PROMPT_TOKENS, "prompt"))
        if profile.has(signal)
    ]
    if token_queries:
        throughput.append(
            PanelSpec(
                "Tokens per second",
                "Output (generated) and prompt tokens processed per second, per model.",
                tuple(token_queries),
                units.Short,
            )
        )
    rows.append(RowSpec("Throughput", tuple(throughput)))
    worst = tuple(
        Query(f"topk({TOPK}, {q.expr})", q.legend)
        for q in error_ratio_queries(scope, replica, legend)
    )
    rows.append(
        RowSpec(
            "Errors",
            (
                PanelSpec(
                    "Error ratio per model",
                    "Failed share of each model's finished requests, per outcome.",
                    error_ratio_queries(scope, fleet_by, model_legend),
                    units.PercentUnit,
                ),
                PanelSpec(
                    "Error ratio: the worst replicas",
                    "The $topk replicas with the highest failed share per outcome. One replica "
                    "alone above the rest points at the replica, all together at a shared cause.",
                    worst,
                    units.PercentUnit,
                ),
            ),
        )
    )
    return tuple(rows)
