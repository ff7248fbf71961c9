"""Generated outlier rules pass promtool check and their own promtool unit test, per profile."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from fleet.outliers.rules import (
    ALERT_NAME,
    RUNBOOK,
    RuleOptions,
    outlier_rules,
    outlier_rules_test,
    render_yaml,
)
from telemetry.profiles import PROFILES, get_profile


@pytest.mark.promtool
@pytest.mark.parametrize(
    ("name", "options"),
    [
        *((name, RuleOptions()) for name in sorted(PROFILES)),
        ("fleetwatch", RuleOptions(window="30s", for_="10s")),
        ("vllm", RuleOptions(window="1m", for_="0s")),
    ],
)
def test_rules_pass_promtool_check_and_test(tmp_path, promtool, name, options):
    profile = get_profile(name)
    (tmp_path / "rules.yaml").write_text(render_yaml(outlier_rules(profile, options)))
    (tmp_path / "rules.test.yaml").write_text(
        render_yaml(outlier_rules_test(profile, "rules.yaml", options))
    )
    check = subprocess.run(
        [str(promtool), "check", "rules", "rules.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run(
        [str(promtool), "test", "rules", "rules.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert test.returncode == 0, test.stdout + test.stderr


def test_each_replica_is_compared_with_the_fleet_median_of_its_model():
    doc = outlier_rules(get_profile("vllm"))
    rules = doc["groups"][0]["rules"]
    exprs = {r.get("record"): r["expr"] for r in rules if "record" in r}
    median = exprs["fleet:fleet_ttft_seconds:p50_5m_median"]
    assert median == "quantile by (model_name) (0.5, replica:fleet_ttft_seconds:p50_5m)"
    assert "vllm:time_to_first_token_seconds_bucket" in exprs["replica:fleet_ttft_seconds:p50_5m"]
    alerts = [r for r in rules if "alert" in r]
    assert {a["alert"] for a in alerts} == {ALERT_NAME}
    assert {a["labels"]["signal"] for a in alerts} == {"ttft", "tpot", "e2e", "error"}
    assert all(a["annotations"]["runbook_url"] == RUNBOOK for a in alerts)


def test_rules_yaml_round_trips():
    text = render_yaml(outlier_rules(get_profile("tgi")))
    assert yaml.safe_load(text)["groups"][0]["name"] == "fleetwatch-fleet-outliers-tgi"


@pytest.mark.parametrize("name", ["fleetwatch", "vllm"])
def test_generated_rules_match_the_golden_files(name):
    """Regenerate with: fleetwatch fleet rules --profile NAME -o tests/fleet/golden/outlier-rules-NAME.yaml"""
    from pathlib import Path

    golden = Path(__file__).parent / "golden" / f"outlier-rules-{name}.yaml"
    test_golden = golden.with_name(golden.stem + ".test.yaml")
    profile = get_profile(name)
    assert render_yaml(outlier_rules(profile)) == golden.read_text()
    assert render_yaml(outlier_rules_test(profile, golden.name)) == test_golden.read_text()
