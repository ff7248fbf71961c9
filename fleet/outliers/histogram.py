"""Histogram math: Prometheus' ``histogram_quantile`` over cumulative bucket counts, and the
requests a histogram counted, as samples for the per-request rank test."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

__all__ = ["bucket_samples", "histogram_quantile"]


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
