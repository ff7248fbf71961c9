"""Burn rates and the alert backtest over 10 million request records, side by side with a plain
pandas implementation (resample to the evaluation step, then ``rolling`` sums per window).

Run with ``.venv/bin/python -m benchmarks slo``. Both sides take the same records frame (finish
times, statuses) for a 99.9% / 30-day availability SLO with the Workbook windows, evaluated every
30 s over 30 days (86,400 evaluations, 8 windows), and produce the firing state of the page and
ticket alerts; the run checks that both agree exactly. Timings are medians of interleaved runs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import pandas as pd

from slo.backtest import backtest_slo
from slo.burn import window_counts
from slo.events import sli_events
from slo.load import load_spec
from slo.spec import ServiceLevelObjective
from telemetry.records import STATUS_DTYPE

N = 10_000_000
DAYS = 30
STEP = 30
REPEATS = 3
FLOOR_S = 3.0

SPEC = f"""
service: bench
evaluation_interval: {STEP}s
slos: [{{name: availability, objective: 99.9, period: 30d, sli: {{kind: availability}}}}]
"""


def _records(rng: np.random.Generator) -> pd.DataFrame:
    start = 1_700_000_000.0
    span = DAYS * 86400.0
    finish = np.sort(rng.uniform(start, start + span, N))
    p = np.full(N, 0.0003)
    for day, hours, ratio in ((5, 0.5, 0.3), (12, 8, 0.004), (20, 0.2, 1.0)):
        t0 = start + day * 86400
        p[(finish >= t0) & (finish < t0 + hours * 3600)] = ratio
    status = np.where(rng.random(N) < p, "error", "ok")
    return pd.DataFrame(
        {
            "finished_s": finish,
            "status": pd.Categorical(status, dtype=STATUS_DTYPE),
            "traffic_class": "default",
            "model": "m",
        }
    )


def ours(slo: ServiceLevelObjective, frame: pd.DataFrame) -> dict[str, Any]:
    events = sli_events(slo, frame)
    tl = window_counts(events, slo.window_seconds(), STEP)
    bt = backtest_slo(slo, tl)
    return {t.severity: t.firing for t in bt.tracks} | {"intervals": len(bt.intervals)}


def pandas_rolling(slo: ServiceLevelObjective, frame: pd.DataFrame) -> dict[str, Any]:
    """The straightforward pandas version: per-step sums on a DatetimeIndex, rolling windows."""
    bad = (frame["status"] == "error").astype(np.int64)
    df = pd.DataFrame(
        {"bad": bad.to_numpy(), "total": 1},
        index=pd.to_datetime(frame["finished_s"].to_numpy(), unit="s"),
    )
    first = np.floor(frame["finished_s"].min() / STEP) * STEP
    last = np.ceil(frame["finished_s"].max() / STEP) * STEP
    grid = pd.date_range(
        pd.to_datetime(first, unit="s"), pd.to_datetime(last, unit="s"), freq=f"{STEP}s"
    )
    per_step = (
        df.resample(f"{STEP}s", closed="right", label="right").sum().reindex(grid, fill_value=0)
    )
    out: dict[str, Any] = {}
    for severity in ("page", "ticket"):
        firing = np.zeros(len(grid), dtype=bool)
        for w in (w for w in slo.windows if w.severity == severity):
            thr = slo.threshold(w)
            cond = np.ones(len(grid), dtype=bool)
            for win in (w.long_s, w.short_s):
                rolled = per_step.rolling(f"{win}s").sum()
                with np.errstate(invalid="ignore", divide="ignore"):
                    ratio = rolled["bad"].to_numpy() / rolled["total"].to_numpy()
                cond &= ratio > thr
            firing |= cond
        out[severity] = firing
    return out


def main() -> None:
    rng = np.random.default_rng(42)
    slo = load_spec(SPEC).slos[0]
    t0 = time.perf_counter()
    frame = _records(rng)
    print(f"{N:,} records over {DAYS} days built in {time.perf_counter() - t0:.1f} s")
    times: dict[str, list[float]] = {"fleetwatch": [], "pandas rolling": []}
    results: dict[str, dict[str, Any]] = {}
    for _ in range(REPEATS):
        for name, fn in (("fleetwatch", ours), ("pandas rolling", pandas_rolling)):
            start = time.perf_counter()
            results[name] = fn(slo, frame)
            times[name].append(time.perf_counter() - start)
    for severity in ("page", "ticket"):
        a, b = results["fleetwatch"][severity], results["pandas rolling"][severity]
        assert a.shape == b.shape and (a == b).all(), f"{severity} firing differs"
    ours_s = statistics.median(times["fleetwatch"])
    base_s = statistics.median(times["pandas rolling"])
    print(
        f"firing intervals found: {results['fleetwatch']['intervals']} (identical firing on both sides)"
    )
    print()
    print("| implementation | median s (10M records) | records/s | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| fleetwatch slo (bin + cumsum) | {ours_s:.2f} | {N / ours_s:,.0f} | 1.00x |")
    print(
        f"| pandas resample + rolling | {base_s:.2f} | {N / base_s:,.0f} | {base_s / ours_s:.2f}x slower |"
    )
    print()
    print(f"floor: {FLOOR_S:.0f} s for 10M records: {'met' if ours_s <= FLOOR_S else 'NOT met'}")


if __name__ == "__main__":
    main()
