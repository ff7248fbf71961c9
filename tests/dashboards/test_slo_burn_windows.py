"""The SLO overview's burn-rate panel shows every window the generated rules record, for SLOs of
any period (the rules scale the Workbook windows to each SLO's period)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from fleetwatch.core.profiles import get_profile
from fleetwatch.core.rules import RecordingRule
from fleetwatch.dashboards.build import render_all
from fleetwatch.slo.load import read_spec
from fleetwatch.slo.rules import generate_rules

EXAMPLES = Path(__file__).resolve().parents[2] / "slo" / "examples"


def _recorded_error_ratios() -> list[dict[str, str]]:
    """Labels of each per-window error-ratio series the rules for chat.yaml record (SLOs of
    30, 28 and 7 days)."""
    ruleset = generate_rules(read_spec(EXAMPLES / "chat.yaml"), get_profile("fleetwatch"))
    return [
        {"__name__": rule.record, **rule.labels}
        for group in ruleset.groups
        for rule in group.rules
        if isinstance(rule, RecordingRule) and rule.record.startswith("slo:sli_error:ratio_rate")
    ]


def _burn_panel_exprs() -> list[str]:
    dashboard = json.loads(render_all(["fleetwatch"])["fleetwatch-slo.json"])
    panel = next(p for p in dashboard["panels"] if p["title"] == "Burn rate per window")
    return [t["expr"].replace("$slo", ".+") for t in panel["targets"]]


def _series(labels: dict[str, str]) -> str:
    name = labels["__name__"]
    rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


def test_every_window_of_every_slo_is_on_the_burn_rate_panel(
    promtool: Path, tmp_path: Path
) -> None:
    recorded = _recorded_error_ratios()
    periods = {labels["slo"] for labels in recorded}
    assert len(periods) >= 3
    windows = {labels["window"] for labels in recorded}
    assert {"56m", "14m"} & windows, "a 28- or 7-day SLO scales the 30-day windows"
    budgets = {(labels["service"], labels["slo"]) for labels in recorded}
    input_series = [{"series": _series(labels), "values": "0.002x2"} for labels in recorded]
    input_series += [
        {"series": f'slo:error_budget:ratio{{service="{service}",slo="{slo}"}}', "values": "0.01x2"}
        for service, slo in sorted(budgets)
    ]
    shown = " or ".join(f"({expr})" for expr in _burn_panel_exprs())
    expected = [
        {
            "labels": f'{{service="{lb["service"]}",slo="{lb["slo"]}",window="{lb["window"]}"}}',
            "value": 1,
        }
        for lb in recorded
    ]
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series,
                "promql_expr_test": [
                    {
                        "expr": f"count by (service, slo, window) ({shown})",
                        "eval_time": "1m",
                        "exp_samples": expected,
                    }
                ],
            }
        ],
    }
    path = tmp_path / "burn_windows.test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        [str(promtool), "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
