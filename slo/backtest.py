"""Backtest: when each burn-rate alert of an SLO would have fired over request history.

An alert fires at an evaluation time when any of its conditions holds: the error ratio over the
long window and over the short window both exceed burn x budget (and, with ``min_events``, the
long window holds at least that many requests). This is the expression of the generated rules,
evaluated on the same grid, so the intervals match what Prometheus would have fired.

For each firing interval:

- ``bad_since_s``: when the bad period behind it began: the first bad event after the change
  point, the latest minimum of (bad events - threshold x events) counted forward. It is looked
  for within the firing condition's long window before the fire, and no earlier than one short
  window before the last calm evaluation (below), whose short window saw the budget overspent
  at most 1x: an earlier incident followed by calm is not this one's start, while an alert
  that flaps during one incident reports that incident's start each time;
  the threshold is that of the condition that fired (the highest, when several did), so the
  bad period is the stretch whose error ratio was above the level the alert fires at, and a
  stray earlier error does not move its start. Given to the bin (``Timeline.bin_s``): the start
  of the bin holding that event, at most one bin early;
- ``detection_delay_s``: from ``bad_since_s`` to the first evaluation at which the alert fired;
- ``window_delay_s``: the window-based figure: from the last evaluation before the fire at which
  the burn rate over the alert's shortest short window was at most 1x (for a slow burn this is
  long after the errors began: the short window must fill first);
- ``reset_s``: from the last evaluation step inside the interval whose own requests burned above
  1x (the incident's last bad step) to the evaluation at which the alert stopped firing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.slo.bins import BinCounts
from fleetwatch.slo.burn import Timeline, bin_seconds, timeline, window_counts
from fleetwatch.slo.events import sli_events
from fleetwatch.slo.rules.generate import alert_name
from fleetwatch.slo.spec import SEVERITIES, BurnWindow, ServiceLevelObjective, Severity

__all__ = [
    "AlertTrack",
    "Backtest",
    "FiringInterval",
    "alert_firing",
    "backtest",
    "backtest_counts",
    "backtest_slo",
]

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
IntArray = np.ndarray[Any, np.dtype[np.int64]]
_BLOCK = 1 << 14  # evaluations per block: the block's arrays stay in cache


@dataclass(frozen=True, slots=True)
class FiringInterval:
    """One stretch of firing, in seconds on the records' clock. ``end_s`` is the evaluation at
    which the alert stopped firing (None: still firing at the end of the records)."""

    alert: str
    severity: Severity
    start_s: float
    end_s: float | None
    detection_delay_s: float | None
    reset_s: float | None
    peak_burn: float
    bad_since_s: float | None = None
    window_delay_s: float | None = None

    @property
    def duration_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class AlertTrack:
    """An alert's firing state at every evaluation time of the timeline."""

    alert: str
    severity: Severity
    windows: tuple[BurnWindow, ...]
    firing: BoolArray


@dataclass(frozen=True, slots=True)
class Backtest:
    slo: ServiceLevelObjective
    timeline: Timeline
    tracks: tuple[AlertTrack, ...]
    intervals: tuple[FiringInterval, ...]


