"""The resilience series come from fleetwatch's resilience library in the user's client code, not
from any engine: dashboards and alerts say so, and engine profiles do not get them by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fleetwatch.cli import main
from fleetwatch.core.profiles import get_profile
from fleetwatch.core.rules import AlertingRule
from fleetwatch.dashboards.alerts import alert_rules, rules_document
from fleetwatch.dashboards.build import build_dashboard, render_all
from fleetwatch.dashboards.errors import DashboardError
from fleetwatch.dashboards.names import RESILIENCE, allowed_names
from fleetwatch.dashboards.promql import metric_names
from fleetwatch.dashboards.views import views_for

RESILIENCE_ALERTS = {"FleetwatchBreakerOpen", "FleetwatchRetryBudgetExhausted"}
LIBRARY = "fleetwatch's resilience library"


@pytest.mark.parametrize("profile", ["vllm", "sglang"])
def test_engine_profiles_get_no_resilience_dashboard_or_alerts(profile: str) -> None:
    engine = get_profile(profile)
    assert "resilience" not in views_for(engine)
    assert not any(name.startswith(f"{profile}-resilience") for name in render_all([profile]))
    with pytest.raises(DashboardError, match=r"fleetwatch-resilience\.json"):
        build_dashboard(engine, "resilience")
    names = {a.name for a in alert_rules(engine)}
    assert not names & RESILIENCE_ALERTS
    resilience_names = {ref.name for ref in RESILIENCE.values()}
    assert not resilience_names & allowed_names(engine)
    for alert in alert_rules(engine):
        assert not metric_names(alert.expr) & resilience_names, alert.name
    # The descriptions of an engine's dashboards name only that engine's /metrics.
    for name, text in render_all([profile]).items():
        assert "circuit_breaker" not in text, name


def test_the_fleetwatch_profile_keeps_them_and_every_description_says_where_they_come_from() -> (
    None
):
    fleetwatch = get_profile("fleetwatch")
    assert "resilience" in views_for(fleetwatch)
    dashboard = json.loads(render_all(["fleetwatch"])["fleetwatch-resilience.json"])
    assert LIBRARY in dashboard["description"] and "client" in dashboard["description"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert LIBRARY in panel["description"], panel["title"]
        assert "resilience." in panel["description"], panel["title"]
    alerts = {a.name: a for a in alert_rules(fleetwatch)}
    assert set(alerts) >= RESILIENCE_ALERTS
    for name in RESILIENCE_ALERTS:
        assert LIBRARY in alerts[name].description and "client" in alerts[name].description


def test_an_engine_fleet_whose_clients_use_the_library_asks_for_the_alerts(tmp_path: Path) -> None:
    vllm = get_profile("vllm")
    rules = rules_document(vllm, resilience=True).groups[0].rules
    names = [r.alert for r in rules if isinstance(r, AlertingRule)]
    assert set(names) >= RESILIENCE_ALERTS
    out = tmp_path / "ops.rules.yaml"
    assert main(["dashboards", "alerts", "--profile", "vllm", "--resilience", "-o", str(out)]) == 0
    written = {r["alert"] for r in yaml.safe_load(out.read_text())["groups"][0]["rules"]}
    assert written >= RESILIENCE_ALERTS
    tests = yaml.safe_load((tmp_path / "ops.rules.test.yaml").read_text())
    assert {t["name"] for t in tests["tests"]} >= {"FleetwatchBreakerOpen firing"}
    assert main(["dashboards", "alerts", "--profile", "vllm", "-o", str(out)]) == 0
    written = {r["alert"] for r in yaml.safe_load(out.read_text())["groups"][0]["rules"]}
    assert not written & RESILIENCE_ALERTS
    assert (
        main(["dashboards", "alerts", "--profile", "fleetwatch", "--no-resilience", "-o", str(out)])
        == 0
    )
    written = {r["alert"] for r in yaml.safe_load(out.read_text())["groups"][0]["rules"]}
    assert not written & RESILIENCE_ALERTS
