"""Dashboards: the committed JSON is what the builders produce, and each view fits its profile."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.dashboards.build import DASHBOARD_PROFILES, drifted, file_name, render_all
from fleetwatch.dashboards.views import VIEWS

COMMITTED = Path(__file__).resolve().parents[2] / "dashboards" / "json"


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict]:
    return {name: json.loads(text) for name, text in render_all().items()}


def _panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def _titles(dashboard: dict) -> set[str]:
    return {p["title"] for p in dashboard["panels"]}


def test_committed_dashboards_match_a_fresh_build(tmp_path: Path) -> None:
    assert main(["dashboards", "build", "--out", str(tmp_path)]) == 0
    fresh = sorted(p.name for p in tmp_path.glob("*.json"))
    assert fresh == sorted(p.name for p in COMMITTED.glob("*.json")), "run make dashboards"
    for name in fresh:
        assert (COMMITTED / name).read_text() == (tmp_path / name).read_text(), (
            f"dashboards/json/{name} drifted: run make dashboards"
        )


def test_check_mode_fails_on_drift_and_passes_when_current(tmp_path: Path) -> None:
    assert main(["dashboards", "build", "--out", str(tmp_path)]) == 0
    assert main(["dashboards", "build", "--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "vllm-fleet.json").write_text("{}\n")
    (tmp_path / "stale-view.json").write_text("{}\n")
    assert main(["dashboards", "build", "--out", str(tmp_path), "--check"]) == 2
    assert drifted(tmp_path, render_all()) == (
        "vllm-fleet.json (differs)",
        "stale-view.json (not generated)",
    )


def test_build_is_deterministic_with_sorted_keys() -> None:
    first, second = render_all(), render_all()
    assert first == second
    for text in first.values():
        assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def test_every_profile_gets_its_views(rendered: dict[str, dict]) -> None:
    # The resilience view reads the resilience library's series, which only the fleetwatch
    # profile includes (see dashboards/names.py RESILIENCE_PROFILES).
    expected = {file_name(p, v) for p in DASHBOARD_PROFILES for v in VIEWS}
    expected -= {"vllm-resilience.json", "sglang-resilience.json"}
    assert set(rendered) == expected
    assert {"slo", "fleet", "replica", "resilience"} == set(VIEWS)


def test_every_dashboard_has_datasource_model_and_replica_variables(
    rendered: dict[str, dict],
) -> None:
    for name, dashboard in rendered.items():
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert {"datasource", "model", "replica"} <= set(variables), name
        assert variables["datasource"]["type"] == "datasource"
        assert variables["replica"]["includeAll"] and variables["replica"]["multi"]
    vllm = {v["name"]: v for v in rendered["vllm-fleet.json"]["templating"]["list"]}
    assert vllm["replica"]["query"] == (
        'label_values(vllm:request_success_total{model_name=~"$model"}, instance)'
    )


def test_panel_ids_are_unique_and_every_target_uses_the_datasource_variable(
    rendered: dict[str, dict],
) -> None:
    for name, dashboard in rendered.items():
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids)), name
        assert dashboard["uid"] == f"fleetwatch-{name.removesuffix('.json')}"
        for panel in _panels(dashboard):
            assert panel["targets"], (name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}"
                assert target["refId"]


def test_panels_whose_signal_the_profile_lacks_are_left_out(rendered: dict[str, dict]) -> None:
    assert "Time per output token: fleet p50 and p99" in _titles(rendered["vllm-fleet.json"])
    sglang = _titles(rendered["sglang-fleet.json"])
    assert not any(t.startswith("Time per output token") for t in sglang)
    assert "Inter-token latency: p99 against the fleet median" in sglang
    assert "GPU" not in _titles(rendered["vllm-replica.json"])
    assert "Preemptions per second" not in _titles(rendered["sglang-replica.json"])
    assert "Preemptions per second" in _titles(rendered["vllm-replica.json"])


def test_gpu_row_puts_utilization_gpu_beside_the_counters_that_matter(
    rendered: dict[str, dict],
) -> None:
    panels = rendered["fleetwatch-replica.json"]["panels"]
    titles = [p["title"] for p in panels]
    gpu = titles.index("GPU")
    misleading = titles.index("utilization.gpu: the number that misleads")
    # The row opens with whether there is a GPU at all, then the misleading number first.
    assert titles[gpu + 1] == "GPU available"
    assert misleading == gpu + 2 and titles[misleading + 1] == "SM activity"
    described = panels[misleading]["description"]
    assert "time" in described and "not chip busy" in described
    for needed in (
        "SM occupancy",
        "Tensor pipe activity",
        "DRAM bandwidth",
        "SM clock against max",
        "Throttle reasons",
        "Power draw",
    ):
        assert needed in titles[gpu:], needed


def test_units_come_from_the_sdk_unit_table(rendered: dict[str, dict]) -> None:
    fleet = {p["title"]: p for p in _panels(rendered["fleetwatch-fleet.json"])}
    assert fleet["Time to first token: fleet p50 and p99"]["fieldConfig"]["defaults"]["unit"] == "s"
    assert fleet["Finished requests per second"]["fieldConfig"]["defaults"]["unit"] == "reqps"
    assert fleet["Error ratio per model"]["fieldConfig"]["defaults"]["unit"] == "percentunit"


def test_slo_overview_reads_the_slo_recording_rules(rendered: dict[str, dict]) -> None:
    slo = {p["title"]: p for p in _panels(rendered["fleetwatch-slo.json"])}
    budget = slo["Error budget remaining"]["targets"][0]["expr"]
    assert budget == 'slo:period_error_budget_remaining:ratio{slo=~"$slo"}'
    (burn,) = slo["Burn rate per window"]["targets"]
    assert burn["expr"].startswith('{__name__=~"slo:sli_error:ratio_rate.+",slo=~"$slo"} / ')
    assert burn["legendFormat"].endswith("{{window}}")
    assert "ALERTS" in slo["Alert state"]["targets"][0]["expr"]


def test_heatmaps_carry_a_usable_colour_scale(rendered: dict[str, dict]) -> None:
    """The SDK's zero defaults (0 steps, exponent 0, no fill) draw every cell in one colour."""
    heatmaps = [
        (name, p)
        for name, dashboard in rendered.items()
        for p in _panels(dashboard)
        if p["type"] == "heatmap"
    ]
    assert heatmaps
    for name, panel in heatmaps:
        color = panel["options"]["color"]
        where = (name, panel["title"])
        assert color["mode"] == "scheme" and color["scheme"], where
        assert 2 <= color["steps"] <= 128, where
        assert color["scale"] == "exponential" and 0 < color["exponent"] <= 1, where
        assert color["fill"], where


