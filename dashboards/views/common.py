"""Pieces shared by several views: the latency signals, traffic and errors of a profile."""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.models import units

from fleetwatch.core.profiles import Signal
from fleetwatch.dashboards.panels import PanelSpec, Query
from fleetwatch.dashboards.promql import Scope

__all__ = ["LATENCY_SIGNALS", "error_ratio_queries", "request_rate_panel"]

# The request latency histograms, in display order, with a plain-words title.
LATENCY_SIGNALS: Final = (
    (Signal.TTFT, "Time to first token"),
    (Signal.TPOT, "Time per output token"),
    (Signal.ITL, "Inter-token latency"),
    (Signal.E2E, "End-to-end latency"),
)


def error_ratio_queries(scope: Scope, by: str, legend: str) -> tuple[Query, ...]:
    """Failed share of finished requests per ``by``, one query per bad outcome the engine counts.

    Where the engine counts successes instead (``good``), the error ratio is 1 - good / total.
    """
    outcomes = scope.profile.outcomes
    total = scope.rate(outcomes.total, by)
    queries = [
        Query(f"{scope.rate(ref, by)} / {total}", f"{legend} {outcome}")
        for outcome, ref in sorted(outcomes.bad.items())
    ]
    if not queries and outcomes.good is not None:
        queries.append(Query(f"1 - {scope.rate(outcomes.good, by)} / {total}", f"{legend} failed"))
    return tuple(queries)


def request_rate_panel(scope: Scope, by: str, legend: str) -> PanelSpec:
    return PanelSpec(
        "Finished requests per second",
        "Requests finished per second, every outcome included.",
        (Query(scope.rate(scope.profile.outcomes.total, by), legend),),
        units.RequestsPerSecond,
    )
