"""Robust statistics for comparing each replica with its fleet.

The fleet median is the reference and the median absolute deviation (MAD) the spread, because a
mean and standard deviation let two bad replicas hide each other: Envoy's success-rate rule
(eject below mean − 1.9·σ) on success rates [50, 50, 100, 100, 100] puts the threshold near 33 %,
so neither 50 % host is ejected. The median (100) and MAD (0) are untouched by the two.

Spread estimate, per signal (column):

``scale = max(1.4826 · b(n) · MAD, floor)``,  ``z = (x − median) / scale``

- ``1.4826 · MAD`` estimates σ for normal data (the modified z-score 0.6745·(x − median)/MAD of
  Iglewicz and Hoaglin is the same number); ``b(n)`` is Croux and Rousseeuw's small-sample
  correction, so a fleet of three is not judged with a spread that is biased low.
- ``floor`` keeps the test sound when MAD is 0 (more than half the replicas report the same value:
  every other value would otherwise be infinitely far away): a relative floor of the median
  (``rel_floor · |median|``) or an absolute floor for signals whose median is 0 (error rate).
- ``stderr`` is a replica's own sampling error when known (a median of 40 requests is noisy).
  It is a second, separate test, not part of the spread: a finding also needs
  ``|x − median| / stderr ≥ OWN_CUTOFF`` (``z_own``), so a noisy median is not judged on the
  fleet's spread alone, while a replica whose own distribution is wide (a throttled replica's
  latencies spread with their mean) is not shielded by that width from a clear shift.

The cutoff is n-aware: Bonferroni over the fleet at level ``alpha``, never below Iglewicz and
Hoaglin's 3.5, so a fleet of 10,000 healthy replicas does not produce a finding by chance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

__all__ = [
    "IGLEWICZ_HOAGLIN_CUTOFF",
    "MAD_TO_SIGMA",
    "OWN_CUTOFF",
    "RobustColumns",
    "envoy_success_rate_threshold",
    "mad_small_sample_factor",
    "n_aware_cutoff",
    "robust_columns",
]

Array = np.ndarray[Any, np.dtype[np.float64]]

MAD_TO_SIGMA = 1.4826
"""σ ≈ 1.4826·MAD for normal data (1 / 0.6745)."""
IGLEWICZ_HOAGLIN_CUTOFF = 3.5
"""|modified z| above 3.5 is an outlier (Iglewicz and Hoaglin, 1993)."""
OWN_CUTOFF = 2.5
"""A replica's value must differ from the fleet median by at least this many of its own standard
errors (about 99 % two-sided) before the fleet test counts."""

# Croux & Rousseeuw (1992) small-sample correction factors for the MAD, n = 2..9.
_MAD_BN = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}


def mad_small_sample_factor(n: Array) -> Array:
    """Factor ``b(n)`` that makes 1.4826·MAD unbiased for σ at small n (1 for large n)."""
    n = np.asarray(n, dtype=np.float64)
    out = np.where(n > 9, n / np.maximum(n - 0.8, 1.0), 1.0)
    for k, v in _MAD_BN.items():
        out = np.where(n == k, v, out)
    return out


def n_aware_cutoff(n: Array, alpha: float = 0.01) -> Array:
    """One-sided robust-z cutoff for a fleet of ``n``: Bonferroni at ``alpha``, at least 3.5.

    n=3 → 3.5, n=100 → 3.72, n=10,000 → 4.75 (alpha 0.01).
    """
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    out: Array = np.maximum(IGLEWICZ_HOAGLIN_CUTOFF, _st.norm.isf(alpha / n))
    return out


@dataclass(frozen=True, slots=True)
class RobustColumns:
    """Per-column fleet statistics and per-cell scores (rows replicas, columns signals).

    ``z`` is signed (x − median)/scale; ``z_own`` is (x − median)/stderr (infinite where no
    stderr is known); ``ratio`` is x/median (NaN where the median is 0); ``floored`` marks
    columns whose spread came from the floor rather than the MAD.
    """

    median: Array
    mad: Array
    n: Array
    scale_mad: Array
    floor: Array
    floored: Array
    cutoff: Array
    z: Array
    z_own: Array
    ratio: Array


def robust_columns(
    x: Array,
    *,
    rel_floor: Array,
    abs_floor: Array,
    stderr: Array | None = None,
    alpha: float = 0.01,
) -> RobustColumns:
    """Robust z-scores for every cell of ``x`` (replicas × signals, NaN = missing).

    Vectorised over the whole matrix: 10,000 replicas × 10 signals take milliseconds.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError("x must be 2-D (replicas × signals)")
    k = x.shape[1]
    present = ~np.isnan(x)
    n = present.sum(axis=0).astype(np.float64)
    with np.errstate(all="ignore"):
        if x.shape[0]:
            med = np.nanmedian(np.where(n > 0, x, 0.0), axis=0)
            med = np.where(n > 0, med, np.nan)
            absdev = np.abs(x - med)
            mad = np.nanmedian(np.where(n > 0, absdev, 0.0), axis=0)
            mad = np.where(n > 0, mad, np.nan)
            # Rounding noise (1e-13 s between identical step times) is no spread at all.
            mad = np.where(mad <= 1e-9 * np.abs(med), 0.0, mad)
        else:
            med = np.full(k, np.nan)
            mad = np.full(k, np.nan)
        scale_mad = MAD_TO_SIGMA * mad_small_sample_factor(n) * mad
        floor = np.maximum(np.asarray(rel_floor, dtype=np.float64) * np.abs(med), abs_floor)
        scale_col = np.fmax(scale_mad, floor)
        z = (x - med) / np.broadcast_to(scale_col, x.shape)
        if stderr is None:
            z_own = np.where(np.isnan(x), np.nan, np.inf)
        else:
            se = np.asarray(stderr, dtype=np.float64)
            z_own = np.where(np.isnan(se) | (se <= 0), np.inf, np.abs(x - med) / se)
        ratio = np.where(med != 0, x / med, np.nan)
    return RobustColumns(
        median=med,
        mad=mad,
        n=n,
        scale_mad=scale_mad,
        floor=floor,
        floored=~(scale_mad > floor),
        cutoff=n_aware_cutoff(n, alpha),
        z=z,
        z_own=z_own,
        ratio=ratio,
    )


def envoy_success_rate_threshold(success_rates: Array, factor: float = 1.9) -> float:
    """Envoy's success-rate ejection threshold, mean − factor·σ (population σ), for comparison.

    >>> round(envoy_success_rate_threshold(np.array([50.0, 50, 100, 100, 100])), 1)
    33.5
    """
    v = np.asarray(success_rates, dtype=np.float64)
    return float(v.mean() - factor * v.std())
