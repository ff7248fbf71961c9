"""Operational alert rules: promtool-valid, proven by their generated unit tests, profile-bound."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from fleetwatch.cli import main
from fleetwatch.core.profiles import get_profile
from fleetwatch.core.rules import AlertingRule
from fleetwatch.dashboards.alerts import (
    ALERT_PAGES,
    alert_rules,
    alert_tests,
    render_yaml,
    rules_document,
)
from fleetwatch.dashboards.names import allowed_names
from fleetwatch.dashboards.promql import metric_names
from tests.promtool_run import promtool_test

PROFILES = ("fleetwatch", "vllm", "sglang")


def _names(profile: str) -> list[str]:
    return [a.name for a in alert_rules(get_profile(profile))]


def test_alerts_are_left_out_where_the_profile_lacks_the_signal() -> None:
    assert _names("fleetwatch") == [
        "FleetwatchKVCachePressure",
        "FleetwatchPreemptionStorm",
        "FleetwatchGPUThrottling",
        "FleetwatchReplicaDown",
        "FleetwatchQueueGrowing",
        "FleetwatchTelemetryDrops",
        "FleetwatchBreakerOpen",
        "FleetwatchRetryBudgetExhausted",
    ]
    assert "FleetwatchGPUThrottling" not in _names("vllm")
    assert _names("vllm") == [
        "FleetwatchKVCachePressure",
        "FleetwatchPreemptionStorm",
        "FleetwatchReplicaDown",
        "FleetwatchQueueGrowing",
        "FleetwatchTelemetryDrops",
    ]
    assert "FleetwatchPreemptionStorm" not in _names("sglang")
    assert set(ALERT_PAGES) == set(_names("fleetwatch"))


def test_alert_expressions_read_only_exported_metrics() -> None:
    for profile in PROFILES:
        allowed = allowed_names(get_profile(profile))
        for alert in alert_rules(get_profile(profile)):
            assert metric_names(alert.expr) <= allowed, (profile, alert.name)


def test_every_alert_carries_severity_and_a_runbook_url() -> None:
    doc = rules_document(get_profile("vllm"), runbook_base="https://example.org/runbooks/")
    for rule in doc.groups[0].rules:
        assert isinstance(rule, AlertingRule)
        assert rule.labels["severity"] in ("page", "ticket")
        assert rule.annotations["runbook_url"] == (
            f"https://example.org/runbooks/{ALERT_PAGES[rule.alert]}"
        )


@pytest.mark.parametrize("profile", PROFILES)
def test_generated_rules_pass_promtool_check_and_their_unit_tests(
    profile: str, promtool: Path, tmp_path: Path
) -> None:
    rules = tmp_path / f"{profile}.rules.yaml"
    tests = tmp_path / f"{profile}.rules.test.yaml"
    rules.write_text(render_yaml(rules_document(get_profile(profile))))
    tests.write_text(render_yaml(alert_tests(get_profile(profile), rules.name)))
    for args in (["check", "rules", str(rules)], ["test", "rules", str(tests)]):
        result = subprocess.run(
            [str(promtool), *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("profile", ["vllm", "fleetwatch"])
def test_rules_under_a_regex_scheme_pass_their_unit_tests(
    profile: str, promtool: Path, tmp_path: Path
) -> None:
    """Input series carry the values the scheme's matchers select, never the matchers."""
    from fleetwatch.core.profiles.labels import LabelScheme, parse_matcher_list

    scheme = LabelScheme(
        replica=("namespace", "pod"),
        routing=("namespace",),
        matchers=parse_matcher_list(('job="vllm"', 'namespace=~"llm-.*"')),
    )
    chosen = scheme.apply(get_profile(profile))
    rules = tmp_path / f"{profile}.rules.yaml"
    rules.write_text(render_yaml(rules_document(chosen)))
    result = promtool_test(promtool, tmp_path, render_yaml(alert_tests(chosen, rules.name)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_unit_tests_cover_firing_and_healthy_traffic_for_every_alert() -> None:
    doc = alert_tests(get_profile("fleetwatch"), "r.yaml")
    names = [t.name for t in doc.tests]
    for alert in _names("fleetwatch"):
        assert f"{alert} firing" in names and f"{alert} healthy" in names
    healthy = [t for t in doc.tests if t.name and t.name.endswith("healthy")]
    assert all(t.alert_rule_test[0].exp_alerts == () for t in healthy)


def test_cli_writes_rules_and_their_promtool_test(tmp_path: Path) -> None:
    out = tmp_path / "ops.rules.yaml"
    assert main(["dashboards", "alerts", "--profile", "sglang", "-o", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert [r["alert"] for r in doc["groups"][0]["rules"]] == _names("sglang")
    test_doc = yaml.safe_load((tmp_path / "ops.rules.test.yaml").read_text())
    assert test_doc["rule_files"] == ["ops.rules.yaml"]
    assert main(["dashboards", "alerts", "--profile", "nosuch", "-o", str(out)]) == 2
