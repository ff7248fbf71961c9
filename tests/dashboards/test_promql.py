"""Every dashboard expression parses with promtool and reads only what its profile exports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fleetwatch.core.profiles import get_profile
from fleetwatch.dashboards.build import DASHBOARD_PROFILES, check_names, dashboard_expressions
from fleetwatch.dashboards.errors import DashboardError
from fleetwatch.dashboards.names import unknown_names
from fleetwatch.dashboards.panels import PanelSpec, Query
from fleetwatch.dashboards.promql import concrete, metric_names
from fleetwatch.dashboards.views import views_for


def _all_expressions() -> list[tuple[str, str, str]]:
    return [
        (profile, view, expr)
        for profile in DASHBOARD_PROFILES
        for view in views_for(get_profile(profile))
        for expr in dashboard_expressions(get_profile(profile), view)
    ]


def test_metric_names_skips_functions_labels_and_durations() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, replica) (rate(x_bucket{model=~"$model"}'
        "[$__rate_interval]))) / on (model) group_left () quantile by (model) (0.5, "
        "vllm:num_requests_running offset 1h) > bool 1e3"
    )
    assert metric_names(expr) == {"x_bucket", "vllm:num_requests_running"}


def test_concrete_replaces_template_variables_and_rejects_unknown_ones() -> None:
    assert concrete('rate(x{r=~"$replica"}[$__rate_interval])') == 'rate(x{r=~"replica-0"}[5m])'
    assert concrete('x{m=~"${model}"}') == 'x{m=~"model-a"}'
    with pytest.raises(DashboardError, match=r"\$cluster"):
        concrete('x{c="$cluster"}')


def test_every_expression_names_only_metrics_its_profile_exports() -> None:
    for profile, view, expr in _all_expressions():
        stray = unknown_names(get_profile(profile), metric_names(expr))
        assert not stray, (profile, view, expr)
    vllm = {n for p, _, e in _all_expressions() if p == "vllm" for n in metric_names(e)}
    assert not any(n.startswith(("gen_ai_", "sglang:", "fleetwatch_gpu")) for n in vllm)


def test_a_panel_naming_a_foreign_metric_is_refused() -> None:
    panel = PanelSpec("bad", "", (Query("rate(sglang:num_running_reqs[5m])"),), "short")
    with pytest.raises(DashboardError, match=r"sglang:num_running_reqs.*'vllm'"):
        check_names(get_profile("vllm"), "vllm-fleet.json", [panel])


def test_every_expression_passes_promtool_check_rules(check_exprs: Callable[..., Any]) -> None:
    exprs = [concrete(expr) for _, _, expr in _all_expressions()]
    assert len(exprs) > 100
    result = check_exprs("dashboard", exprs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(exprs)} rules found" in result.stdout


def test_error_ratio_rules_pass_for_any_window_and_nothing_else() -> None:
    fleetwatch = get_profile("fleetwatch")
    assert not unknown_names(fleetwatch, {"slo:sli_error:ratio_rate56m", "slo:objective:ratio"})
    assert unknown_names(
        fleetwatch, {"slo:sli_error:ratio_rate", "slo:sli_error:ratio_rate5x", "slo:other:ratio"}
    ) == {"slo:sli_error:ratio_rate", "slo:sli_error:ratio_rate5x", "slo:other:ratio"}
