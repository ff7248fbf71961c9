"""Workload-change detection and like-for-like ratios within prompt-length buckets.

Did the workload change between the runs? Two-sample Kolmogorov–Smirnov on prompt and output
lengths and on the prefix-cache share, and the ratio of request rates. When it did, a latency
shift may be the workload and not a regression; ``matched_ratio`` compares like with like: per
bucket of uncached prompt tokens (edges from the before run), the ratio of medians, weighted by
the before run's mix, so a change of mix cancels out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as st

from fleet.compare.statistics import F64, sorted_values

__all__ = ["WorkloadCheck", "matched_ratio", "workload_checks"]


@dataclass(frozen=True, slots=True)
class WorkloadCheck:
    """Did the workload change? KS statistic and p-value per distribution, or a rate ratio."""

    name: str
    before: float
    after: float
    statistic: float
    p_value: float
    differs: bool


def _ks(name: str, x: F64, y: F64, alpha: float, min_statistic: float) -> WorkloadCheck:
    ks = st.ks_2samp(x, y)
    return WorkloadCheck(
        name,
        float(x.mean()),
        float(y.mean()),
        float(ks.statistic),
        float(ks.pvalue),
        bool(ks.pvalue < alpha and ks.statistic >= min_statistic),
    )


def _cache_share(df: pd.DataFrame) -> F64:
    p = df["prompt_tokens"].to_numpy(dtype=np.float64)
    c = df["cached_prompt_tokens"].to_numpy(dtype=np.float64)
    return np.sort(np.where(p > 0, c / np.maximum(p, 1), 0.0))


def _rate(df: pd.DataFrame) -> float:
    span = float(df["arrival_s"].max() - df["arrival_s"].min())
    return len(df) / span if span > 0 else math.nan


def _rate_check(before: pd.DataFrame, after: pd.DataFrame, rate_ratio: float) -> WorkloadCheck:
    rb, ra = _rate(before), _rate(after)
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
            checks.append(_ks(col, x, y, ks_alpha, ks_min_statistic))
    if "cached_prompt_tokens" in before.columns and "cached_prompt_tokens" in after.columns:
        x, y = _cache_share(before), _cache_share(after)
        checks.append(_ks("prefix_cache_share", x, y, ks_alpha, ks_min_statistic))
    checks.append(_rate_check(before, after, rate_ratio))
    return tuple(checks)


def _uncached(df: pd.DataFrame) -> F64:
    p = df["prompt_tokens"].to_numpy(dtype=np.float64)
    if "cached_prompt_tokens" in df.columns:
        p = p - df["cached_prompt_tokens"].to_numpy(dtype=np.float64)
    return p


def matched_ratio(
    before: pd.DataFrame, after: pd.DataFrame, col: str, buckets: int = 8, min_count: int = 20
) -> tuple[float, float]:
    """Like-for-like after/before ratio of ``col``: per bucket of uncached prompt tokens (edges
    from the before run), the ratio of medians, weighted by the before run's counts. Returns
    (ratio, share of the before run's requests in buckets both runs fill)."""
    if "prompt_tokens" not in before.columns or "prompt_tokens" not in after.columns:
        return math.nan, 0.0
    ub, ua = _uncached(before), _uncached(after)
    vb = before[col].to_numpy(dtype=np.float64, na_value=np.nan)
    va = after[col].to_numpy(dtype=np.float64, na_value=np.nan)
    kb, ka = ~np.isnan(vb), ~np.isnan(va)
    if kb.sum() < min_count or ka.sum() < min_count:
        return math.nan, 0.0
    edges = np.unique(np.quantile(ub[kb], np.linspace(0, 1, buckets + 1))[1:-1])
    bb = np.searchsorted(edges, ub[kb], side="right")
    ba = np.searchsorted(edges, ua[ka], side="right")
    mb = pd.Series(vb[kb]).groupby(bb).agg(["median", "size"])
    ma = pd.Series(va[ka]).groupby(ba).agg(["median", "size"])
    both = mb.add_suffix("_b").join(ma.add_suffix("_a"), how="inner")
    both = both[(both["size_b"] >= min_count) & (both["size_a"] >= min_count)]
    both = both[both["median_b"] > 0]
    if both.empty:
        return math.nan, 0.0
    w = both["size_b"].to_numpy(dtype=np.float64)
    ratio = both["median_a"].to_numpy() / both["median_b"].to_numpy()
    return float(np.dot(w, ratio) / w.sum()), float(w.sum() / kb.sum())
