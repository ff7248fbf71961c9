"""Histogram math: Prometheus' ``histogram_quantile`` over cumulative bucket counts, the requests
a histogram counted, as samples for the per-request rank test, and which quantiles a histogram
can tell apart at all."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

__all__ = ["bucket_samples", "histogram_quantile", "median_bucket", "resolvable"]


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus' ``histogram_quantile`` over cumulative ``(le, count)`` pairs.

    Linear interpolation inside the bucket; the lower edge of the first bucket is 0; a quantile in
    the +Inf bucket returns the highest finite bound. NaN when there are no observations.
    """
    pairs = sorted((float(le), float(c)) for le, c in buckets)
    if not pairs or pairs[-1][1] <= 0:
        return math.nan
    total = pairs[-1][1]
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in pairs:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            if c == prev_c:
                return le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return pairs[-1][0]


def bucket_samples(cumulative: Mapping[float, float]) -> np.ndarray:
    """The observations one histogram counted, each at its bucket's upper bound (+Inf for the
    last): cumulative ``{le: count}`` (an ``increase()`` over a window, rounded to whole
    requests). Only their order matters to a rank test, and observations in one bucket tie."""
    les = sorted(cumulative)
    counts = np.rint(np.maximum.accumulate([max(cumulative[le], 0.0) for le in les]))
    per_bucket = np.diff(counts, prepend=0.0).astype(np.int64)
    return np.repeat(np.asarray(les, dtype=np.float64), per_bucket)


def resolvable(x: np.ndarray, median: float, bounds: Iterable[float], worse: str) -> np.ndarray:
    """Which quantiles ``x`` a histogram with upper bounds ``bounds`` tells apart from ``median``
    in the ``worse`` direction ("higher", "lower" or "both"): those in another bucket.

    ``histogram_quantile`` interpolates linearly inside a bucket, so two quantiles in one bucket
    differ only by how their observations split around an edge the histogram does not have: a
    p50 of 7.8 ms against 5 ms, both inside (0, 10 ms], says no more than "both at most 10 ms".
    """
    edges = np.unique(np.asarray([b for b in bounds if math.isfinite(b)], dtype=np.float64))
    x = np.asarray(x, dtype=np.float64)
    if not len(edges) or not math.isfinite(median):
        return np.ones(x.shape, dtype=bool)
    at = np.searchsorted(edges, x, side="left")
    mid = int(np.searchsorted(edges, median, side="left"))
    if worse == "higher":
        return np.asarray(at > mid)
    if worse == "lower":
        return np.asarray(at < mid)
    return np.asarray(at != mid)


def median_bucket(median: float, bounds: Iterable[float]) -> tuple[float, float] | None:
    """The bucket ``(lower, upper]`` of a histogram with upper bounds ``bounds`` that holds
    ``median`` (lower edge 0 for the first bucket; None without finite bounds)."""
    edges = sorted({float(b) for b in bounds if math.isfinite(b)})
    if not edges or not math.isfinite(median):
        return None
    i = int(np.searchsorted(edges, median, side="left"))
    lower = edges[i - 1] if i > 0 else min(0.0, edges[0])
    upper = edges[i] if i < len(edges) else math.inf
    return lower, upper
