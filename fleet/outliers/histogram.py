"""Histogram quantile math: Prometheus' ``histogram_quantile`` over cumulative bucket counts."""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["histogram_quantile"]


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
