"""Run comparison is calibrated: how often it cries wolf, measured, and its p-values checked
against references that do not share its code (scipy's Fisher exact and permutation tests,
exhaustive enumeration, Holm's procedure worked by hand).

Every case is seeded; nothing here times anything.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as st

from fleetwatch.fleet.compare import compare_runs, holm, quantile_test
from fleetwatch.fleet.compare.quantile_test import quantile_counts
from fleetwatch.scenarios.compare_runs import compare_pair, run_records

# --- the procedure end to end, on realistic runs (2,000–4,000 requests each) ---------------------


def test_same_distribution_pairs_report_a_regression_at_most_1_percent_of_the_time() -> None:
    flagged = []
    for seed in range(200):
        before, after = compare_pair("null", seed)
        report = compare_runs(before, after, draws=100)
        assert report.alpha == 0.01
        if report.regressions:
            flagged.append((seed, report.regressions))
    assert len(flagged) <= 2, flagged


def test_a_prompt_mix_change_alone_is_never_a_regression() -> None:
    for seed in range(30):
        before, after = compare_pair("prompt_mix", seed)
        report = compare_runs(before, after, draws=100)
        assert report.workload_differs
        assert "prompt_tokens" in {w.name for w in report.workload if w.differs}
        assert report.strata is not None and "uncached prompt tokens" in report.strata
        assert report.regressions == (), (seed, report.summary())
        assert report.to_dict()["regressions"] == []
        # The raw percentiles did move: the like-for-like comparison is what clears them.
        ttft = next(m for m in report.metrics if m.metric == "ttft_s")
        assert ttft.shifts[1].ratio > 1.2
        assert report.summary().startswith("WARNING: the workload differs")


def test_a_20_percent_decode_slowdown_is_found_every_time() -> None:
    for seed in range(30):
        before, after = compare_pair("decode_slowdown", seed)
        report = compare_runs(before, after, draws=100)
        assert not report.workload_differs
        assert {"decode_s", "tpot_s"} <= set(report.regressions), (seed, report.summary())
        assert not {"queue_s", "prefill_s"} & set(report.regressions)


def test_an_output_length_change_alone_is_not_a_regression() -> None:
    for seed in range(5):
        before = run_records(3000, seed=1000 + seed)
        after = run_records(3000, seed=2000 + seed, output_scale=1.6)
        report = compare_runs(before, after, draws=100)
        assert [w.name for w in report.workload if w.differs] == ["output_tokens"]
        assert report.strata is not None and "output tokens" in report.strata
        assert report.regressions == (), report.summary()


def test_a_real_slowdown_is_still_found_when_the_prompt_mix_changed_too() -> None:
    before = run_records(3000, seed=11)
    after = run_records(3000, seed=12, long_prompt_share=0.45, decode_slowdown=1.2)
    report = compare_runs(before, after, draws=100)
    assert report.workload_differs and report.strata is not None
    assert {"decode_s", "tpot_s"} <= set(report.regressions)
    assert "prefill_s" not in report.regressions


def test_an_unmatched_workload_change_is_confounded_not_regressed() -> None:
    before = run_records(3000, seed=21)
    after = run_records(3000, seed=22, rate_per_s=12.0, decode_slowdown=1.3)
    report = compare_runs(before, after, draws=100)
    assert report.unmatched == ("request_rate",)
    assert report.regressions == ()
    assert {"decode_s", "tpot_s"} <= set(report.confounded)
    assert "cannot be matched (request_rate): " in report.summary()


def test_output_states_the_family_wise_error_rate_and_the_procedure() -> None:
    before, after = compare_pair("null", 0)
    report = compare_runs(before, after, draws=100, alpha=0.05)
    doc = report.to_dict()["decision"]
    assert doc["family_wise_error"] == 0.05 and doc["min_effect"] == 0.05
    assert "Holm" in doc["procedure"] and "Bonferroni" in doc["procedure"]
    assert "family-wise error rate 5% across 6 metrics" in report.render()


# --- the exact quantile test against independent references -------------------------------------


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_one_stratum_p_value_is_fisher_exact_on_the_2x2_table(q: float) -> None:
    rng = np.random.default_rng(7)
    for _ in range(10):
        b = np.round(rng.lognormal(0, 1, int(rng.integers(30, 400))), 1)  # ties on purpose
        a = np.round(rng.lognormal(0.2, 1, int(rng.integers(30, 400))), 1)
        pooled = np.concatenate([b, a])
        c = np.percentile(pooled, 100 * q, method="inverted_cdf")
        a_le, b_le = int((a <= c).sum()), int((b <= c).sum())
        table = [[a_le, len(a) - a_le], [b_le, len(b) - b_le]]
        less = st.fisher_exact(table, alternative="less").pvalue
        greater = st.fisher_exact(table, alternative="greater").pvalue
        assert quantile_test(b, a, q) == pytest.approx(min(1.0, 2 * min(less, greater)), rel=1e-9)


def test_p_value_matches_scipy_permutation_test_by_full_enumeration() -> None:
    rng = np.random.default_rng(3)
    b, a = rng.lognormal(0, 1, 8), rng.lognormal(0.8, 1, 7)
    for q in (0.5, 0.75):

        def statistic(x: np.ndarray, y: np.ndarray, q: float = q) -> float:
            c = np.percentile(np.concatenate([x, y]), 100 * q, method="inverted_cdf")
            return float((y <= c).sum())

        ref = st.permutation_test(
            (b, a), statistic, permutation_type="independent", n_resamples=np.inf
        )
        assert quantile_test(b, a, q) == pytest.approx(ref.pvalue, rel=1e-9)


def test_stratified_p_value_matches_enumerating_every_within_stratum_assignment() -> None:
    rng = np.random.default_rng(5)
    strata = [
        (rng.lognormal(0, 1, 4), rng.lognormal(0.5, 1, 3)),
        (rng.lognormal(1, 1, 3), rng.lognormal(1.4, 1, 4)),
    ]
    b = np.concatenate([s[0] for s in strata])
    a = np.concatenate([s[1] for s in strata])
    sb = np.repeat(np.arange(2), [len(s[0]) for s in strata]).astype(np.int64)
    sa = np.repeat(np.arange(2), [len(s[1]) for s in strata]).astype(np.int64)
    q = 0.5
    per_stratum = []
    for xb, xa in strata:
        pooled = np.concatenate([xb, xa])
        c = np.percentile(pooled, 100 * q, method="inverted_cdf")
        per_stratum.append(
            [
                int((pooled[list(idx)] <= c).sum())
                for idx in itertools.combinations(range(len(pooled)), len(xa))
            ]
        )
    observed = sum(
        int((xa <= np.percentile(np.concatenate([xb, xa]), 100 * q, method="inverted_cdf")).sum())
        for xb, xa in strata
    )
    totals = np.array([x + y for x, y in itertools.product(*per_stratum)])
    expected = min(1.0, 2 * min((totals <= observed).mean(), (totals >= observed).mean()))
    assert quantile_counts(b, a, q, sb, sa)[0] == observed
    assert quantile_test(b, a, q, sb, sa) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_p_values_under_the_null_are_no_smaller_than_uniform(q: float) -> None:
    rng = np.random.default_rng(11)
    p = np.array(
        [quantile_test(rng.lognormal(0, 1, 600), rng.lognormal(0, 1, 900), q) for _ in range(1500)]
    )
    # One-sided Kolmogorov–Smirnov: is the p-values' CDF above the uniform's anywhere?
    assert st.kstest(p, "uniform", alternative="greater").pvalue > 0.01
    for level in (0.01, 0.05, 0.2):
        assert (p <= level).mean() <= level + 3 * np.sqrt(level / len(p))
    # Exact, not uselessly conservative.
    assert (p <= 0.2).mean() > 0.1


def test_stratified_p_values_under_the_null_are_no_smaller_than_uniform() -> None:
    rng = np.random.default_rng(13)
    p = []
    for _ in range(600):
        # Different size mix per run, same latency given size: the null of the like-for-like test.
        sb = rng.integers(0, 8, 800)
        sa = np.minimum(rng.geometric(0.25, 700) - 1, 7)
        b = rng.lognormal(0.2 * sb, 0.5)
        a = rng.lognormal(0.2 * sa, 0.5)
        p.append(quantile_test(b, a, 0.9, sb.astype(np.int64), sa.astype(np.int64)))
    assert st.kstest(p, "uniform", alternative="greater").pvalue > 0.01


# --- Holm ---------------------------------------------------------------------------------------


def test_holm_by_hand() -> None:
    # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 → 0.02, 0.03, 0.06, 0.04 → running max.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, float("nan"), 0.9]) == pytest.approx([1.0, float("nan"), 1.0], nan_ok=True)


def test_holm_controls_the_family_wise_error_of_independent_nulls() -> None:
    rng = np.random.default_rng(17)
    p = rng.uniform(size=(20_000, 6))
    any_rejected = np.mean([min(holm(row)) <= 0.05 for row in p])
    # Independent uniforms: P(any rejected) = 1 − (1 − α/m)^m, the Šidák value.
    assert any_rejected == pytest.approx(1 - (1 - 0.05 / 6) ** 6, abs=0.006)
