"""Two-sample statistics: bootstrap percentile shifts, Mann–Whitney per metric, Fisher on errors.

The bootstrap is exact and vectorised: the p-quantile of a resample of sorted ``x`` is ``x[j]``
with ``P(Q* ≤ x[j]) = P(Binomial(n, j/n) ≥ ⌈p·n⌉)``, so replicate quantiles are drawn by inverting
that distribution (seeded) instead of resampling millions of values. Quantiles here are
inverted-CDF (an observed value), which is what that identity holds for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats as st

__all__ = [
    "F64",
    "MetricComparison",
    "PercentileShift",
    "Verdict",
    "bootstrap_quantiles",
    "compare_metric",
    "error_rates",
    "sorted_values",
]

F64 = np.ndarray[Any, np.dtype[np.float64]]
Verdict = Literal["regressed", "improved", "unchanged", "insufficient"]


def bootstrap_quantiles(sorted_x: F64, q: float, draws: int, rng: np.random.Generator) -> F64:
    """``draws`` bootstrap replicates of the ``q``-quantile (inverted-CDF) of sorted data."""
    n = len(sorted_x)
    m = max(1, math.ceil(q * n))
    # Outside m ± 9 standard deviations the CDF is 0 or 1 to double precision: skip those j.
    half = int(9 * math.sqrt(n * q * (1 - q))) + 10
    lo, hi = max(1, m - half), min(n, m + half)
    j = np.arange(lo, hi + 1)
    cdf = st.binom.sf(m - 1, n, j / n)
    cdf[-1] = 1.0
    k = np.searchsorted(cdf, rng.uniform(size=draws), side="left") + (lo - 1)
    out: F64 = sorted_x[np.minimum(k, n - 1)]
    return out


@dataclass(frozen=True, slots=True)
class PercentileShift:
    """One percentile before and after, the shift (after − before) and its confidence interval."""

    percentile: float
    before: float
    after: float
    ci_low: float
    ci_high: float

    @property
    def shift(self) -> float:
        return self.after - self.before

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before > 0 else math.nan

    @property
    def significant(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """A latency metric compared across runs."""

    metric: str
    n_before: int
    n_after: int
    shifts: tuple[PercentileShift, ...]
    mann_whitney_p: float
    p_after_greater: float
    verdict: Verdict


def sorted_values(df: pd.DataFrame, col: str) -> F64:
    """The non-missing values of ``col``, sorted (empty when the column is absent)."""
    if col not in df.columns:
        return np.empty(0)
    v = df[col].to_numpy(dtype=np.float64, na_value=np.nan)
    return np.sort(v[~np.isnan(v)])


def _shift(
    b: F64, a: F64, p: float, draws: int, bounds: tuple[float, float], rng: np.random.Generator
) -> PercentileShift:
    q = p / 100.0
    pb = float(np.percentile(b, p, method="inverted_cdf"))
    pa = float(np.percentile(a, p, method="inverted_cdf"))
    diff = bootstrap_quantiles(a, q, draws, rng) - bootstrap_quantiles(b, q, draws, rng)
    lo, hi = np.quantile(diff, list(bounds))
    return PercentileShift(p, pb, pa, float(lo), float(hi))


def _verdict(shifts: Sequence[PercentileShift], min_effect: float) -> Verdict:
    def material(s: PercentileShift) -> bool:
        return s.significant and abs(s.shift) >= min_effect * max(abs(s.before), 1e-12)

    worse = any(material(s) and s.shift > 0 for s in shifts)
    better = any(material(s) and s.shift < 0 for s in shifts)
    return "regressed" if worse else "improved" if better else "unchanged"


def compare_metric(
    name: str,
    b: F64,
    a: F64,
    percentiles: Sequence[float],
    draws: int,
    confidence: float,
    min_effect: float,
    rng: np.random.Generator,
) -> MetricComparison:
    """Shifts of sorted samples ``b`` (before) and ``a`` (after) at ``percentiles``, Mann–Whitney
    and a verdict: a shift counts when significant and at least ``min_effect`` of the before
    value. Fewer than 10 values on either side is "insufficient"."""
    if len(b) < 10 or len(a) < 10:
        return MetricComparison(name, len(b), len(a), (), math.nan, math.nan, "insufficient")
    bounds = ((1 - confidence) / 2, 1 - (1 - confidence) / 2)
    shifts = tuple(_shift(b, a, p, draws, bounds, rng) for p in percentiles)
    mw = st.mannwhitneyu(a, b, alternative="two-sided")
    effect = float(mw.statistic) / (len(a) * len(b))
    verdict = _verdict(shifts, min_effect)
    return MetricComparison(name, len(b), len(a), shifts, float(mw.pvalue), effect, verdict)


def _errors(df: pd.DataFrame) -> tuple[int, int]:
    if "status" not in df.columns:
        return 0, len(df)
    return int((df["status"].astype(str) == "error").sum()), len(df)


def error_rates(before: pd.DataFrame, after: pd.DataFrame) -> tuple[float, float, float]:
    """Error rate before, after, and the two-sided Fisher exact p-value of the difference."""
    eb = _errors(before)
    ea = _errors(after)
    p_err = (
        float(st.fisher_exact([[eb[0], eb[1] - eb[0]], [ea[0], ea[1] - ea[0]]]).pvalue)
        if eb[1] and ea[1]
        else math.nan
    )
    rate_b = eb[0] / eb[1] if eb[1] else math.nan
    rate_a = ea[0] / ea[1] if ea[1] else math.nan
    return rate_b, rate_a, p_err
