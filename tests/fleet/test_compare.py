"""Run comparison: shifts with bootstrap intervals, Mann–Whitney, components, workload check."""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.fleet.compare import bootstrap_quantiles, compare_runs
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet


def test_exact_bootstrap_matches_resampling():
    rng = np.random.default_rng(0)
    x = np.sort(rng.lognormal(0, 1, 400))
    exact = bootstrap_quantiles(x, 0.9, 20_000, np.random.default_rng(1))
    idx = rng.integers(0, len(x), size=(4000, len(x)))
    naive = np.percentile(x[idx], 90, axis=1, method="inverted_cdf")
    for q in (0.05, 0.5, 0.95):
        assert np.quantile(exact, q) == pytest.approx(np.quantile(naive, q), rel=0.03)


def test_slower_decode_is_a_regression_and_decode_is_what_moved():
    before = synthetic_fleet(4, 1500, seed=1)
    after = synthetic_fleet(4, 1500, seed=2, slowdown={i: 1.2 for i in range(4)})
    report = compare_runs(before, after, draws=500)
    assert not report.workload_differs
    assert {"tpot_s", "e2e_s", "decode_s"} <= set(report.regressions)
    assert "queue_s" not in report.regressions
    tpot = next(m for m in report.metrics if m.metric == "tpot_s")
    p50 = tpot.shifts[0]
    assert p50.significant and p50.ci_low > 0
    assert p50.ratio == pytest.approx(1.2, abs=0.03)
    assert tpot.mann_whitney_p < 1e-6 and tpot.p_after_greater > 0.8
    moved = report.moved()
    assert moved is not None and moved.component == "decode_s"


def test_same_system_twice_finds_no_regression():
    report = compare_runs(synthetic_fleet(4, 1500, seed=1), synthetic_fleet(4, 1500, seed=2))
    assert report.regressions == () and report.verdict != "regression"
    assert not report.workload_differs
    assert "no latency regression found" in report.summary()


def test_longer_prompts_warn_that_the_workload_changed():
    before = synthetic_fleet(4, 1500, seed=1)
    after = synthetic_fleet(4, 1500, seed=2, prompt_scale={i: 2.0 for i in range(4)})
    report = compare_runs(before, after, draws=500)
    assert report.workload_differs
    assert [w.name for w in report.workload if w.differs] == ["prompt_tokens"]
    assert report.summary().startswith("WARNING: the workload differs (prompt_tokens)")
    # Like-for-like (same prompt-length buckets) nothing moved: the workload explains it.
    matched = {m: r for m, r, _ in report.matched}
    assert matched["ttft_s"] == pytest.approx(1.0, abs=0.06)
    assert "like-for-like within prompt-length buckets" in report.summary()


def test_real_slowdown_shows_like_for_like_even_when_the_workload_changed():
    before = synthetic_fleet(4, 1500, seed=1)
    after = synthetic_fleet(
        4,
        1500,
        seed=2,
        prompt_scale={i: 2.0 for i in range(4)},
        slowdown={i: 1.3 for i in range(4)},
    )
    report = compare_runs(before, after, draws=300)
    matched = {m: r for m, r, _ in report.matched}
    assert report.workload_differs
    assert matched["ttft_s"] == pytest.approx(1.3, abs=0.08)
    assert matched["tpot_s"] == pytest.approx(1.3, abs=0.05)


def test_seeded_and_deterministic():
    b, a = synthetic_fleet(3, 500, seed=1), synthetic_fleet(3, 500, seed=2)
    assert compare_runs(b, a, seed=3).to_dict() == compare_runs(b, a, seed=3).to_dict()


def test_error_rate_change_is_tested():
    before = synthetic_fleet(3, 1000, seed=1)
    after = synthetic_fleet(3, 1000, seed=2, error_rate={0: 0.2, 1: 0.2, 2: 0.2})
    report = compare_runs(before, after, draws=200)
    assert report.error_rate_before == 0 and report.error_rate_after > 0.15
    assert report.error_rate_p < 1e-6


def test_empty_input_is_an_analysis_error():
    df = synthetic_fleet(3, 100)
    with pytest.raises(AnalysisError, match="after"):
        compare_runs(df, df.iloc[0:0])
