"""Exact permutation test that a percentile moved between two runs, optionally within strata.

For percentile ``q``, pool both runs, take the pooled ``q``-quantile ``c`` (an observed value) and
count ``A``, the after run's values at or below ``c``. Given the pooled values, every assignment
of which ``n_after`` of them came from the after run is equally likely when the two runs are
draws from one distribution, so ``A`` is hypergeometric: ``K`` values are ``≤ c`` of ``N`` pooled,
``n_after`` drawn. That is the permutation distribution of the statistic, in closed form — no
resampling, no seed, no asymptotics, and valid with ties (``K`` counts them) and unequal sizes.

Why this statistic is the percentile shift: the after run's own ``q``-quantile lies above ``c``
exactly when fewer than ``⌈q·n_after⌉`` of its values are ``≤ c`` (and the before run's then lies
at or below ``c``), so ``A`` orders the two runs' percentiles; by the Bahadur representation the
difference of the two sample quantiles is, to first order, ``(F_b(c) − F_a(c)) / f(c)``, a linear
function of ``A``. For ``q = 0.5`` this is Mood's median test; the two-sided p-value for one
stratum equals Fisher's exact test on the 2×2 table (run × at-or-below ``c``) with the p-value
taken as twice the smaller tail.

Within strata (like-for-like, see ``matching``): ``c_s`` is each stratum's pooled quantile, and
``T = Σ A_s`` is a sum of independent hypergeometrics (labels are exchangeable only within a
stratum under the null that, request size for request size, the runs are alike); its exact
distribution is their convolution (the exact form of the Cochran–Mantel–Haenszel test).

Two-sided p = min(1, 2·min(P(T ≤ t), P(T ≥ t))): exact, and conservative through discreteness.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import gammaln

__all__ = ["counts_p_value", "quantile_counts", "quantile_test", "quantile_tests"]

F64 = np.ndarray[Any, np.dtype[np.float64]]
I64 = np.ndarray[Any, np.dtype[np.int64]]

# Each stratum's pmf is evaluated within 12 σ + 30 of its mean. The mass beyond is below 1e-30:
# Chernoff bounds hold for the hypergeometric as for the binomial (Hoeffding 1963), and the
# +30 covers the Poisson-like counts at p99 whose σ is small.
_TAIL_SD, _TAIL_ABS = 12.0, 30.0


Prepared = tuple[I64, I64, I64, I64, I64]


def _prepare(b: F64, a: F64, sb: I64 | None, sa: I64 | None) -> Prepared | None:
    """Pooled values sorted by (stratum, value) as an order-keeping integer key (equal exactly
    for ties within a stratum), the prefix count of after values, stratum starts and ends, and
    each stratum's after count. None when nothing is left."""
    v = np.concatenate([b, a])
    g = np.concatenate([np.zeros(len(b), dtype=np.int64), np.ones(len(a), dtype=np.int64)])
    if sb is None and sa is None:
        # Two sorted runs (as ``compare_metric`` passes them) merge in linear time by timsort.
        runs = bool(np.all(b[1:] >= b[:-1]) and np.all(a[1:] >= a[:-1]))
        order = np.argsort(v, kind="stable" if runs else None)
        s = np.zeros(len(v), dtype=np.int64)
    else:
        order = np.argsort(v)
        sb = np.zeros(len(b), dtype=np.int64) if sb is None else sb
        sa = np.zeros(len(a), dtype=np.int64) if sa is None else sa
        s = np.concatenate([sb, sa]).astype(np.int64)
        small = s.max(initial=0) < 2**15  # 16-bit keys sort stably by radix, in linear time
        by_stratum = s[order].astype(np.int16) if small else s[order]
        order = order[np.argsort(by_stratum, kind="stable")]
    v, g, s = v[order], g[order], s[order]
    keep = s >= 0
    v, g, s = v[keep], g[keep], s[keep]
    if len(v) == 0:
        return None
    key = np.cumsum(np.r_[True, (v[1:] != v[:-1]) | (s[1:] != s[:-1])], dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]]).astype(np.int64)
    ends = np.r_[starts[1:], len(key)].astype(np.int64)
    cg = np.r_[0, np.cumsum(g)].astype(np.int64)
    return key, cg, starts, ends, cg[ends] - cg[starts]


def quantile_counts(
    b: F64, a: F64, q: float, sb: I64 | None = None, sa: I64 | None = None
) -> tuple[int, I64, I64, I64]:
    """``(t, N, K, n)``: the observed count ``t = Σ A_s`` and, per stratum, the pooled size
    ``N``, the pooled count at or below the stratum's ``q``-quantile ``K``, and the after run's
    size ``n``. Values with stratum ``-1`` are left out; no strata means one."""
    prepared = _prepare(b, a, sb, sa)
    if prepared is None:
        empty = np.zeros(0, dtype=np.int64)
        return 0, empty, empty, empty
    return _counts(prepared, q)