def _ratio_bound(
    tl: Timeline, window_s: int, first: IntArray, last: IntArray
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """For each run of evaluations ``first..last``: an upper bound of the error ratio over
    ``window_s`` at every evaluation of the run: the bad events of the union of their windows
    over the events of their intersection (inf or NaN where that holds none; NaN only when no
    bad event is in the union, so no ratio can exceed anything)."""
    back = window_s // tl.bin_s
    a, b = tl.at0 + first * tl.stride, tl.at0 + last * tl.stride

    def cum(c: np.ndarray[Any, Any], at: IntArray) -> IntArray:
        if at.size and at[0] >= 0:  # ascending: all in range
            return np.asarray(c[at], dtype=np.int64)
        return np.where(at >= 0, c[np.maximum(at, 0)], 0).astype(np.int64)

    bad_union = cum(tl.cum_bad, b) - cum(tl.cum_bad, a - back)
    total_common = np.where(b - back < a, cum(tl.cum_total, a) - cum(tl.cum_total, b - back), 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(bad_union / total_common, dtype=np.float64)


def alert_firing(
    slo: ServiceLevelObjective, timeline: Timeline, windows: Sequence[BurnWindow]
) -> BoolArray:
    """Firing state of the alert made of ``windows`` at each evaluation time.

    Per condition, evaluations go in runs shorter than half its short window; a run is skipped
    when an upper bound of its ratios (``_ratio_bound``), over the short and over the long
    window, is not above the threshold: no evaluation in it can fire. The others are evaluated
    exactly, the short window first, the long window (and the guard) only where the short one
    is over the threshold. Quiet stretches thus cost one bound per run, not a ratio per
    evaluation, and the result is the same.
    """
    n = timeline.times.size
    out = np.zeros(n, dtype=bool)
    for w in windows:
        thr = slo.threshold(w)
        run = max(1, min(4096, w.short_s // timeline.step_s // 2))
        first = np.arange(0, n, run, dtype=np.int64)
        last = np.minimum(first + run, n) - 1
        with np.errstate(invalid="ignore"):
            hot_runs = (_ratio_bound(timeline, w.short_s, first, last) > thr) & (
                _ratio_bound(timeline, w.long_s, first, last) > thr
            )
        flips = np.flatnonzero(np.diff(np.concatenate(([0], hot_runs.astype(np.int8), [0]))))
        for a, b in zip(flips[0::2].tolist(), flips[1::2].tolist(), strict=True):
            for lo in range(int(first[a]), int(last[b - 1]) + 1, _BLOCK):
                hi = min(int(last[b - 1]) + 1, lo + _BLOCK)
                with np.errstate(invalid="ignore"):
                    hot = np.flatnonzero(timeline.ratio(w.short_s, lo, hi) > thr)
                    if hot.size == 0:
                        continue
                    ok = timeline.ratio(w.long_s, lo, hi)[hot] > thr
                if slo.min_events > 0:
                    ok &= timeline.counts(w.long_s, lo, hi)[0][hot] >= slo.min_events
                out[lo + hot[ok]] = True
    return out


def _firing_condition(
    slo: ServiceLevelObjective, tl: Timeline, windows: Sequence[BurnWindow], k: int
) -> BurnWindow:
    """The condition that holds at evaluation ``k`` with the highest threshold."""
    held = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for w in windows:
            thr = slo.threshold(w)
            ok = tl.ratio(w.long_s, k, k + 1)[0] > thr and tl.ratio(w.short_s, k, k + 1)[0] > thr
            if ok and slo.min_events > 0:
                ok = tl.counts(w.long_s, k, k + 1)[0][0] >= slo.min_events
            if ok:
                held.append(w)
    return max(held or windows, key=slo.threshold)


def _bad_since(
    slo: ServiceLevelObjective, tl: Timeline, fire: int, cond: BurnWindow, floor: int
) -> float | None:
    """Start of the bin holding the first bad event of the bad period behind a fire at
    evaluation ``fire`` of condition ``cond``, looking back to prefix-sum entry ``floor`` at
    most (see the module docstring); None when none."""
    end = tl.entry(fire)
    start = max(0, end - cond.long_s // tl.bin_s, floor)
    cum_bad = np.asarray(tl.cum_bad[start : end + 1], dtype=np.int64)
    cum_total = np.asarray(tl.cum_total[start : end + 1], dtype=np.int64)
    excess = cum_bad - slo.threshold(cond) * cum_total
    low = excess.size - 1 - int(np.argmin(excess[::-1]))  # the latest minimum
    after = np.flatnonzero(cum_bad[low:] > cum_bad[low])
    if after.size == 0:
        return None
    return tl.bin_end_s(start + low + int(after[0]) - 1)


def _last_calm(burn_at: Any, s: int, floor: int, memo: int | None) -> int | None:
    """The last evaluation <= ``s`` whose short-window burn is at most 1x, scanning back to
    ``floor`` (then ``memo``, the answer at ``floor``)."""
    hi = s + 1
    while hi > floor:
        lo = max(floor, hi - 4096)
        calm = np.flatnonzero(~(burn_at(lo, hi) > 1.0))
        if calm.size:
            return lo + int(calm[-1])
        hi = lo
    return memo


def _intervals(slo: ServiceLevelObjective, tl: Timeline, track: AlertTrack) -> list[FiringInterval]:
    firing = track.firing
    flips = np.flatnonzero(firing[1:] != firing[:-1]) + 1
    if firing.size and firing[0]:
        flips = np.concatenate(([0], flips))
    if firing.size and firing[-1]:
        flips = np.concatenate((flips, [firing.size]))
    starts, ends = flips[0::2], flips[1::2]
    budget = slo.error_budget
    shortest = min(w.short_s for w in track.windows)
    longs = sorted({w.long_s for w in track.windows})

    def short_burn(lo: int, hi: int) -> np.ndarray[Any, Any]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return tl.burn(shortest, budget, lo, hi)

    out = []
    prev_start, memo = 0, None
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        calm = _last_calm(short_burn, s, prev_start, memo)
        prev_start, memo = s, calm
        window_delay = float(tl.times[s] - tl.times[calm]) if calm is not None else None
        cond = _firing_condition(slo, tl, track.windows, s)
        floor = 0 if calm is None else tl.entry(calm) - shortest // tl.bin_s
        since = _bad_since(slo, tl, s, cond, floor)
        still = e >= tl.times.size
        reset = None
        with np.errstate(invalid="ignore", divide="ignore"):
            if not still:
                hot = np.flatnonzero(tl.burn(tl.step_s, budget, s, e) > 1.0)
                reset = float(tl.times[e] - tl.times[s + hot[-1]]) if hot.size else None
            peak = np.fmax.reduce([tl.burn(w, budget, s, e) for w in longs])
        out.append(
            FiringInterval(
                track.alert,
                track.severity,
                float(tl.times[s]),
                None if still else float(tl.times[e]),
                None if since is None else float(tl.times[s]) - since,
                reset,
                float(np.nanmax(peak)) if np.isfinite(peak).any() else float("nan"),
                since,
                window_delay,
            )
        )
    return out


def backtest_slo(slo: ServiceLevelObjective, timeline: Timeline) -> Backtest:
    """Firing tracks and intervals of ``slo``'s burn alerts on a timeline that holds its windows."""
    tracks = []
    intervals: list[FiringInterval] = []
    for sev in SEVERITIES:
        windows = tuple(w for w in slo.windows if w.severity == sev)
        if not windows:
            continue
        track = AlertTrack(alert_name(slo, sev), sev, windows, alert_firing(slo, timeline, windows))
        tracks.append(track)
        intervals += _intervals(slo, timeline, track)
    intervals.sort(key=lambda i: (i.start_s, i.severity))
    return Backtest(slo, timeline, tuple(tracks), tuple(intervals))


def new_counts(slo: ServiceLevelObjective, step_s: int) -> BinCounts:
    """Empty bins for ``slo``'s events at ``step_s``: the common divisor of step and windows."""
    return BinCounts(bin_seconds(slo.window_seconds(), step_s))


def backtest_counts(
    slo: ServiceLevelObjective, counts: BinCounts, step_s: int, start_s: float, end_s: float
) -> Backtest:
    """Backtest ``slo`` over events already binned (``new_counts``; e.g. streamed from a file)."""
    return backtest_slo(slo, timeline(counts, step_s, start_s, end_s))


def backtest(
    slo: ServiceLevelObjective,
    frame: pd.DataFrame,
    step_s: int,
    *,
    start_s: float | None = None,
    end_s: float | None = None,
) -> Backtest:
    """Backtest ``slo`` over a records frame, evaluating every ``step_s`` seconds."""
    events = sli_events(slo, frame)
    tl = window_counts(events, slo.window_seconds(), step_s, start_s=start_s, end_s=end_s)
    return backtest_slo(slo, tl)
