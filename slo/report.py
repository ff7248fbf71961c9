"""Error-budget reports and backtest summaries over request records, as values, text and JSON.

The report is evaluated at the last evaluation time of the records (or ``at_s``): the SLI over
the period before it, the budget left (as a fraction, negative once overspent, and in minutes of
full outage), the burn rate over each alert window, and the alerts firing then. ``coverage`` is
the share of the period the records span; a report over less than the period says so.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.core.duration import format_duration
from fleetwatch.slo.backtest import Backtest, backtest, backtest_counts
from fleetwatch.slo.spec import ServiceLevelObjective, SLOSpec
from fleetwatch.slo.stream import StreamedCounts

__all__ = [
    "SLOReport",
    "backtest_json",
    "backtest_spec",
    "backtest_text",
    "report_json",
    "report_spec",
    "report_text",
]


@dataclass(frozen=True, slots=True)
class SLOReport:
    """Where one SLO stands at ``at_s``."""

    slo: str
    objective: float
    period: str
    at_s: float
    events: int
    bad: int
    sli: float | None
    budget_minutes: float
    budget_remaining: float | None
    budget_remaining_minutes: float | None
    coverage: float
    burn: Mapping[str, float | None]
    firing: tuple[str, ...]


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _report(slo: ServiceLevelObjective, bt: Backtest, data_start: float) -> SLOReport:
    tl = bt.timeline
    last = tl.times.size - 1
    totals, bads = tl.counts(slo.period_s, last, last + 1)
    total, bad = int(totals[0]), int(bads[0])
    ratio = bad / total if total else math.nan
    remaining = 1 - ratio / slo.error_budget if total else math.nan
    budget_min = slo.budget_s / 60
    burns: dict[str, float | None] = {}
    for w in sorted({w for win in slo.windows for w in (win.short_s, win.long_s)}):
        with np.errstate(invalid="ignore", divide="ignore"):
            burns[format_duration(w)] = _num(float(tl.burn(w, slo.error_budget, last)[0]))
    at = float(tl.times[last])
    return SLOReport(
        slo=slo.name,
        objective=slo.objective,
        period=format_duration(slo.period_s),
        at_s=at,
        events=total,
        bad=bad,
        sli=_num(1 - ratio),
        budget_minutes=budget_min,
        budget_remaining=_num(remaining),
        budget_remaining_minutes=_num(remaining * budget_min),
        coverage=min(1.0, max(0.0, (at - data_start) / slo.period_s)),
        burn=burns,
        firing=tuple(t.alert for t in bt.tracks if t.firing[last]),
    )


Records = pd.DataFrame | str | os.PathLike[str] | StreamedCounts


def backtest_spec(
    spec: SLOSpec, frame: Records, *, start_s: float | None = None, end_s: float | None = None
) -> list[Backtest]:
    """A backtest per SLO over one grid (the spec's evaluation interval). ``frame`` is a records
    frame, or a record file: Parquet is streamed (``fleetwatch.slo.stream``), JSON lines read whole."""
    if isinstance(frame, StreamedCounts):
        return [
            backtest_counts(
                slo,
                bins,
                spec.evaluation_interval_s,
                frame.first_finish_s if start_s is None else start_s,
                frame.last_finish_s if end_s is None else end_s,
            )
            for slo, bins in zip(spec.slos, frame.counts, strict=True)
        ]
    if not isinstance(frame, pd.DataFrame):
        if str(frame).lower().endswith((".parquet", ".pq")):
            from fleetwatch.slo.stream import backtest_parquet

            return backtest_parquet(spec, frame, start_s=start_s, end_s=end_s)
        from fleetwatch.records import read_records

        frame = read_records(frame)
    if start_s is None and len(frame):
        start_s = float(frame["finished_s"].min())
    if end_s is None and len(frame):
        end_s = float(frame["finished_s"].max())
    return [
        backtest(slo, frame, spec.evaluation_interval_s, start_s=start_s, end_s=end_s)
        for slo in spec.slos
    ]


def report_spec(spec: SLOSpec, frame: Records, *, at_s: float | None = None) -> list[SLOReport]:
    """One report per SLO at ``at_s`` (default: the last finish time in the records); ``frame``
    as for ``backtest_spec``."""
    if not isinstance(frame, pd.DataFrame):
        if isinstance(frame, StreamedCounts) or str(frame).lower().endswith((".parquet", ".pq")):
            from fleetwatch.slo.stream import stream_counts

            streamed = frame if isinstance(frame, StreamedCounts) else stream_counts(spec, frame)
            end = streamed.last_finish_s if at_s is None else at_s
            backtests = [
                backtest_counts(slo, bins, spec.evaluation_interval_s, streamed.first_finish_s, end)
                for slo, bins in zip(spec.slos, streamed.counts, strict=True)
            ]
            return [_report(bt.slo, bt, streamed.first_finish_s) for bt in backtests]
        from fleetwatch.records import read_records

        frame = read_records(frame)
    backtests = backtest_spec(spec, frame, end_s=at_s)
    start = float(frame["finished_s"].min()) if len(frame) else 0.0
    return [_report(bt.slo, bt, start) for bt in backtests]


def _pct(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x * 100:.{digits}f}%"


def report_text(spec: SLOSpec, reports: Sequence[SLOReport]) -> str:
    lines = [f"service {spec.service}"]
    for r in reports:
        lines.append(
            f"  {r.slo}: objective {r.objective:g}% over {r.period}; SLI {_pct(r.sli)} "
            f"({r.bad} bad of {r.events} requests)"
        )
        lines.append(
            f"    error budget {r.budget_minutes:.1f} min; remaining {_pct(r.budget_remaining, 1)}"
            + (
                ""
                if r.budget_remaining_minutes is None
                else f" = {r.budget_remaining_minutes:.1f} min"
            )
            + (
                ""
                if r.coverage >= 1
                else f"  (records cover {r.coverage * 100:.0f}% of the period)"
            )
        )
        burn = ", ".join(f"{w} {'n/a' if b is None else f'{b:.2f}x'}" for w, b in r.burn.items())
        lines.append(f"    burn rate now: {burn}")
        lines.append(f"    firing now: {', '.join(r.firing) if r.firing else 'nothing'}")
    return "\n".join(lines) + "\n"


def report_json(reports: Sequence[SLOReport]) -> list[dict[str, Any]]:
    return [dict(asdict(r), firing=list(r.firing), burn=dict(r.burn)) for r in reports]


def backtest_json(backtests: Sequence[Backtest]) -> list[dict[str, Any]]:
    out = []
    for bt in backtests:
        tl = bt.timeline
        out.append(
            {
                "slo": bt.slo.name,
                "evaluations": int(tl.times.size),
                "step_s": tl.step_s,
                "from_s": float(tl.times[0]),
                "to_s": float(tl.times[-1]),
                "alerts": [
                    {
                        "alert": t.alert,
                        "severity": t.severity,
                        "firing_evaluations": int(np.count_nonzero(t.firing)),
                    }
                    for t in bt.tracks
                ],
                "intervals": [
                    {**asdict(i), "duration_s": i.duration_s, "peak_burn": _num(i.peak_burn)}
                    for i in bt.intervals
                ],
            }
        )
    return out


def _dur(x: float | None) -> str:
    if x is None:
        return "-"
    return format_duration(round(x)) if x >= 1 else f"{x:.0f}s"


def _when(t: float) -> str:
    """Unix times as UTC ISO 8601; small clocks (tests, engines' own clocks) as seconds."""
    if t >= 1e8:
        return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{t:.0f}s"


def backtest_text(spec: SLOSpec, backtests: Sequence[Backtest]) -> str:
    lines = [f"service {spec.service}"]
    for bt in backtests:
        tl = bt.timeline
        span = _dur(float(tl.times[-1] - tl.times[0]))
        lines.append(
            f"  {bt.slo.name}: {len(bt.intervals)} firing interval(s) over {span} "
            f"({tl.times.size} evaluations every {format_duration(tl.step_s)})"
        )
        for i in bt.intervals:
            lines.append(
                f"    {i.alert:<28} {i.severity:<6} from {_when(i.start_s)} "
                f"to {'(still firing)' if i.end_s is None else _when(i.end_s)}  "
                f"for {_dur(i.duration_s)}  delay {_dur(i.detection_delay_s)} "
                f"(window {_dur(i.window_delay_s)})  "
                f"reset {_dur(i.reset_s)}  peak {i.peak_burn:.1f}x"
            )
    return "\n".join(lines) + "\n"
