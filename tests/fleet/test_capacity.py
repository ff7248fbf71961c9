"""Capacity plan from a probe curve, queue-depth manifests and rules (promtool), the CLI."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetwatch.cli import main
from fleetwatch.core.profiles import PROFILES, get_profile
from fleetwatch.fleet.capacity.manifests import (
    QUEUE_SUM,
    ScaleTarget,
    capacity_rules,
    capacity_rules_test,
    hpa_manifest,
    keda_manifest,
    render_yaml,
)
from fleetwatch.fleet.capacity.plan import CurvePoint, PlanInputs, curve_from_probe, plan_capacity
from fleetwatch.fleet.errors import AnalysisError


def _dist(x: float) -> dict[str, float]:
    return {"n": 100, "mean": x, "p50": x / 2, "p90": x * 0.8, "p99": x, "p999": x, "max": x}


def probe_doc(loads=(1, 2, 4, 6, 8), ttft_per_load=0.1, tpot=0.02) -> dict:
    """The shape `fleetwatch probe run --json` writes (open loop)."""
    return {
        "url": "http://x",
        "plan": {
            "mode": "open",
            "targets": {"ttft_s": 1, "tpot_s": 0.1, "ttft_from_schedule": True},
        },
        "levels": [
            {
                "label": f"{load}/s",
                "mode": "open",
                "rate": load,
                "concurrency": None,
                "request_throughput": load * 0.98,
                "ttft": _dist(0.05),
                "ttft_sched": _dist(ttft_per_load * load),
                "tpot": _dist(tpot),
            }
            for load in loads
        ],
        "capacity": 8,
        "capacity_unit": "requests/s",
    }


INPUTS = PlanInputs(
    rate_per_s=10, peak_rate_per_s=30, burst_s=120, ttft_s=0.65, tpot_s=0.05, cold_start_s=120
)


def test_sustainable_rate_is_the_highest_load_holding_the_slo():
    curve = curve_from_probe(probe_doc())
    plan = plan_capacity(curve, INPUTS)  # TTFT p99 = 0.1 x load: 6/s is the last at <= 0.65 s
    assert plan.sustainable_per_replica == 6
    assert plan.usable_per_replica == pytest.approx(4.8)
    assert plan.replicas == 3  # ceil(10 / 4.8)
    assert plan.peak_replicas == 7  # ceil(30 / 4.8)
    assert plan.burst_excess_per_s == pytest.approx(30 - 3 * 4.8)
    assert plan.warm_pool_requests == pytest.approx(
        (30 - 14.4) * 120
    )  # Little: excess x cold start
    assert plan.warm_pool_replicas == 4  # ceil(15.6 / 4.8)
    assert plan.scale_up_delay_s == 135
    assert plan.cooldown_s == 240
    assert plan.queue_target_per_replica == 1  # floor(4.8 x 0.65 / 2)


def test_a_lucky_level_above_a_failing_one_does_not_count():
    curve = [CurvePoint(1, 1, 0.1, 0.01), CurvePoint(2, 2, 9.0, 0.01), CurvePoint(3, 3, 0.1, 0.01)]
    assert plan_capacity(curve, INPUTS).sustainable_per_replica == 1


def test_a_short_burst_needs_no_more_than_its_excess_and_no_burst_no_pool():
    curve = curve_from_probe(probe_doc())
    flat = PlanInputs(10, 10, 0, 0.65, 0.05, 120)
    assert plan_capacity(curve, flat).warm_pool_replicas == 0
    short = PlanInputs(10, 30, 30, 0.65, 0.05, 120)
    assert plan_capacity(curve, short).warm_pool_requests == pytest.approx(15.6 * 30)


def test_no_level_holding_the_slo_says_so():
    with pytest.raises(AnalysisError, match="no probed load holds"):
        plan_capacity(curve_from_probe(probe_doc(ttft_per_load=1.0)), INPUTS)


@pytest.mark.parametrize("bad", [{}, {"levels": []}, {"levels": [{"rate": 1}]}])
def test_malformed_probe_documents_are_refused(bad):
    with pytest.raises(AnalysisError):
        curve_from_probe(bad)


def test_closed_loop_curves_use_the_achieved_rate():
    doc = probe_doc()
    for level in doc["levels"]:
        level["concurrency"], level["rate"] = level["rate"], None
    assert [c.rate_per_s for c in curve_from_probe(doc)][:2] == [0.98, 1.96]


@pytest.mark.promtool
@pytest.mark.parametrize("name", sorted(PROFILES))
def test_rules_pass_promtool_check_and_test(tmp_path, promtool, name):
    profile = get_profile(name)
    plan = plan_capacity(curve_from_probe(probe_doc()), INPUTS)
    (tmp_path / "capacity.rules.yaml").write_text(render_yaml(capacity_rules(profile, plan)))
    (tmp_path / "capacity.rules.test.yaml").write_text(
        render_yaml(capacity_rules_test(profile, plan, "capacity.rules.yaml"))
    )
    for args in (
        ["check", "rules", "capacity.rules.yaml"],
        ["test", "rules", "capacity.rules.test.yaml"],
    ):
        out = subprocess.run([str(promtool), *args], cwd=tmp_path, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("name", "gauge"),
    [
        ("vllm", "vllm:num_requests_waiting"),
        ("sglang", "sglang:num_queue_reqs"),
        ("fleetwatch", "fleetwatch_num_requests_waiting"),
    ],
)
def test_manifests_scale_on_the_profiles_waiting_gauge(name, gauge):
    profile = get_profile(name)
    plan = plan_capacity(curve_from_probe(probe_doc()), INPUTS)
    target = ScaleTarget(name="llm", namespace="ai", model="llama")
    hpa = hpa_manifest(profile, plan, target)
    assert hpa["apiVersion"] == "autoscaling/v2"
    metric = hpa["spec"]["metrics"][0]["external"]
    assert metric["metric"]["name"] == QUEUE_SUM
    assert metric["metric"]["selector"]["matchLabels"] == {profile.model_label: "llama"}
    assert metric["target"] == {"type": "AverageValue", "averageValue": "1"}
    assert hpa["spec"]["minReplicas"] == plan.replicas + plan.warm_pool_replicas
    assert hpa["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 240
    keda = keda_manifest(profile, plan, target)
    trigger = keda["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == f'sum({gauge}{{{profile.model_label}="llama"}})'
    assert gauge in capacity_rules(profile, plan).groups[0].rules[0].expr


def test_cli_prints_the_plan_and_writes_manifests(tmp_path, capsys):
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(probe_doc()))
    out = tmp_path / "out"
    argv = ["fleet", "capacity", str(probe), "--rate", "10", "--peak-rate", "30", "--ttft", "0.65"]
    argv += ["--tpot", "0.05", "--cold-start", "120", "-o", str(out), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["plan"]["replicas"] == 3 and doc["plan"]["warm_pool_replicas"] == 4
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "capacity.rules.prometheusrule.yaml",
        "capacity.rules.test.yaml",
        "capacity.rules.yaml",
        "hpa.yaml",
        "keda.yaml",
    ]
    assert yaml.safe_load((out / "keda.yaml").read_text())["kind"] == "ScaledObject"
    assert main(["fleet", "capacity", str(probe), "--ttft", "0.001"]) == 2
    assert "no probed load holds" in capsys.readouterr().err
    assert not math.isnan(doc["plan"]["usable_per_replica"])


MODELS = Path(__file__).resolve().parents[1] / "serve" / "models"


def test_a_plan_from_the_model_arithmetic_is_the_bound_probe_bound_reports(tmp_path, capsys):
    """No probe run: the per-replica rate is the largest batch whose bound step meets the TPOT
    target, over the output tokens a request (the same report ``probe bound`` prints), labelled an
    upper bound; a tighter TPOT picks a smaller batch; -o writes the plan's manifests."""
    from fleetwatch.core.bound import capacity_report
    from fleetwatch.core.model import load_shape
    from fleetwatch.telemetry.gpu.specs import find_gpu

    config = MODELS / "llama-3.1-70b.json"
    out = tmp_path / "out"
    argv = ["fleet", "capacity", "--model-config", str(config), "--gpu", "H100", "--gpus", "4"]
    argv += ["--context", "8192", "--rate", "40", "--output-tokens", "200"]
    assert main([*argv, "--json", "-o", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    gpu = find_gpu("H100")
    assert gpu is not None
    report = capacity_report(load_shape(config), gpu, context_tokens=8192, num_gpus=4)
    fit = report.max_concurrent_sequences
    top = report.points[-1]
    assert top.batch == fit and top.step_time_s <= 0.1
    assert doc["bound"]["max_concurrent_sequences"] == fit
    assert doc["plan"]["sustainable_per_replica"] == pytest.approx(fit / (200 * top.step_time_s))
    assert doc["plan"]["replicas"] == math.ceil(40 / (0.8 * doc["plan"]["sustainable_per_replica"]))
    assert doc["plan_from"].startswith("model arithmetic")
    assert "prefill" in doc["bound"]["leaves_out"]
    assert (out / "hpa.yaml").is_file()
    tight = 0.5 * (report.points[0].step_time_s + top.step_time_s)
    assert main([*argv, "--tpot", repr(tight), "--json"]) == 0
    slower = json.loads(capsys.readouterr().out)
    held = [p for p in slower["bound"]["curve"] if p["tpot_s"] <= tight]
    assert held and held[-1]["batch"] < fit
    assert slower["plan"]["sustainable_per_replica"] == pytest.approx(held[-1]["requests_per_s"])
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "an upper bound" in text and "TTFT is not bounded" in text


def test_a_probe_faster_than_the_model_arithmetic_allows_is_questioned(tmp_path, capsys):
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(probe_doc(loads=(100, 200, 400), ttft_per_load=0.001)))
    config = MODELS / "llama-3.1-70b.json"
    argv = ["fleet", "capacity", str(probe), "--model-config", str(config), "--gpus", "4"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["plan_from"] == "probe"
    assert "above the model arithmetic's bound" in doc["notes"][0]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--gpus", "3"], "does not divide the 64 attention heads"),
        (["--gpu", "Z9000"], "unknown GPU"),
        (["--output-tokens", "0"], "--output-tokens"),
        (["--gpus", "1", "--context", "131072"], "does not fit"),
    ],
)
def test_a_model_plan_that_cannot_be_made_is_one_line(capsys, extra, says):
    config = MODELS / "llama-3.1-70b.json"
    assert main(["fleet", "capacity", "--model-config", str(config), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
