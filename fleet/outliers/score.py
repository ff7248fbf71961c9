"""Score a whole table at once: each cell's oriented robust z and which cells pass both gates.

The z is oriented so that positive is worse; the gates are statistical and practical (see
``signals``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fleet.outliers.signals import SignalSpec
from fleet.outliers.stats import OWN_CUTOFF, RobustColumns, robust_columns

__all__ = ["score_cells"]


def _orient(spec: SignalSpec, z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if spec.worse == "higher":
        return z
    if spec.worse == "lower":
        return np.asarray(np.negative(z))
    return np.asarray(np.abs(z))


def _effect(
    spec: SignalSpec, x: np.ndarray[Any, Any], med: float, ratio: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    with np.errstate(invalid="ignore"):
        if spec.gate == "absolute":
            d = x - med
            if spec.worse == "higher":
                return np.asarray(d >= spec.min_effect)
            if spec.worse == "lower":
                return np.asarray(-d >= spec.min_effect)
            return np.asarray(np.abs(d) >= spec.min_effect)
        m = spec.min_effect
        if spec.worse == "higher":
            return np.asarray(ratio >= m)
        if spec.worse == "lower":
            return np.asarray(ratio <= 1.0 / m)
        return np.asarray((ratio >= m) | (ratio <= 1.0 / m))


def score_cells(
    frame: pd.DataFrame, stderr: pd.DataFrame | None, specs: list[SignalSpec], alpha: float
) -> tuple[RobustColumns, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Robust statistics and the finding mask for every cell of ``frame``."""
    x = frame.to_numpy(dtype=np.float64, na_value=np.nan)
    se = None
    if stderr is not None and len(stderr.columns):
        se = stderr.reindex(index=frame.index, columns=frame.columns).to_numpy(
            dtype=np.float64, na_value=np.nan
        )
    rc = robust_columns(
        x,
        rel_floor=np.array([s.rel_floor for s in specs]),
        abs_floor=np.array([s.abs_floor for s in specs]),
        stderr=se,
        alpha=alpha,
    )
    oz = np.empty_like(x)
    eff = np.zeros(x.shape, dtype=bool)
    for j, spec in enumerate(specs):
        oz[:, j] = _orient(spec, rc.z[:, j])
        eff[:, j] = _effect(spec, x[:, j], float(rc.median[j]), rc.ratio[:, j])
    with np.errstate(invalid="ignore"):
        flag = (oz > rc.cutoff) & (rc.z_own >= OWN_CUTOFF) & eff & ~np.isnan(x)
    return rc, oz, flag
