"""Workload-change detection.

Did the workload change between the runs? Two-sample Kolmogorov–Smirnov on prompt and output
lengths and on the prefix-cache share, and the ratio of request rates. When it did, a latency
shift may be the workload and not a regression: ``matching`` compares like with like (``run``
decides which covariates to match on from which checks differ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as st

from fleetwatch.fleet.compare.matching import I64
from fleetwatch.fleet.compare.statistics import F64, sorted_values

__all__ = [
    "WorkloadCheck",
    "ks_check",
    "ks_counts",
    "matching_covariates",
    "rate_check",
    "workload_checks",
]


@dataclass(frozen=True, slots=True)
class WorkloadCheck:
    """Did the workload change? KS statistic and p-value per distribution, or a rate ratio."""

    name: str
    before: float
    after: float
    statistic: float
    p_value: float
    differs: bool


_EXACT_N = 10_000
"""Largest sample ``scipy.stats.ks_2samp`` may test exactly (its ``MAX_AUTO_N``)."""


def ks_check(name: str, x: F64, y: F64, alpha: float, min_statistic: float) -> WorkloadCheck:
    # The exact two-sample distribution costs tens of milliseconds per check at thousands of
    # requests, where the asymptotic one is accurate; and with at least 1,000 on each side a
    # statistic of 0.1 already has p < 1e-4, so the verdict rests on the statistic either way.
    method = "asymp" if min(len(x), len(y)) >= 1000 else "auto"
    ks = st.ks_2samp(x, y, method=method)
    return WorkloadCheck(
        name,
        float(x.mean()),
        float(y.mean()),
        float(ks.statistic),
        float(ks.pvalue),
        bool(ks.pvalue < alpha and ks.statistic >= min_statistic),
    )


def ks_counts(
    name: str,
    before: tuple[F64, I64],
    after: tuple[F64, I64],
    alpha: float,
    min_statistic: float,
) -> WorkloadCheck:
    """``ks_check`` of two samples given as their distinct values (ascending) and the count of
    each: the same statistic (the largest gap between the two empirical CDFs, taken at the
    values) and, where ``ks_check`` takes the asymptotic p-value (``scipy.stats.kstwo`` at the
    effective size), the same one, without expanding them; samples of at most ``_EXACT_N``
    values are expanded and tested as ``ks_check`` tests them."""
    (xb, nb), (xa, na) = before, after
    n1, n2 = int(nb.sum()), int(na.sum())
    if max(n1, n2) <= _EXACT_N:  # where ks_check's p-value may be the exact one
        return ks_check(name, np.repeat(xb, nb), np.repeat(xa, na), alpha, min_statistic)
    values = np.union1d(xb, xa)
    cdf1 = np.r_[0, np.cumsum(nb)][np.searchsorted(xb, values, side="right")] / n1
    cdf2 = np.r_[0, np.cumsum(na)][np.searchsorted(xa, values, side="right")] / n2
    diffs = cdf1 - cdf2
    d = max(float(np.clip(-diffs.min(), 0, 1)), float(diffs.max()))
    m, n = sorted([float(n1), float(n2)], reverse=True)
    p = float(np.clip(st.kstwo.sf(d, np.round(m * n / (m + n))), 0, 1))
    return WorkloadCheck(
        name,
        float(np.dot(xb, nb) / n1),
        float(np.dot(xa, na) / n2),
        d,
        p,
        bool(p < alpha and d >= min_statistic),
    )


def _cache_share(df: pd.DataFrame) -> F64:
    p = df["prompt_tokens"].to_numpy(dtype=np.float64)
    c = df["cached_prompt_tokens"].to_numpy(dtype=np.float64)
    return np.sort(np.where(p > 0, c / np.maximum(p, 1), 0.0))


def _rate(df: pd.DataFrame) -> float:
    span = float(df["arrival_s"].max() - df["arrival_s"].min())
    return len(df) / span if span > 0 else math.nan


def _rate_check(before: pd.DataFrame, after: pd.DataFrame, rate_ratio: float) -> WorkloadCheck:
    return rate_check(_rate(before), _rate(after), rate_ratio)


def rate_check(rb: float, ra: float, rate_ratio: float) -> WorkloadCheck:
    """The request-rate check of rates ``rb`` (before) and ``ra`` (after), requests a second."""
    ratio = ra / rb if rb > 0 else math.nan
    return WorkloadCheck(
        "request_rate",
        rb,
        ra,
        ratio,
        math.nan,
        bool(math.isfinite(ratio) and (ratio >= rate_ratio or ratio <= 1 / rate_ratio)),
    )


def workload_checks(
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    ks_alpha: float,
    ks_min_statistic: float,
    rate_ratio: float,
) -> tuple[WorkloadCheck, ...]:
    """Prompt and output lengths and prefix-cache share (KS: differs when p < ``ks_alpha`` and
    the statistic is at least ``ks_min_statistic``), then the request rate (differs when the
    ratio is beyond ``rate_ratio`` either way). Columns absent from either run are skipped."""
    checks: list[WorkloadCheck] = []
    for col in ("prompt_tokens", "output_tokens"):
        if col in before.columns and col in after.columns:
            x, y = sorted_values(before, col), sorted_values(after, col)
            checks.append(ks_check(col, x, y, ks_alpha, ks_min_statistic))
    if "cached_prompt_tokens" in before.columns and "cached_prompt_tokens" in after.columns:
        x, y = _cache_share(before), _cache_share(after)
        checks.append(ks_check("prefix_cache_share", x, y, ks_alpha, ks_min_statistic))
    checks.append(_rate_check(before, after, rate_ratio))
    return tuple(checks)


def matching_covariates(
    checks: tuple[WorkloadCheck, ...],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(covariates to match on, differing checks that matching cannot remove). A changed prompt
    length or prefix-cache share is matched on uncached prompt tokens ("prompt"), a changed output
    length on output tokens ("output"); a changed request rate cannot be matched request by
    request (it moves queueing and batching for every request)."""
    differs = {w.name for w in checks if w.differs}
    covariates = []
    if differs & {"prompt_tokens", "prefix_cache_share"}:
        covariates.append("prompt")
    if "output_tokens" in differs:
        covariates.append("output")
    rest = differs - {"prompt_tokens", "prefix_cache_share", "output_tokens"}
    return tuple(covariates), tuple(sorted(rest))
