"""Generated outlier rules pass promtool check and their own promtool unit test, per profile."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from fleetwatch.core.profiles import PROFILES, get_profile
from fleetwatch.core.rules import AlertingRule, RecordingRule
from fleetwatch.fleet.outliers.rules.generate import (
    ALERT_NAME,
    RuleOptions,
    outlier_rules,
    outlier_rules_test,
    render_yaml,
)


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
    rules = outlier_rules(get_profile("vllm")).groups[0].rules
    exprs = {r.record: r.expr for r in rules if isinstance(r, RecordingRule)}
    median = exprs["fleet:fleet_ttft_seconds:p50_5m_median"]
    assert median == (
        "quantile by (model_name) (0.5, replica:fleet_ttft_seconds:p50_5m"
        " and on (model_name, instance) (replica:fleet_requests:rate5m_peers))"
    )
    peers = exprs["replica:fleet_requests:rate5m_peers"]
    assert "replica:fleet_prompt_tokens:per_request_5m_ratio_to_median > 1.25" in peers
    assert "vllm:time_to_first_token_seconds_bucket" in exprs["replica:fleet_ttft_seconds:p50_5m"]
    alerts = [r for r in rules if isinstance(r, AlertingRule)]
    assert {a.alert for a in alerts} == {ALERT_NAME}
    assert {a.labels["signal"] for a in alerts} == {"ttft", "tpot", "e2e", "error"}
    assert all(a.annotations["runbook_url"] == "runbooks/replica-outlier.md" for a in alerts)
    assert all(
        a.annotations["dashboard_url"] == "/d/fleetwatch-vllm-replica?var-model="
        "{{ $labels.model_name | urlquery }}&var-replica={{ $labels.instance | urlquery }}"
        for a in alerts
    )
    assert all(
        "`fleetwatch fleet outliers --prometheus {{ $externalURL }} --profile vllm`"
        in a.annotations["description"]
        for a in alerts
    )


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


def _replay(tmp_path, promtool, options, exprs):
    """promtool unit test of the rules over a busy demo run's scraped series (see the fixture's
    ``source``); ``exprs``: (PromQL at the end of the run, expected samples)."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "data" / "demo-busy-run.series.json").read_text())
    end = f"{len(data['input_series'][0]['values'].split()) - 1}s"
    (tmp_path / "rules.yaml").write_text(
        render_yaml(outlier_rules(get_profile("fleetwatch"), options))
    )
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1s",
        "tests": [
            {
                "interval": "1s",
                "input_series": data["input_series"],
                "promql_expr_test": [
                    {"expr": e, "eval_time": end, "exp_samples": s} for e, s in exprs
                ],
            }
        ],
    }
    (tmp_path / "replay.test.yaml").write_text(render_yaml(test))
    return subprocess.run(
        [str(promtool), "test", "rules", "replay.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


# The demo's rule options: a 30 s window and `for: 10s` (fleetwatch.demo.artifacts).
DEMO_OPTIONS = RuleOptions(window="30s", for_="10s")


def _fired(replica, signal=None):
    sig = f',signal="{signal}"' if signal else ""
    return (
        f'count by (replica) (max_over_time(ALERTS{{alertname="{ALERT_NAME}",'
        f'alertstate="firing",replica="{replica}"{sig}}}[70s]))'
    )


@pytest.mark.promtool
def test_busy_demo_run_flags_the_slowed_replica_and_not_the_long_prompt_one(tmp_path, promtool):
    """In this run replica-1 (5x slower steps) finished its first request 18 s in, replica-3
    (long prompts) had 10x the healthy TPOT: compared with the other three while replica-1 had no
    data, replica-3 fired; compared with all, replica-1's robust z hovered around the cutoff."""
    done = _replay(
        tmp_path,
        promtool,
        DEMO_OPTIONS,
        [
            (_fired("replica-3"), []),
            (_fired("replica-0"), []),
            (_fired("replica-2"), []),
            *(
                (_fired("replica-1", s), [{"labels": '{replica="replica-1"}', "value": 1}])
                for s in ("ttft", "tpot", "e2e")
            ),
        ],
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.promtool
def test_busy_demo_run_without_the_prompt_mix_gate_blames_the_long_prompt_replica(
    tmp_path, promtool
):
    """The same run with every replica compared with all (the gate made unreachable): replica-3
    fires, so the replay above tests the gate and not the data."""
    done = _replay(
        tmp_path,
        promtool,
        RuleOptions(window="30s", for_="10s", mix_ratio=1e9),
        [(_fired("replica-3"), [])],
    )
    assert done.returncode != 0
    assert 'replica="replica-3"' in done.stdout + done.stderr
