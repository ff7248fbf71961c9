"""What the real Prometheus saw: alert firing intervals read back from its HTTP API.

Prometheus writes the synthetic series ``ALERTS{alertname, alertstate, ...}`` at every rule
evaluation while an alert is pending or firing; a range query over the run therefore gives each
alert's firing intervals without polling during the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "AlertInterval",
    "PrometheusView",
    "alert_intervals",
    "observe",
]


class _RangeQuery(Protocol):
    def query_range(
        self, expr: str, start_s: float, end_s: float, step_s: float = 1.0
    ) -> list[dict[str, Any]]: ...

    def query(self, expr: str) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class AlertInterval:
    """One stretch in which an alert series was firing (Unix seconds, evaluation times)."""

    alert: str
    labels: Mapping[str, str]
    start_s: float
    end_s: float


def alert_intervals(
    matrix: Sequence[Mapping[str, Any]], *, step_s: float = 1.0
) -> tuple[AlertInterval, ...]:
    """Split each series of a range-query result into runs of samples no more than 1.5 steps
    apart; each run is one firing interval."""
    out = []
    for series in matrix:
        labels = {
            k: str(v) for k, v in series["metric"].items() if k not in ("__name__", "alertstate")
        }
        times = sorted(float(t) for t, _ in series["values"])
        if not times:
            continue
        start = prev = times[0]
        for t in times[1:]:
            if t - prev > 1.5 * step_s:
                out.append(AlertInterval(labels.get("alertname", ""), labels, start, prev))
                start = t
            prev = t
        out.append(AlertInterval(labels.get("alertname", ""), labels, start, prev))
    out.sort(key=lambda i: (i.start_s, i.alert))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PrometheusView:
    """The checks the demo makes through Prometheus's HTTP API after the run."""

    url: str
    page_alert: str
    page: tuple[AlertInterval, ...]
    outliers: tuple[AlertInterval, ...]
    other: tuple[AlertInterval, ...]
    budget_remaining: float | None
    burn: tuple[tuple[float, float], ...]
    """(Unix seconds, burn rate over the page alert's long window) from the recording rules."""

    def first_page_s(self) -> float | None:
        return min((i.start_s for i in self.page), default=None)

    def flagged(self) -> dict[str, tuple[str, ...]]:
        """Replica -> signals on which the outlier alert fired for it."""
        out: dict[str, list[str]] = {}
        for i in self.outliers:
            out.setdefault(i.labels.get("replica", "?"), []).append(i.labels.get("signal", "?"))
        return {r: tuple(dict.fromkeys(s)) for r, s in sorted(out.items())}

    def to_dict(self, origin_s: float) -> dict[str, Any]:
        def rel(i: AlertInterval) -> dict[str, Any]:
            return {
                "alert": i.alert,
                "labels": dict(i.labels),
                "start_s": round(i.start_s - origin_s, 3),
                "end_s": round(i.end_s - origin_s, 3),
            }

        first = self.first_page_s()
        return {
            "url": self.url,
            "page_alert": self.page_alert,
            "page_first_fired_s": None if first is None else round(first - origin_s, 3),
            "page_intervals": [rel(i) for i in self.page],
            "outlier_flagged": {r: list(s) for r, s in self.flagged().items()},
            "outlier_intervals": [rel(i) for i in self.outliers],
            "other_alerts": [rel(i) for i in self.other],
            "budget_remaining": self.budget_remaining,
        }


def observe(
    prom: _RangeQuery,
    url: str,
    *,
    start_s: float,
    end_s: float,
    page_alert: str,
    outlier_alert: str,
    service: str,
    slo: str,
    burn_window: str,
    error_budget: float,
    step_s: float = 1.0,
) -> PrometheusView:
    """Read alert intervals, the budget left and the burn rate over ``[start_s, end_s]``."""
    firing = prom.query_range('ALERTS{alertstate="firing"}', start_s, end_s, step_s)
    intervals = alert_intervals(firing, step_s=step_s)
    page = tuple(i for i in intervals if i.alert == page_alert and i.labels.get("slo") == slo)
    outliers = tuple(i for i in intervals if i.alert == outlier_alert)
    other = tuple(i for i in intervals if i not in page and i not in outliers)
    match = f'service="{service}",slo="{slo}"'
    left = prom.query(f"slo:period_error_budget_remaining:ratio{{{match}}}")
    budget = float(left[0]["value"][1]) if left else None
    ratio = prom.query_range(
        f"slo:sli_error:ratio_rate{burn_window}{{{match}}}", start_s, end_s, step_s
    )
    burn = tuple(
        (float(t), float(v) / error_budget)
        for series in ratio[:1]
        for t, v in series["values"]
        if v not in ("NaN", "+Inf", "-Inf")
    )
    return PrometheusView(url, page_alert, page, outliers, other, budget, burn)
