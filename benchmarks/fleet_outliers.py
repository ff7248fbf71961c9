"""Outlier detection benchmarks over 10,000 replicas × 10 signals (``bench_fleet`` prints them):
the bare table with 3 planted slow replicas, and the goal's case with standard errors, workload
columns and 100 planted. Each asserts that fleetwatch flags the same (replica, signal) cells as the
bare numpy robust z held to fleetwatch's own cutoff, and times both side by side (medians of
interleaved repeats, CPU beside wall).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from fleetwatch.fleet.outliers import DetectorConfig, FleetTable, OutlierReport, detect

SIGNALS = [
    "ttft",
    "tpot",
    "e2e",
    "error_rate",
    "throughput",
    "sm_clock_ratio",
    "clock_event_active",
    "dram_bw_ratio",
    "power_w",
    "itl",
]


def _wide_table(n: int, bad: list[int], seed: int = 0) -> FleetTable:
    rng = np.random.default_rng(seed)
    base = {
        "ttft": 0.2,
        "tpot": 0.02,
        "e2e": 3.0,
        "error_rate": 0.001,
        "throughput": 500.0,
        "sm_clock_ratio": 0.97,
        "clock_event_active": 0.0,
        "dram_bw_ratio": 0.6,
        "power_w": 550.0,
        "itl": 0.02,
    }
    cols = {}
    for s in SIGNALS:
        v = base[s] * rng.lognormal(0, 0.03, n) if base[s] else np.zeros(n)
        cols[s] = v
    for i in bad:
        cols["ttft"][i] *= 2.0
        cols["tpot"][i] *= 2.0
        cols["sm_clock_ratio"][i] = 0.6
    idx = pd.Index([f"r{i}" for i in range(n)])
    return FleetTable(
        values=pd.DataFrame(cols, index=idx),
        volume=pd.Series(np.full(n, 1000.0), index=idx),
        source="bench",
    )


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    return _interleaved({"x": fn}, repeats)["x"]


def _interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall seconds per function, run round-robin; ``<name>_cpu``: median CPU seconds
    (less sensitive to other tenants of a shared machine)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            fn()
            times[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    out = {k: statistics.median(v) for k, v in times.items()}
    out |= {f"{k}_cpu": statistics.median(v) for k, v in cpu.items()}
    return out


def _context_table(n: int, planted: int, seed: int = 0) -> tuple[FleetTable, list[int]]:
    """``_wide_table`` with ``planted`` slow replicas, a standard error per cell and the four
    workload columns (like traffic everywhere, so the peers pass does not run; the unmasked pass
    does, with the planted replicas set aside)."""
    rng = np.random.default_rng(seed + 1)
    bad = sorted(rng.choice(n, planted, replace=False).tolist())
    t = _wide_table(n, bad, seed)
    idx = t.values.index
    stderr = pd.DataFrame({s: np.abs(t.values[s].to_numpy()) * 0.005 for s in SIGNALS}, index=idx)
    workload = pd.DataFrame(
        {
            "mean_prompt_tokens": 500 * rng.lognormal(0, 0.05, n),
            "cache_hit_rate": np.clip(0.3 + rng.normal(0, 0.02, n), 0, 1),
            "request_rate": 5 * rng.lognormal(0, 0.05, n),
            "mean_output_tokens": 200 * rng.lognormal(0, 0.05, n),
        },
        index=idx,
    )
    return replace(t, stderr=stderr, workload=workload), bad


def _bare_z(x: np.ndarray) -> np.ndarray:
    """The baseline: numpy robust z per column (median and MAD only, no gates or findings)."""
    med = np.median(x, axis=0)
    mad = np.median(np.abs(x - med), axis=0)
    return 0.6745 * (x - med) / np.where(mad > 0, mad, np.nan)


def _same_cells(table: FleetTable, report: OutlierReport, z: np.ndarray) -> set[tuple[str, str]]:
    """Asserts that the baseline, held to fleetwatch's own cutoff per signal (oriented: higher is
    worse except where lower is), flags the same (replica, signal) cells as fleetwatch's
    findings; returns them."""
    cfg = DetectorConfig()
    names = table.values.index.tolist()
    bare = set()
    for j, c in enumerate(table.values.columns):
        worse = cfg.spec(c).worse
        oz = np.abs(z[:, j]) if worse == "both" else (-1 if worse == "lower" else 1) * z[:, j]
        cut = report.fleet[c]["cutoff"]
        if cut is not None:
            bare |= {(names[i], c) for i in np.nonzero(oz > cut)[0].tolist()}
    ours = {(f.replica, f.signal) for f in report.findings}
    assert ours == bare, (sorted(ours - bare)[:5], sorted(bare - ours)[:5])
    return ours


def bench_outliers() -> list[str]:
    bad = [17, 4242, 9001]
    table = _wide_table(10_000, bad)
    x = table.values.to_numpy()

    def envoy() -> np.ndarray:
        return x < x.mean(axis=0) - 1.9 * x.std(axis=0)

    report = detect(table)
    found = sorted({int(f.replica[1:]) for f in report.findings})
    _same_cells(table, report, _bare_z(x))
    t = _interleaved(
        {"detect": lambda: detect(table), "bare": lambda: _bare_z(x), "envoy": envoy}, 15
    )
    # Masking: 2 bad of 5 on error rate, the case from Envoy's docs.
    five = FleetTable(
        values=pd.DataFrame({"error_rate": [0.5, 0.5, 0, 0, 0]}, index=[f"h{i}" for i in range(5)]),
        volume=pd.Series([1000.0] * 5, index=[f"h{i}" for i in range(5)]),
    )
    ours5 = len(detect(five).findings)
    sr = np.array([50.0, 50, 100, 100, 100])
    envoy5 = int((sr < sr.mean() - 1.9 * sr.std()).sum())
    return [
        "| outliers, 10,000 replicas × 10 signals | "
        f"{t['detect'] * 1000:.1f} ms (CPU {t['detect_cpu'] * 1000:.1f} ms) | bare robust z {t['bare'] * 1000:.1f} ms "
        f"({t['detect'] / t['bare']:.1f}x) · Envoy mean−1.9σ {t['envoy'] * 1000:.1f} ms | "
        f"floor 100 ms; planted 3 bad, found {found}; same cells as the bare z at our cutoff |",
        *bench_outliers_context(),
        f"| masking: 2 bad of 5 (success 50,50,100,100,100) | ours finds {ours5} | "
        f"Envoy mean−1.9σ finds {envoy5} | |",
    ]


OUTLIERS_GOAL_CPU = 0.020
"""Detection of 10,000 replicas × 10 signals with standard errors, workload columns and 100
planted outliers, in CPU seconds."""


def bench_outliers_context() -> list[str]:
    """The goal's case: stderr and workload columns, 100 planted outliers (two passes run: the
    fleet, then the fleet with the planted replicas set aside). ``detect`` decides every finding
    (side, cause, rank); the evidence text is written when read, so the report rendered to a
    dict (every evidence line) is timed beside it."""
    table, bad = _context_table(10_000, 100)
    x = table.values.to_numpy()
    report = detect(table)
    cells = _same_cells(table, report, _bare_z(x))
    found = {int(r[1:]) for r, _ in cells}
    assert found == set(bad), sorted(found ^ set(bad))
    t = _interleaved(
        {
            "detect": lambda: detect(table),
            "bare": lambda: _bare_z(x),
            "full": lambda: detect(table).to_dict(),
        },
        15,
    )
    cpu, bare = t["detect_cpu"], t["bare_cpu"]
    short = cpu - OUTLIERS_GOAL_CPU
    goal = (
        f"goal ≤ {OUTLIERS_GOAL_CPU * 1000:.0f} ms CPU: met"
        if short <= 0
        else f"goal ≤ {OUTLIERS_GOAL_CPU * 1000:.0f} ms CPU: {short * 1000:.1f} ms short "
        f"({cpu / OUTLIERS_GOAL_CPU:.2f}x): two passes each take a median and a MAD over all "
        f"10,000 × 10 cells (the bare z's whole cost, {bare * 1000:.1f} ms, twice), and the "
        f"{len(report.findings)} findings are still built one Python object each"
    )
    return [
        f"| outliers, 10,000 × 10 with stderr and workload columns, 100 planted | CPU "
        f"{cpu * 1000:.1f} ms (wall {t['detect'] * 1000:.1f} ms); with every evidence line "
        f"written (report to dict) CPU {t['full_cpu'] * 1000:.1f} ms | bare robust z CPU "
        f"{bare * 1000:.1f} ms ({cpu / bare:.1f}x) | {goal}; found the 100 planted, "
        f"{len(cells)} cells, the same cells as the bare z at our cutoff |"
    ]
