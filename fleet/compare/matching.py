"""Like-for-like comparison when the workload changed: strata of the request's own size, and the
after run reweighted to the before run's mix.

A request's latency depends on its own size: prefill and TTFT on the uncached prompt tokens, decode
and e2e on the output tokens. When the mix of sizes changes, raw percentiles move although the
engine did not. ``make_strata`` cuts each size covariate into buckets and ``like_for_like``
compares within them:

- Common range only: a covariate is kept between the larger of the two runs' 1st percentiles and
  the smaller of their 99th, so there is no open-ended top bucket in which one run's requests are
  systematically longer than the other's. (An open top bucket is what made like-for-like TTFT read
  1.05–1.10× when only the prompt mix changed.) Requests outside it are left out and the share of
  the before run that is kept is reported as coverage.
- Quantile-matched buckets: edges at quantiles of the union of both runs, so both runs' mass is
  cut equally finely wherever either has requests; about 200 requests a stratum, at most 50
  strata. Inside a narrow bucket the two runs' sizes barely differ (a bucket spanning a factor
  ``w`` leaves a bias of order ``(ln w)²``), which is what makes the comparison like-for-like.
- Two covariates (prompt and output both changed): the product of per-covariate buckets, with the
  same total budget of strata.

``like_for_like`` weights each after request by (before's share of its stratum) / (after's share),
so the after run has the before run's mix, and returns the weighted percentiles over the before
run's percentiles in the same strata. The exact quantile test (``quantile_test``) uses the same
strata.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "COVARIATES",
    "MAX_STRATA",
    "MIN_COUNT",
    "PER_STRATUM",
    "TRIM",
    "Strata",
    "describe_strata",
    "like_for_like",
    "make_strata",
    "strata_per_axis",
]

F64 = np.ndarray[Any, np.dtype[np.float64]]
I64 = np.ndarray[Any, np.dtype[np.int64]]

COVARIATES = {"prompt": "uncached prompt tokens", "output": "output tokens"}
PER_STRATUM = 200
"""Requests a stratum is cut to hold, about."""
MAX_STRATA = 50
TRIM = 0.01
"""Each covariate is kept between the larger of the runs' ``TRIM`` quantiles and the smaller of
their ``1 - TRIM`` quantiles (the common range)."""
MIN_COUNT = 5
"""Values a stratum needs in each run to count in ``like_for_like``."""


def describe_strata(count: int, covariates: Sequence[str]) -> str:
    """How a report names the strata: their count and what they cut."""
    names = " × ".join(COVARIATES[c] for c in covariates)
    return f"{count} strata of {names}"


def strata_per_axis(inside: int, axes: int) -> int:
    """Buckets per covariate for ``inside`` requests in the common range on ``axes`` covariates:
    about ``PER_STRATUM`` requests a stratum, at most ``MAX_STRATA`` strata in all."""
    top = math.floor(float(MAX_STRATA ** (1 / axes)))
    return max(1, min(top, math.floor(float((inside / PER_STRATUM) ** (1 / axes)))))


@dataclass(frozen=True, slots=True)
class Strata:
    """The stratum of each row of both runs (``-1``: outside the common range)."""

    covariates: tuple[str, ...]
    before: I64
    after: I64
    count: int

    @property
    def coverage(self) -> float:
        """Share of the before run's rows inside the common range."""
        return float((self.before >= 0).mean()) if len(self.before) else 0.0

    def describe(self) -> str:
        return describe_strata(self.count, self.covariates)


