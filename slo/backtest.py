"""Backtest: when each burn-rate alert of an SLO would have fired over request history.

An alert fires at an evaluation time when any of its conditions holds: the error ratio over the
long window and over the short window both exceed burn x budget (and, with ``min_events``, the
long window holds at least that many requests). This is the expression of the generated rules,
evaluated on the same grid, so the intervals match what Prometheus would have fired.

For each firing interval:

- detection delay: from the onset (the last evaluation before the fire at which the burn rate
  over the alert's shortest short window was at most 1x, i.e. the budget was not yet being
  overspent) to the first evaluation at which the alert fired;
- reset time: from the last evaluation step inside the interval whose own requests burned above
  1x (the incident's last bad step) to the evaluation at which the alert stopped firing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from slo.burn import Timeline, window_counts
from slo.events import sli_events
from slo.rules.generate import alert_name
from slo.spec import SEVERITIES, BurnWindow, ServiceLevelObjective, Severity

__all__ = ["AlertTrack", "Backtest", "FiringInterval", "alert_firing", "backtest", "backtest_slo"]

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]


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


def alert_firing(
    slo: ServiceLevelObjective, timeline: Timeline, windows: Sequence[BurnWindow]
) -> BoolArray:
    """Firing state of the alert made of ``windows`` at each evaluation time."""
    out = np.zeros(timeline.times.size, dtype=bool)
    with np.errstate(invalid="ignore"):
        for w in windows:
            thr = slo.threshold(w)
            cond = (timeline.ratio(w.long_s) > thr) & (timeline.ratio(w.short_s) > thr)
            if slo.min_events > 0:
                cond &= timeline.total[w.long_s] >= slo.min_events
            out |= cond
    return out


def _intervals(slo: ServiceLevelObjective, tl: Timeline, track: AlertTrack) -> list[FiringInterval]:
    f = track.firing.astype(np.int8)
    edges = np.diff(np.concatenate(([0], f, [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    budget = slo.error_budget
    shortest = min(w.short_s for w in track.windows)
    with np.errstate(invalid="ignore", divide="ignore"):
        short_burn = tl.burn(shortest, budget)
        step_burn = tl.burn(tl.step_s, budget)
        peak = np.fmax.reduce([tl.burn(w.long_s, budget) for w in track.windows])
    out = []
    for s, e in zip(starts, ends, strict=True):
        calm = np.flatnonzero(~(short_burn[: s + 1] > 1.0))
        delay = float(tl.times[s] - tl.times[calm[-1]]) if calm.size else None
        still = e >= tl.times.size
        reset = None
        if not still:
            hot = np.flatnonzero(step_burn[s:e] > 1.0)
            reset = float(tl.times[e] - tl.times[s + hot[-1]]) if hot.size else None
        out.append(
            FiringInterval(
                track.alert,
                track.severity,
                float(tl.times[s]),
                None if still else float(tl.times[e]),
                delay,
                reset,
                float(np.nanmax(peak[s:e])) if np.isfinite(peak[s:e]).any() else float("nan"),
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
