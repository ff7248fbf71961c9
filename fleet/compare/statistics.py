"""Two-sample statistics: bootstrap percentile shifts, the exact quantile test per percentile,
Mann–Whitney per metric, Fisher on errors.

The intervals describe how far a percentile moved; the decision whether it moved rests on the
exact test (``quantile_test``) and the multiple-comparison procedure (``decision``), not on whether
an interval excludes 0: eighteen 95 % intervals (three percentiles of six metrics) exclude 0 by
chance in most pairs of identical runs.

The bootstrap is exact and vectorised: the p-quantile of a resample of sorted ``x`` is ``x[j]``
with ``P(Q* ≤ x[j]) = P(Binomial(n, j/n) ≥ ⌈p·n⌉)``, so replicate quantiles are drawn by inverting
that distribution (seeded) instead of resampling millions of values. Quantiles here are
inverted-CDF (an observed value), which is what that identity holds for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats as st

from fleetwatch.fleet.compare.matching import I64, like_for_like
from fleetwatch.fleet.compare.quantile_test import quantile_tests

__all__ = [
    "F64",
    "MetricComparison",
    "PercentileShift",
    "Verdict",
    "bootstrap_quantiles",
    "bootstrap_window",
    "compare_metric",
    "error_counts",
    "error_rates",
    "error_rates_from_counts",
    "inverted_cdf_index",
    "sorted_values",
    "values",
]

F64 = np.ndarray[Any, np.dtype[np.float64]]
Verdict = Literal[
    "regressed", "improved", "unchanged", "inconclusive", "confounded", "insufficient"
]


def bootstrap_window(n: int, q: float) -> tuple[int, int]:
    """The first and last index of a sorted sample of ``n`` values that a bootstrap replicate
    of its ``q``-quantile can be (``bootstrap_quantiles`` reads only these)."""
    m = max(1, math.ceil(q * n))
    # Outside m ± 9 standard deviations the CDF is 0 or 1 to double precision: skip those j.
    half = int(9 * math.sqrt(n * q * (1 - q))) + 10
    return max(1, m - half) - 1, min(n, m + half) - 1


def bootstrap_quantiles(
    sorted_x: F64,
    q: float,
    draws: int,
    rng: np.random.Generator,
    *,
    n: int | None = None,
    first: int = 0,
) -> F64:
    """``draws`` bootstrap replicates of the ``q``-quantile (inverted-CDF) of sorted data:
    ``sorted_x`` the whole sample, or (``n`` its size) only its values from index ``first`` on,
    covering ``bootstrap_window``."""
    n = len(sorted_x) if n is None else n
    m = max(1, math.ceil(q * n))
    lo, last = bootstrap_window(n, q)
    # A replicate draws n indices, each floor(n U) for a uniform U: its m-th smallest index is
    # floor(n U_(m)), and U_(m), the m-th smallest of n uniforms, is Beta(m, n - m + 1).
    k = np.floor(n * rng.beta(m, n - m + 1, size=draws)).astype(np.int64)
    out: F64 = sorted_x[np.clip(k, lo, last) - first]
    return out


def inverted_cdf_index(n: int, q: float) -> int:
    """The index in a sorted sample of ``n`` values of its ``q``-quantile by the inverted CDF,
    as ``numpy.quantile(method="inverted_cdf")`` computes it."""
    virtual = n * q - 1
    below = math.floor(virtual)
    return min(max(below + (1 if virtual - below > 0 else 0), 0), n - 1)


@dataclass(frozen=True, slots=True)
class PercentileShift:
    """One percentile before and after, the shift (after − before) and its bootstrap confidence
    interval; the exact test's p-value (``quantile_test``; within strata when the comparison is
    like-for-like), the like-for-like after/before ratio (NaN when the workload did not need
    matching) and, once ``decision.decide`` has run, the multiplicity-adjusted p-value and whether
    it clears the family-wise level."""

    percentile: float
    before: float
    after: float
    ci_low: float
    ci_high: float
    p_value: float = math.nan
    like_for_like: float = math.nan
    p_adjusted: float = math.nan
    significant: bool = False
    verdict: str = ""
    """This percentile's own verdict (``decision.decide``): ``regressed``, ``improved``,
    ``unchanged`` (its interval rules a material rise out), ``inconclusive`` or ``confounded``."""

    @property
    def shift(self) -> float:
        return self.after - self.before

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before > 0 else math.nan


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """A latency metric compared across runs: one p-value for the metric (the smallest of its
    percentiles' p-values times their number, Bonferroni), Holm-adjusted across metrics, the
    verdict, and the share of the before run the like-for-like comparison covered (NaN when
    unmatched).

    ``confounded``: the latency moved, but with a workload change that could not be matched
    (request rate, or sizes outside any common range), so it is not called a regression."""

    metric: str
    n_before: int
    n_after: int
    shifts: tuple[PercentileShift, ...]
    mann_whitney_p: float
    p_after_greater: float
    verdict: Verdict
    p_value: float = math.nan
    p_adjusted: float = math.nan
    coverage: float = math.nan
    detectable: float = math.nan
    """The smallest shift (a share of the before value) its test would catch 80 % of the time at
    these sample sizes, from the widest of its percentiles' intervals; set by ``decide``."""


def sorted_values(df: pd.DataFrame, col: str) -> F64:
    """The non-missing values of ``col``, sorted (empty when the column is absent)."""
    if col not in df.columns:
        return np.empty(0)
    v = df[col].to_numpy(dtype=np.float64, na_value=np.nan)
    return np.sort(v[~np.isnan(v)])


def values(df: pd.DataFrame, col: str) -> F64:
    """``col`` as float64 with NaN for missing (all NaN when the column is absent)."""
    if col not in df.columns:
        return np.full(len(df), np.nan)
    out: F64 = df[col].to_numpy(dtype=np.float64, na_value=np.nan)
    return out


def _shift(
    b: F64, a: F64, p: float, draws: int, bounds: tuple[float, float], rng: np.random.Generator
) -> PercentileShift:
    q = p / 100.0
    pb = float(np.percentile(b, p, method="inverted_cdf"))
    pa = float(np.percentile(a, p, method="inverted_cdf"))
    diff = bootstrap_quantiles(a, q, draws, rng) - bootstrap_quantiles(b, q, draws, rng)
    lo, hi = np.quantile(diff, list(bounds))
    return PercentileShift(p, pb, pa, float(lo), float(hi))


def compare_metric(
    name: str,
    b: F64,
    a: F64,
    percentiles: Sequence[float],
    draws: int,
    confidence: float,
    rng: np.random.Generator,
    strata: tuple[I64, I64] | None = None,
) -> MetricComparison:
    """Shifts of ``b`` (before) and ``a`` (after; NaN dropped) at ``percentiles`` with bootstrap
    intervals, the exact quantile test at each (within ``strata``, one stratum code per value of
    ``b`` and of ``a``, when given, with like-for-like ratios), Mann–Whitney, and the metric's
    Bonferroni p-value. The verdict is left "unchanged" for ``decision.decide``. Fewer than 10
    values on either side is "insufficient"."""
    kb, ka = ~np.isnan(b), ~np.isnan(a)
    sb, sa = (strata[0][kb], strata[1][ka]) if strata is not None else (None, None)
    b, a = b[kb], a[ka]
    if len(b) < 10 or len(a) < 10:
        return MetricComparison(name, len(b), len(a), (), math.nan, math.nan, "insufficient")
    bounds = ((1 - confidence) / 2, 1 - (1 - confidence) / 2)
    b_sorted, a_sorted = np.sort(b), np.sort(a)
    shifts = [_shift(b_sorted, a_sorted, p, draws, bounds, rng) for p in percentiles]
    coverage = math.nan
    if sb is not None and sa is not None:
        ratios, coverage = like_for_like(b, a, sb, sa, percentiles)
        shifts = [replace(s, like_for_like=r) for s, r in zip(shifts, ratios, strict=True)]
    qs = [p / 100.0 for p in percentiles]
    p_values = (
        quantile_tests(b, a, qs, sb, sa)
        if sb is not None
        else quantile_tests(b_sorted, a_sorted, qs)
    )
    shifts = [replace(s, p_value=p) for s, p in zip(shifts, p_values, strict=True)]
    p_min = min((s.p_value for s in shifts if math.isfinite(s.p_value)), default=math.nan)
    p_metric = min(1.0, len(shifts) * p_min) if math.isfinite(p_min) else math.nan
    mw = st.mannwhitneyu(a_sorted, b_sorted, alternative="two-sided")  # sorted: faster ranks
    effect = float(mw.statistic) / (len(a) * len(b))
    return MetricComparison(
        name,
        len(b),
        len(a),
        tuple(shifts),
        float(mw.pvalue),
        effect,
        "unchanged",
        p_value=p_metric,
        coverage=coverage,
    )


def error_counts(df: pd.DataFrame) -> tuple[int, int]:
    """A run's errors (status ``error``) and requests."""
    if "status" not in df.columns:
        return 0, len(df)
    return int((df["status"].astype(str) == "error").sum()), len(df)


def error_rates(before: pd.DataFrame, after: pd.DataFrame) -> tuple[float, float, float]:
    """Error rate before, after, and the two-sided Fisher exact p-value of the difference."""
    return error_rates_from_counts(error_counts(before), error_counts(after))


def error_rates_from_counts(
    before: tuple[int, int], after: tuple[int, int]
) -> tuple[float, float, float]:
    """``error_rates`` from each run's (errors, requests)."""
    eb, ea = before, after
    p_err = (
        float(st.fisher_exact([[eb[0], eb[1] - eb[0]], [ea[0], ea[1] - ea[0]]]).pvalue)
        if eb[1] and ea[1]
        else math.nan
    )
    rate_b = eb[0] / eb[1] if eb[1] else math.nan
    rate_a = ea[0] / ea[1] if ea[1] else math.nan
    return rate_b, rate_a, p_err