def test_import_asks_for_a_prometheus_data_source(rendered: dict[str, dict]) -> None:
    """Grafana's import dialog offers a data-source picker only for ``__inputs``; the choice
    replaces ``${DS_PROMETHEUS}`` and becomes the ``datasource`` variable's default, which
    every panel reads, so provisioned files (no import step) keep working through the variable."""
    for name, dashboard in rendered.items():
        assert dashboard["__inputs"] == [
            {
                "name": "DS_PROMETHEUS",
                "label": "Prometheus",
                "description": "",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ], name
        requires = {(r["type"], r["id"]) for r in dashboard["__requires"]}
        used = {("panel", p["type"]) for p in _panels(dashboard)}
        assert requires == {("grafana", "grafana"), ("datasource", "prometheus")} | used, name
        variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
        assert variable["type"] == "datasource" and variable["query"] == "prometheus"
        assert variable["current"]["value"] == "${DS_PROMETHEUS}", name
        text = json.dumps(dashboard)
        assert text.count("${DS_PROMETHEUS}") == 2, name  # the variable's current text and value
        for panel in _panels(dashboard):
            assert panel["datasource"]["uid"] == "${datasource}", (name, panel["title"])


def test_tags_name_the_project_profile_and_view_once_each(rendered: dict[str, dict]) -> None:
    assert rendered["fleetwatch-replica.json"]["tags"] == ["fleetwatch", "replica"]
    assert rendered["vllm-slo.json"]["tags"] == ["fleetwatch", "vllm", "slo"]
    for name, dashboard in rendered.items():
        assert len(dashboard["tags"]) == len(set(dashboard["tags"])), name


def _row_of(dashboard: dict) -> dict[str, str]:
    """Panel title -> title of the row above it."""
    rows, row = {}, ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        else:
            rows[panel["title"]] = row
    return rows


def test_achieved_rates_sit_beside_mbu_and_mfu_on_the_replica_dashboard(
    rendered: dict[str, dict],
) -> None:
    replica = rendered["fleetwatch-replica.json"]
    rows = _row_of(replica)
    reads = {t["expr"]: p["title"] for p in _panels(replica) for t in p["targets"] if "expr" in t}
    for metric in (
        "fleetwatch_achieved_memory_bandwidth_bytes_per_second",
        "fleetwatch_achieved_flops_per_second",
        "fleetwatch_memory_bandwidth_utilization_ratio",
        "fleetwatch_flops_utilization_ratio",
    ):
        (title,) = [title for expr, title in reads.items() if metric in expr]
        assert rows[title] == "GPU efficiency", (metric, title)
        (expr,) = [e for e, t in reads.items() if t == title]
        # engine gauges carry model and replica, not a gpu label
        assert expr.startswith("avg by (replica) (") and 'model=~"$model"' in expr, expr
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in _panels(replica)}
    assert units["Achieved memory bandwidth"] == "Bps"
    assert units["Achieved FLOP/s"] == "flops"


def test_the_fleet_view_draws_a_line_per_model_and_the_worst_replicas_not_every_one() -> None:
    """At 200 replicas a per-replica panel is 200 lines: the fleet view shows each model's
    fleet, and the $topk worst replicas where a panel is per replica."""
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.dashboards.build import dashboard_expressions

    exprs = dashboard_expressions(get_profile("vllm"), "fleet")
    per_replica = [e for e in exprs if re.search(r"by \((le, )?instance\b", e)]
    assert len(per_replica) >= 8
    assert all(re.match(r"(topk|bottomk)\(\$topk, ", e) for e in per_replica), per_replica
    doc = json.loads(render_all(("vllm",))["vllm-fleet.json"])
    topk = {v["name"]: v for v in doc["templating"]["list"]}["topk"]
    assert topk["type"] == "custom" and topk["current"]["value"] == "10"