def _counts(prepared: Prepared, q: float) -> tuple[int, I64, I64, I64]:
    key, cg, starts, ends, n_after = prepared
    size = ends - starts
    k = np.clip(np.ceil(np.round(q * size, 9)).astype(np.int64), 1, size)
    at_or_below = np.searchsorted(key, key[starts + k - 1], side="right") - starts
    counts = cg[starts + at_or_below] - cg[starts]
    return int(counts.sum()), size, at_or_below.astype(np.int64), n_after


def _log_comb(n: F64, k: F64) -> F64:
    out: F64 = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return out


def _null_pmf(size: I64, at_or_below: I64, n_after: I64) -> tuple[int, F64]:
    """(offset, pmf) of the sum of independent hypergeometrics, tails beyond 12 σ + 30 dropped.

    Every stratum's pmf comes from one vectorised log-binomial evaluation; they are then
    convolved one by one, trimming what falls below 1e-30 of the peak."""
    big_n, big_k, n = (x.astype(np.float64) for x in (size, at_or_below, n_after))
    lo = np.maximum(0.0, n - (big_n - big_k))
    hi = np.minimum(big_k, n)
    var = n * big_k * (big_n - big_k) * (big_n - n) / (big_n**2 * np.maximum(big_n - 1, 1))
    mean, sd = n * big_k / big_n, np.sqrt(var)
    lo = np.maximum(lo, np.floor(mean - _TAIL_SD * sd - _TAIL_ABS))
    hi = np.minimum(hi, np.ceil(mean + _TAIL_SD * sd + _TAIL_ABS))
    fixed = lo >= hi
    offset = int(lo[fixed].sum())
    lo, hi, big_n, big_k, n = (x[~fixed] for x in (lo, hi, big_n, big_k, n))
    if len(lo) == 0:
        return offset, np.ones(1)
    width = (hi - lo + 1).astype(np.int64)
    first = np.r_[0, np.cumsum(width)[:-1]]
    seg = np.repeat(np.arange(len(lo)), width)
    x = lo[seg] + (np.arange(int(width.sum())) - first[seg])
    log_pmf = _log_comb(big_k[seg], x) + _log_comb(big_n[seg] - big_k[seg], n[seg] - x)
    pmf = np.exp(log_pmf - np.maximum.reduceat(log_pmf, first)[seg])
    pmf /= np.add.reduceat(pmf, first)[seg]
    acc = np.ones(1)
    for i, start in enumerate(first.tolist()):
        acc = np.convolve(acc, pmf[start : start + int(width[i])])
        nz = np.flatnonzero(acc > acc.max() * 1e-30)
        acc = acc[nz[0] : nz[-1] + 1]
        offset += int(nz[0])
    offset += int(lo.sum())
    out: F64 = acc / acc.sum()
    return offset, out


def _two_sided(t: int, offset: int, pmf: F64) -> float:
    i = t - offset
    lower = float(pmf[: max(i + 1, 0)].sum())
    upper = float(pmf[max(i, 0) :].sum()) if i < len(pmf) else 0.0
    return min(1.0, 2.0 * min(lower, upper))


def counts_p_value(t: int, size: I64, at_or_below: I64, n_after: I64) -> float:
    """The two-sided exact p-value of ``quantile_counts``' ``(t, N, K, n)``: how the test reads
    counts that were taken elsewhere (``fleet.compare.engine`` counts them in one ordered pass)."""
    if len(size) == 0:
        return math.nan
    return _two_sided(t, *_null_pmf(size, at_or_below, n_after))


def quantile_tests(
    b: F64, a: F64, qs: Sequence[float], sb: I64 | None = None, sa: I64 | None = None
) -> list[float]:
    """Two-sided exact p-values that the ``q``-quantile (0 < q < 1) differs between ``b``
    (before) and ``a`` (after), for each ``q`` in ``qs``, within strata ``sb``/``sa`` when given
    (``-1``: left out). NaN when nothing is left to compare."""
    prepared = _prepare(b, a, sb, sa)
    if prepared is None:
        return [math.nan for _ in qs]
    out = []
    for q in qs:
        t, size, at_or_below, n_after = _counts(prepared, q)
        out.append(_two_sided(t, *_null_pmf(size, at_or_below, n_after)))
    return out


def quantile_test(b: F64, a: F64, q: float, sb: I64 | None = None, sa: I64 | None = None) -> float:
    """``quantile_tests`` for one ``q``."""
    return quantile_tests(b, a, (q,), sb, sa)[0]
