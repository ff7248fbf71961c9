"""Fleet view: every replica side by side, and each against the fleet median."""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.models import units

from fleetwatch.core.profiles import Profile, Signal
from fleetwatch.dashboards.panels import PanelSpec, Query, RowSpec, Threshold, legend_of
from fleetwatch.dashboards.promql import Scope
from fleetwatch.dashboards.views.common import (
    LATENCY_SIGNALS,
    error_ratio_queries,
    request_rate_panel,
)

__all__ = ["fleet_rows"]

_RATIO_STEPS: Final = (Threshold(None, "green"), Threshold(1.5, "orange"), Threshold(2.0, "red"))


def _latency_panels(scope: Scope, signal: Signal, title: str) -> tuple[PanelSpec, ...]:
    ref = scope.profile.metric(signal)
    replica, model = scope.replica, scope.model
    by = f"{replica}, {model}"
    legend = legend_of(replica)
    mine = scope.quantile(0.99, ref, by)
    fleet = scope.quantile(0.99, ref, by, fleet=True)
    return (
        PanelSpec(
            f"{title}: p50 and p99 per replica",
            f"{title} quantiles per replica from the {ref.name} histogram (interpolated within "
            "buckets, so read them to the nearest bucket boundary).",
            (
                Query(scope.quantile(0.5, ref, by), f"{legend} p50"),
                Query(mine, f"{legend} p99"),
            ),
            units.Seconds,
        ),
        PanelSpec(
            f"{title}: p99 against the fleet median",
            "Each replica's p99 divided by the median of all replicas' p99 for the same model. "
            "1 is typical; a replica persistently above 1.5 is an outlier candidate "
            "(run fleetwatch fleet outliers to say whether it is the replica or its traffic).",
            (
                Query(
                    f"{mine} / on ({model}) group_left () quantile by ({model}) (0.5, {fleet})",
                    legend,
                ),
            ),
            units.Short,
            thresholds=_RATIO_STEPS,
        ),
    )


def fleet_rows(profile: Profile) -> tuple[RowSpec, ...]:
    scope = Scope(profile)
    replica = scope.replica
    legend = legend_of(replica)
    rows = [
        RowSpec(title, _latency_panels(scope, signal, title))
        for signal, title in LATENCY_SIGNALS
        if profile.has(signal)
    ]
    throughput = [request_rate_panel(scope, replica, legend)]
    token_queries = [
        Query(scope.rate(profile.metric(signal), replica), f"{legend} {kind}")
        for signal, kind in ((Signal.GENERATION_TOKENS, "output"), (Signal.PROMPT_TOKENS, "prompt"))
        if profile.has(signal)
    ]
    if token_queries:
        throughput.append(
            PanelSpec(
                "Tokens per second",
                "Output (generated) and prompt tokens processed per second, per replica.",
                tuple(token_queries),
                units.Short,
            )
        )
    rows.append(RowSpec("Throughput", tuple(throughput)))
    rows.append(
        RowSpec(
            "Errors",
            (
                PanelSpec(
                    "Error ratio per replica",
                    "Failed share of finished requests per replica and outcome. One replica "
                    "alone above the rest points at the replica, all together at a shared cause.",
                    error_ratio_queries(scope, replica, legend),
                    units.PercentUnit,
                    width=24,
                ),
            ),
        )
    )
    return tuple(rows)
