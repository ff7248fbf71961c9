"""Which replicas were sent traffic unlike the fleet's.

The detector re-judges a small fleet without these replicas: a replica sent only long prompts
stands out on TTFT and, in a fleet of four, drags the median and the MAD towards itself far enough
to hide a replica that is slow for its own reasons (see ``detect``).
"""

from __future__ import annotations

import math

import pandas as pd

from fleet.outliers.config import DetectorConfig
from fleet.outliers.table import FleetTable

__all__ = ["different_traffic"]


def _ratio_outside(col: pd.Series, limit: float) -> set[str]:
    x = col.astype("float64")
    med = float(x.median())
    if not math.isfinite(med) or med <= 0:
        return set()
    ratio = x / med
    return {str(r) for r in ratio.index[(ratio >= limit) | (ratio <= 1.0 / limit)]}


def different_traffic(table: FleetTable, config: DetectorConfig) -> tuple[str, ...]:
    """Replicas of ``table`` whose traffic differs from the fleet median by the detector's own
    workload thresholds: mean prompt length (ratio ``prompt_ratio`` either way), request rate
    (``request_rate_ratio`` either way), prefix-cache hit rate (``cache_hit_delta`` apart).

    Sorted names; empty when the source has no workload columns.
    """
    wl = table.aligned(table.workload)
    out: set[str] = set()
    if "mean_prompt_tokens" in wl.columns:
        out |= _ratio_outside(wl["mean_prompt_tokens"], config.prompt_ratio)
    if "request_rate" in wl.columns:
        out |= _ratio_outside(wl["request_rate"], config.request_rate_ratio)
    if "cache_hit_rate" in wl.columns:
        c = wl["cache_hit_rate"].astype("float64")
        med = float(c.median())
        if math.isfinite(med):
            out |= {str(r) for r in c.index[(c - med).abs() >= config.cache_hit_delta]}
    return tuple(sorted(out))
