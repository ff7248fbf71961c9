"""The reference answer both SLO backtest benchmarks check against: the 99.9 % availability SLO
they backtest, and its firing intervals from per-bin counts by plain pandas rolling sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.slo.load import load_spec
from fleetwatch.slo.spec import ServiceLevelObjective

Intervals = list[tuple[str, float, float | None]]


def availability_slo(step: int) -> ServiceLevelObjective:
    """The benchmarks' one SLO, evaluated every ``step`` seconds."""
    return load_spec(
        f"service: bench\nevaluation_interval: {step}s\n"
        "slos: [{name: availability, objective: 99.9, period: 30d, sli: {kind: availability}}]"
    ).slos[0]


def firing_intervals(
    slo: ServiceLevelObjective, per_bin: pd.DataFrame, grid: np.ndarray[Any, Any], step: int
) -> Intervals:
    """Firing intervals from per-bin counts (columns total, bad) on the full bin grid."""
    ratios = {}
    for win in sorted({x for w in slo.windows for x in (w.long_s, w.short_s)}):
        rolled = per_bin.rolling(win // step, min_periods=1).sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios[win] = (rolled["bad"] / rolled["total"]).to_numpy()
    out: Intervals = []
    for severity in ("page", "ticket"):
        firing = np.zeros(grid.size, dtype=bool)
        for w in (w for w in slo.windows if w.severity == severity):
            thr = slo.threshold(w)
            firing |= (ratios[w.long_s] > thr) & (ratios[w.short_s] > thr)
        flips = np.flatnonzero(np.diff(np.concatenate(([False], firing, [False])).astype(np.int8)))
        for s, e in zip(flips[0::2], flips[1::2], strict=True):
            end = None if e >= grid.size else float(grid[e] * step)
            out.append((severity, float(grid[s] * step), end))
    return sorted(out, key=lambda i: (i[1], i[0]))