def _covariate(df: pd.DataFrame, name: str) -> F64 | None:
    if name == "output":
        if "output_tokens" not in df.columns:
            return None
        return df["output_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    if "prompt_tokens" not in df.columns:
        return None
    p = df["prompt_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    if "cached_prompt_tokens" in df.columns:
        p = p - np.nan_to_num(df["cached_prompt_tokens"].to_numpy(dtype=np.float64, na_value=0.0))
    return p


def make_strata(
    before: pd.DataFrame,
    after: pd.DataFrame,
    covariates: Sequence[str],
    *,
    trim: float = TRIM,
) -> Strata | None:
    """Strata over the common range of ``covariates`` ("prompt", "output"); None when a column
    is missing or the runs' ranges do not overlap."""
    xs = []
    for name in covariates:
        xb, xa = _covariate(before, name), _covariate(after, name)
        if xb is None or xa is None or np.isnan(xb).all() or np.isnan(xa).all():
            return None
        lo = max(np.nanquantile(xb, trim), np.nanquantile(xa, trim))
        hi = min(np.nanquantile(xb, 1 - trim), np.nanquantile(xa, 1 - trim))
        if not lo < hi:
            return None
        xs.append((xb, xa, lo, hi))
    inside_b = np.logical_and.reduce([(xb >= lo) & (xb <= hi) for xb, _, lo, hi in xs])
    inside_a = np.logical_and.reduce([(xa >= lo) & (xa <= hi) for _, xa, lo, hi in xs])
    n_in = int(inside_b.sum() + inside_a.sum())
    per_axis = strata_per_axis(n_in, len(xs))
    code_b = np.zeros(len(inside_b), dtype=np.int64)
    code_a = np.zeros(len(inside_a), dtype=np.int64)
    count = 1
    for xb, xa, _, _ in xs:
        union = np.concatenate([xb[inside_b], xa[inside_a]])
        edges = np.unique(np.quantile(union, np.linspace(0, 1, per_axis + 1)[1:-1]))
        code_b = code_b * (len(edges) + 1) + np.searchsorted(edges, np.nan_to_num(xb), "right")
        code_a = code_a * (len(edges) + 1) + np.searchsorted(edges, np.nan_to_num(xa), "right")
        count *= len(edges) + 1
    code_b[~inside_b] = -1
    code_a[~inside_a] = -1
    return Strata(tuple(covariates), code_b, code_a, count)


def _weighted_quantile(sorted_values: F64, sorted_weights: F64, q: float) -> float:
    """Inverted-CDF weighted quantile: the smallest value whose cumulative weight share is at
    least ``q``."""
    cw = np.cumsum(sorted_weights)
    i = int(np.searchsorted(cw, q * cw[-1] * (1 - 1e-12), side="left"))
    return float(sorted_values[min(i, len(sorted_values) - 1)])


def like_for_like(
    b: F64,
    a: F64,
    sb: I64,
    sa: I64,
    percentiles: Sequence[float],
    *,
    min_count: int = MIN_COUNT,
) -> tuple[tuple[float, ...], float]:
    """After/before ratio at each percentile with the after run reweighted to the before run's
    mix of strata (``sb``, ``sa``: stratum per value, ``-1`` outside), over the strata where each
    run has at least ``min_count`` values; and the share of ``b`` those strata hold. NaN ratios
    (and coverage 0) when no stratum qualifies."""
    nan = tuple(math.nan for _ in percentiles)
    if len(b) == 0 or len(a) == 0:
        return nan, 0.0
    size = int(max(sb.max(initial=-1), sa.max(initial=-1))) + 1
    if size == 0:
        return nan, 0.0
    cb = np.bincount(sb[sb >= 0], minlength=size)
    ca = np.bincount(sa[sa >= 0], minlength=size)
    ok = (cb >= min_count) & (ca >= min_count)
    kb = (sb >= 0) & ok[np.maximum(sb, 0)]
    ka = (sa >= 0) & ok[np.maximum(sa, 0)]
    if not kb.any() or not ka.any():
        return nan, 0.0
    w = (cb[sa[ka]] / ca[sa[ka]]).astype(np.float64)
    order = np.argsort(a[ka])
    va, wa = a[ka][order], w[order]
    ratios = []
    for p in percentiles:
        qb = float(np.percentile(b[kb], p, method="inverted_cdf"))
        qa = _weighted_quantile(va, wa, p / 100.0)
        ratios.append(qa / qb if qb > 0 else math.nan)
    return tuple(ratios), float(kb.sum() / len(b))
