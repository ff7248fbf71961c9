"""Panel pieces shared by several views (traffic and errors of a profile)."""

from __future__ import annotations

from grafana_foundation_sdk.models import units

from dashboards.panels import PanelSpec, Query
from dashboards.promql import Scope

__all__ = ["error_ratio_queries", "request_rate_panel"]


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
