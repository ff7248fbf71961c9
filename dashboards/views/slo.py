"""SLO overview: budget remaining, burn rate per window, alert state, and the raw traffic."""

from __future__ import annotations

from grafana_foundation_sdk.models import units

from fleetwatch.core.profiles import Profile
from fleetwatch.dashboards.names import SLO_RULES
from fleetwatch.dashboards.panels import Kind, PanelSpec, Query, RowSpec, Threshold, legend_of
from fleetwatch.dashboards.promql import Scope
from fleetwatch.dashboards.views.common import error_ratio_queries, request_rate_panel

__all__ = ["burn_per_window", "slo_rows"]

_SLO = f'{SLO_RULES.slo_label}=~"$slo"'
_KEYS = f"{SLO_RULES.slo_label}, {SLO_RULES.service_label}"
_LEGEND = f"{legend_of(SLO_RULES.service_label)}/{legend_of(SLO_RULES.slo_label)}"
# Workbook burn-rate thresholds: page at 14.4x and 6x, ticket at 3x and 1x.
_BURN_STEPS = (
    Threshold(None, "green"),
    Threshold(1.0, "yellow"),
    Threshold(6.0, "orange"),
    Threshold(14.4, "red"),
)


def burn_per_window() -> str:
    """Error ratio over every window the rules record, each SLO's own windows (scaled to its
    period) included, divided by that SLO's budget; one series per SLO and ``window`` label."""
    return (
        f"{SLO_RULES.error_ratios(_SLO)} / on ({_KEYS}) group_left () "
        f"{SLO_RULES.error_budget}{{{_SLO}}}"
    )


def slo_rows(profile: Profile) -> tuple[RowSpec, ...]:
    scope = Scope(profile)
    model = scope.model
    budget = (
        PanelSpec(
            "Error budget remaining",
            "Share of this period's error budget not yet spent (1 = untouched, below 0 = "
            "overspent). From the SLO recording rules.",
            (Query(f"{SLO_RULES.budget_remaining}{{{_SLO}}}", _LEGEND),),
            units.PercentUnit,
            Kind.STAT,
            width=8,
            thresholds=(Threshold(None, "red"), Threshold(0.0, "orange"), Threshold(0.25, "green")),
        ),
        PanelSpec(
            "Objective",
            "The target good-event ratio of each SLO.",
            (Query(f"{SLO_RULES.objective}{{{_SLO}}}", _LEGEND),),
            units.PercentUnit,
            Kind.STAT,
            width=8,
        ),
        PanelSpec(
            "Current burn rate",
            "Error ratio over the shortest window divided by the error budget: 1 spends the "
            "budget exactly over the period; 14.4 spends 2% of a 30-day budget in an hour.",
            (Query(f"{SLO_RULES.current_burn_rate}{{{_SLO}}}", _LEGEND),),
            units.Short,
            Kind.STAT,
            width=8,
            thresholds=_BURN_STEPS,
        ),
    )
    burn = (
        PanelSpec(
            "Burn rate per window",
            "Error ratio over each window the SLO rules record (every alert window and the "
            "period) divided by the error budget. A page needs both windows of a pair above the "
            "threshold: for a 30-day SLO 1h and 5m above 14.4, 6h and 30m above 6; other "
            "periods scale the windows, and the legend names each one.",
            (Query(burn_per_window(), f"{_LEGEND} {legend_of(SLO_RULES.window_label)}"),),
            units.Short,
            width=16,
            height=9,
            thresholds=_BURN_STEPS,
        ),
        PanelSpec(
            "Alert state",
            "Burn-rate alerts of the chosen SLOs, from Prometheus's ALERTS series.",
            (
                Query(
                    f"max by (alertname, severity, {SLO_RULES.slo_label}) "
                    f'(ALERTS{{alertstate="firing",{_SLO}}})',
                    f"{{{{alertname}}}} {{{{severity}}}} {legend_of(SLO_RULES.slo_label)}",
                ),
            ),
            units.Short,
            Kind.STATE,
            width=8,
            height=9,
            value_names=((1, "firing"),),
            empty_when="while no burn-rate alert fires (the healthy state)",
        ),
    )
    traffic = (
        request_rate_panel(scope, model, legend_of(model)),
        PanelSpec(
            "Error ratio by outcome",
            "Failed share of finished requests, per outcome this engine counts.",
            error_ratio_queries(scope, model, legend_of(model)),
            units.PercentUnit,
        ),
    )
    return (
        RowSpec("Error budget", budget),
        RowSpec("Burn rate and alerts", burn),
        RowSpec(f"Traffic ({profile.name} metrics)", traffic),
    )
