"""Sources: /metrics snapshots from real prometheus_client registries, histogram quantiles."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers import Cause, Side, detect, table_from_metrics_dir
from fleetwatch.fleet.outliers.sources.histogram import histogram_quantile
from fleetwatch.fleet.outliers.sources.snapshots import table_from_metrics_text


def _snapshot(
    profile_name: str,
    *,
    seed: int,
    slow: float = 1.0,
    prompt: float = 500.0,
    errors: int = 0,
    requests: int = 400,
    sm_clock: float | None = None,
    version: str | None = None,
) -> str:
    """One replica's /metrics text, written through a real registry with the profile's names."""
    p = get_profile(profile_name)
    reg = CollectorRegistry()
    rng = np.random.default_rng(seed)

    def hist(sig: Signal) -> Histogram:
        ref = p.metric(sig)
        return Histogram(ref.name, "x", buckets=ref.buckets, registry=reg)

    ttft, tpot, e2e = hist(Signal.TTFT), hist(Signal.TPOT), hist(Signal.E2E)
    for _ in range(requests):
        t = rng.lognormal(np.log(0.2), 0.3) * slow * prompt / 500.0
        d = rng.lognormal(np.log(0.02), 0.1) * slow
        ttft.observe(t)
        tpot.observe(d)
        e2e.observe(t + 100 * d)
    total = p.outcomes.total
    if profile_name == "vllm":
        c = Counter(total.name.removesuffix("_total"), "x", ["finished_reason"], registry=reg)
        c.labels("length").inc(requests - errors)
        c.labels("error").inc(errors)
    else:
        c = Counter(total.name.removesuffix("_total"), "x", ["status"], registry=reg)
        c.labels("ok").inc(requests - errors)
        c.labels("error").inc(errors)
    pt = p.metric(Signal.PROMPT_TOKENS)
    Counter(pt.name.removesuffix("_total"), "x", registry=reg).inc(prompt * requests)
    if sm_clock is not None:
        Gauge(p.metric(Signal.GPU_SM_CLOCK).name, "x", registry=reg).set(sm_clock)
        Gauge(p.metric(Signal.GPU_SM_CLOCK_MAX).name, "x", registry=reg).set(1.98e9)
    if version is not None:
        g = Gauge("fleetwatch_build_info", "x", ["version", "model_revision"], registry=reg)
        g.labels(version, "r1").set(1)
    return generate_latest(reg).decode()


def test_histogram_quantile_matches_prometheus_interpolation():
    buckets = [(0.1, 0.0), (0.25, 10.0), (0.5, 20.0), (float("inf"), 20.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.25)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.175)
    assert histogram_quantile(0.99, [(1.0, 0.0), (float("inf"), 5.0)]) == 1.0
    assert np.isnan(histogram_quantile(0.5, []))


@pytest.mark.parametrize("profile", ["fleetwatch", "vllm"])
def test_metrics_dir_finds_the_slow_replica(tmp_path, profile):
    for i in range(5):
        text = _snapshot(profile, seed=i, slow=2.0 if i == 3 else 1.0)
        (tmp_path / f"replica-{i}.prom").write_text(text)
    report = detect(table_from_metrics_dir(tmp_path, get_profile(profile)))
    assert {f.replica for f in report.findings} == {"replica-3"}
    assert {f.signal for f in report.findings} >= {"ttft", "tpot"}
    assert all(f.side is Side.REPLICA for f in report.findings)


def test_metrics_long_prompts_are_workload_side():
    texts = {
        f"r{i}": _snapshot("fleetwatch", seed=i, prompt=2000.0 if i == 1 else 500.0)
        for i in range(5)
    }
    report = detect(table_from_metrics_text(texts, get_profile("fleetwatch")))
    ttft = [f for f in report.findings if f.signal == "ttft"]
    assert [f.replica for f in ttft] == ["r1"]
    assert (ttft[0].side, ttft[0].cause) == (Side.WORKLOAD, Cause.PROMPT_LENGTH_MIX)


def test_metrics_gpu_clock_and_version_drift_name_the_cause():
    texts = {
        f"r{i}": _snapshot(
            "fleetwatch",
            seed=i,
            slow=1.6 if i == 0 else 1.0,
            sm_clock=1.2e9 if i == 0 else 1.97e9,
            version="0.9.0",
        )
        for i in range(5)
    }
    texts["r4"] = _snapshot("fleetwatch", seed=4, slow=1.5, sm_clock=1.97e9, version="0.8.0")
    report = detect(table_from_metrics_text(texts, get_profile("fleetwatch")))
    by = {(f.replica, f.signal): f for f in report.findings}
    assert by[("r0", "tpot")].cause is Cause.SLOW_HARDWARE
    assert by[("r0", "sm_clock_ratio")].cause is Cause.SLOW_HARDWARE
    assert by[("r4", "tpot")].cause is Cause.CONFIG_DRIFT
    assert by[("r4", "config")].cause is Cause.CONFIG_DRIFT


def test_error_counter_outlier_from_snapshots():
    texts = {f"r{i}": _snapshot("fleetwatch", seed=i, errors=60 if i == 2 else 0) for i in range(5)}
    report = detect(table_from_metrics_text(texts, get_profile("fleetwatch")))
    assert [(f.replica, f.signal) for f in report.findings] == [("r2", "error_rate")]


def test_low_volume_snapshot_is_not_judged():
    texts = {f"r{i}": _snapshot("fleetwatch", seed=i, requests=400 if i else 10) for i in range(5)}
    report = detect(table_from_metrics_text(texts, get_profile("fleetwatch")))
    assert report.insufficient == (("r0", 10.0),)


def test_bad_snapshot_dir_and_text_are_analysis_errors(tmp_path):
    with pytest.raises(AnalysisError, match=r"no \.prom"):
        table_from_metrics_dir(tmp_path, get_profile("fleetwatch"))
    with pytest.raises(AnalysisError, match="not a directory"):
        table_from_metrics_dir(tmp_path / "missing", get_profile("fleetwatch"))
    (tmp_path / "r0.prom").write_text("this is { not exposition\n")
    with pytest.raises(AnalysisError, match="r0"):
        table_from_metrics_dir(tmp_path, get_profile("fleetwatch"))


def test_matched_ratio_compares_within_prompt_buckets():
    import pandas as pd

    from fleetwatch.fleet.outliers.sources.records import matched_ratios

    # Same latency per prompt size everywhere; r2 only got the long prompts' bucket mixed in more.
    rows = []
    for r, long_share in (("r0", 0.2), ("r1", 0.2), ("r2", 0.8)):
        for k in range(100):
            p = 2000 if k < long_share * 100 else 200
            rows.append(
                {"replica": r, "prompt_tokens": p, "cached_prompt_tokens": 0, "ttft_s": p / 1e4}
            )
    df = pd.DataFrame(rows)
    raw = df.groupby("replica")["ttft_s"].median()
    assert raw["r2"] / raw["r0"] == pytest.approx(10.0)
    m = matched_ratios(df, "ttft_s", buckets=4)
    assert m.to_dict() == pytest.approx({"r0": 1.0, "r1": 1.0, "r2": 1.0})


def test_cli_metrics_dir(tmp_path, capsys):
    import json

    from fleetwatch.cli import main

    for i in range(4):
        (tmp_path / f"r{i}.prom").write_text(_snapshot("vllm", seed=i, slow=2.0 if i == 0 else 1.0))
    args = ["fleet", "outliers", "--metrics-dir", str(tmp_path), "--profile", "vllm", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {f["replica"] for f in doc["findings"]} == {"r0"}
    assert doc["source"] == "metrics snapshots"
