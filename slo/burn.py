"""Event counts and burn rates per window on an evaluation grid, the way Prometheus computes them.

At every evaluation time t (multiples of the step) and for every window w, the counts are the
events that finished in (t - w, t], which is what ``increase(counter[w])`` returns when the
counter is sampled at the evaluation times (Prometheus 2 reads the closed range [t - w, t], so
the sample at t - w is the baseline). The ratio bad/total is NaN where no event fell in the
window, as 0/0 is in PromQL, so a comparison with it is false.

Events are binned once at the greatest common divisor of the step and the windows, then every
window is a difference of one cumulative sum: O(events + bins), no per-window pass over events.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from slo.errors import SLOSpecError
from slo.events import SLIEvents

__all__ = ["Timeline", "window_counts"]

IntArray = np.ndarray[Any, np.dtype[np.int64]]
FloatArray = np.ndarray[Any, np.dtype[np.float64]]

_MAX_BINS = 5_000_000
"""Bins of the finest grid at most (a few arrays of this many int64s: tens of MB), checked before
any array is allocated; with 30 s bins that is almost 5 years of records."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """Counts per window at each evaluation time ``times`` (seconds, every ``step_s``)."""

    times: FloatArray
    step_s: int
    total: Mapping[int, IntArray]
    bad: Mapping[int, IntArray]

    def ratio(self, window_s: int) -> FloatArray:
        """Error ratio over ``window_s`` at each evaluation time; NaN where no events."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(self.bad[window_s] / self.total[window_s], dtype=np.float64)

    def burn(self, window_s: int, error_budget: float) -> FloatArray:
        """Burn rate: error ratio / error budget (1.0 spends the budget exactly over the period)."""
        return self.ratio(window_s) / error_budget


def window_counts(
    events: SLIEvents,
    windows: Iterable[int],
    step_s: int,
    *,
    start_s: float | None = None,
    end_s: float | None = None,
) -> Timeline:
    """Counts of events and bad events in (t - w, t] for each window w at each evaluation time t
    from ``start_s`` to ``end_s`` (default: the grid that spans the events), both rounded to the
    step grid (multiples of ``step_s`` since the epoch)."""
    wins = sorted({int(w) for w in windows} | {step_s})
    times = events.times
    if start_s is None:
        if times.size == 0:
            raise SLOSpecError("no requests to evaluate (the records select no events)")
        start_s = float(times.min())
    if end_s is None:
        end_s = float(times.max()) if times.size else start_s
    first = math.floor(start_s / step_s) * step_s
    last = max(first, math.ceil(end_s / step_s) * step_s)
    g = reduce(math.gcd, wins, step_s)
    lo = (min(float(times.min()) if times.size else first, first - max(wins)) // g) * g - g
    nbins = int((last - lo) // g) + 1
    if nbins > _MAX_BINS:
        span = last - lo
        raise SLOSpecError(
            f"the records span {span:.6g} s, {nbins} bins of {g} s (at most {_MAX_BINS}); "
            "are all times in seconds on one clock? Otherwise choose windows and an evaluation "
            "interval with a larger common divisor, or a shorter stretch of records"
        )
    grid = np.arange(first, last + step_s, step_s, dtype=np.float64)
    keep = times <= last
    idx = np.ceil((times[keep] - lo) / g).astype(np.int64)
    np.clip(idx, 0, nbins - 1, out=idx)
    cum_total = np.cumsum(np.bincount(idx, minlength=nbins))
    cum_bad = np.cumsum(np.bincount(idx[events.bad[keep]], minlength=nbins))
    at = ((grid - lo) // g).astype(np.int64)
    total: dict[int, IntArray] = {}
    bad: dict[int, IntArray] = {}
    for w in wins:
        before = at - w // g
        total[w] = cum_total[at] - np.where(before >= 0, cum_total[np.maximum(before, 0)], 0)
        bad[w] = cum_bad[at] - np.where(before >= 0, cum_bad[np.maximum(before, 0)], 0)
    return Timeline(grid, step_s, total, bad)
