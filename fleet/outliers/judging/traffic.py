"""Which replicas were sent traffic unlike the fleet's.

The detector re-judges a small fleet without these replicas: a replica sent only long prompts
stands out on TTFT and, in a fleet of four, drags the median and the MAD towards itself far enough
to hide a replica that is slow for its own reasons (see ``detect``).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import numpy.typing as npt

from fleetwatch.fleet.outliers.config import DetectorConfig
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = ["different_traffic"]


def _median(x: npt.NDArray[np.float64]) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmedian(x)) if len(x) else math.nan


def _ratio_outside(x: npt.NDArray[np.float64], limit: float) -> npt.NDArray[np.bool_]:
    med = _median(x)
    if not math.isfinite(med) or med <= 0:
        return np.zeros(len(x), dtype=bool)
    ratio = x / med
    return np.asarray((ratio >= limit) | (ratio <= 1.0 / limit))


def different_traffic(table: FleetTable, config: DetectorConfig) -> tuple[str, ...]:
    """Replicas of ``table`` whose traffic differs from the fleet median by the detector's own
    workload thresholds: mean prompt length (ratio ``prompt_ratio`` either way), request rate
    (``request_rate_ratio`` either way), prefix-cache hit rate (``cache_hit_delta`` apart).

    Sorted names; empty when the source has no workload columns.
    """
    wl = table.aligned(table.workload)
    out = np.zeros(len(wl), dtype=bool)

    def col(name: str) -> npt.NDArray[np.float64]:
        return wl[name].to_numpy(dtype=np.float64, na_value=np.nan)

    if "mean_prompt_tokens" in wl.columns:
        out |= _ratio_outside(col("mean_prompt_tokens"), config.prompt_ratio)
    if "request_rate" in wl.columns:
        out |= _ratio_outside(col("request_rate"), config.request_rate_ratio)
    if "cache_hit_rate" in wl.columns:
        c = col("cache_hit_rate")
        med = _median(c)
        if math.isfinite(med):
            with np.errstate(invalid="ignore"):
                out |= np.abs(c - med) >= config.cache_hit_delta
    return tuple(sorted(map(str, wl.index[out].tolist())))
