"""Reading alert intervals back from Prometheus range queries."""

from __future__ import annotations

from typing import Any

from fleetwatch.demo.observed import AlertInterval, alert_intervals, observe


def _series(alert: str, times: list[float], **labels: str) -> dict[str, Any]:
    metric = {"__name__": "ALERTS", "alertname": alert, "alertstate": "firing", **labels}
    return {"metric": metric, "values": [[t, "1"] for t in times]}


def test_gaps_longer_than_a_step_and_a_half_split_intervals() -> None:
    got = alert_intervals([_series("Page", [10, 11, 12, 15, 16])], step_s=1.0)
    assert [(i.start_s, i.end_s) for i in got] == [(10, 12), (15, 16)]
    assert got[0].labels == {"alertname": "Page"}


def test_intervals_are_sorted_by_start_across_series() -> None:
    got = alert_intervals(
        [_series("B", [5, 6], replica="r1"), _series("A", [1, 2], replica="r3")], step_s=1.0
    )
    assert [i.alert for i in got] == ["A", "B"]
    assert got[1].labels["replica"] == "r1"


class _FakeProm:
    """Canned HTTP API answers (the real server is exercised in test_end_to_end)."""

    def query_range(
        self, expr: str, start_s: float, end_s: float, step_s: float = 1.0
    ) -> list[dict[str, Any]]:
        if expr.startswith("ALERTS"):
            return [
                _series("Page", [20, 21, 22], slo="availability"),
                _series("FleetReplicaOutlier", [30, 31], replica="replica-1", signal="tpot"),
                _series("FleetReplicaOutlier", [32], replica="replica-1", signal="e2e"),
                _series("Ticket", [25], slo="availability"),
            ]
        return [{"metric": {}, "values": [[20, "0.1"], [21, "NaN"]]}]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return [{"metric": {}, "value": [40, "-2.5"]}]


def test_observe_separates_page_outlier_and_other_alerts() -> None:
    view = observe(
        _FakeProm(),
        "http://x",
        start_s=0,
        end_s=50,
        page_alert="Page",
        outlier_alert="FleetReplicaOutlier",
        service="svc",
        slo="availability",
        burn_window="1m",
        error_budget=0.005,
    )
    assert view.first_page_s() == 20
    assert view.flagged() == {"replica-1": ("tpot", "e2e")}
    assert [i.alert for i in view.other] == ["Ticket"]
    assert view.budget_remaining == -2.5
    assert view.burn == ((20.0, 20.0),)
    doc = view.to_dict(origin_s=10.0)
    assert doc["page_first_fired_s"] == 10.0
    assert isinstance(view.page[0], AlertInterval)
