"""Context for a flagged replica beyond its numbers: workload skew, config drift, like-for-like,
its host.

How its workload differs from the fleet's, which configuration it runs that the majority does
not, its like-for-like latency per prompt-length bucket, and whether its host is contended.

Each is computed only for the replicas that need it (``wanted``), so a healthy fleet pays nothing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd

from fleetwatch.fleet.outliers.config import DetectorConfig
from fleetwatch.fleet.outliers.judging.causes import CPU_WAIT, HOST_SHARE, Cause
from fleetwatch.fleet.outliers.signals import SignalSpec
from fleetwatch.fleet.outliers.stats.robust import RobustColumns, signal_level
from fleetwatch.fleet.outliers.stats.score import effect_mask, score_cells
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = ["config_drift", "host_context", "matched_context", "workload_context"]


def workload_context(
    table: FleetTable,
    judged: pd.Index,
    cfg: DetectorConfig,
    wanted: set[str],
    at: Mapping[str, int] | None = None,
) -> dict[str, tuple[tuple[tuple[Cause, str], ...], tuple[str, ...], bool]]:
    """How each replica in ``wanted`` differs in workload from the judged fleet. ``at``: the row
    of each wanted replica in ``judged`` where the caller knows it (it is looked up otherwise)."""
    out: dict[str, tuple[tuple[tuple[Cause, str], ...], tuple[str, ...], bool]] = {}
    if not wanted:
        return out
    wl = table.aligned(table.workload)
    if judged is not table.replicas:
        wl, at = wl.loc[judged], None
    cols = [str(c) for c in wl.columns]
    # The judged fleet's medians and the wanted rows, read from one float array.
    arr = wl.to_numpy(dtype=np.float64, na_value=np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        meds = dict(zip(cols, np.nanmedian(arr, axis=0).tolist(), strict=True)) if cols else {}
    names = sorted(wanted)
    if at is None or any(r not in at for r in names):
        pos = wl.index.get_indexer(pd.Index(names)).tolist()
    else:
        pos = [at[r] for r in names]
    rows: dict[str, dict[str, float]] = {
        r: dict(zip(cols, arr[i].tolist(), strict=True))
        for r, i in zip(names, pos, strict=True)
        if i >= 0
    }
    for r in sorted(wanted):
        reasons: list[tuple[float, Cause, str]] = []
        lines: list[str] = []
        low_rate = False
        row = rows.get(r, {})
        if "mean_prompt_tokens" in row and math.isfinite(row["mean_prompt_tokens"]):
            v, m = float(row["mean_prompt_tokens"]), float(meds["mean_prompt_tokens"])
            q = v / m if m > 0 else math.nan
            line = f"prompt length: mean {v:.0f} tokens vs fleet {m:.0f} ({q:.2f}x)"
            lines.append(line)
            if math.isfinite(q) and (q >= cfg.prompt_ratio or q <= 1 / cfg.prompt_ratio):
                reasons.append((abs(math.log(q)), Cause.PROMPT_LENGTH_MIX, line))
        if "cache_hit_rate" in row and math.isfinite(row["cache_hit_rate"]):
            v, m = float(row["cache_hit_rate"]), float(meds["cache_hit_rate"])
            line = f"prefix-cache hit rate {v:.2f} vs fleet {m:.2f}"
            lines.append(line)
            if abs(v - m) >= cfg.cache_hit_delta:
                reasons.append((abs(v - m) * 2, Cause.PREFIX_CACHE_SKEW, line))
        if "request_rate" in row and math.isfinite(row["request_rate"]):
            v, m = float(row["request_rate"]), float(meds["request_rate"])
            q = v / m if m > 0 else math.nan
            line = f"request rate {v:.3g}/s vs fleet {m:.3g}/s ({q:.2f}x)"
            lines.append(line)
            if math.isfinite(q) and q >= cfg.request_rate_ratio:
                reasons.append((abs(math.log(q)), Cause.LOAD_SKEW, line))
            low_rate = math.isfinite(q) and q <= 1 / 1.2
            if "mean_output_tokens" in row and math.isfinite(row["mean_output_tokens"]):
                o, mo = float(row["mean_output_tokens"]), float(meds["mean_output_tokens"])
                offered = q * o / mo if mo > 0 else math.nan
                lines.append(
                    f"offered output tokens (request rate × mean output length): {offered:.2f}x "
                    "the fleet's"
                )
                low_rate = low_rate or (math.isfinite(offered) and offered <= 1 / 1.15)
        reasons.sort(key=lambda t: -t[0])
        out[str(r)] = (tuple((c, s) for _, c, s in reasons), tuple(lines), low_rate)
    return out


def config_drift(table: FleetTable, judged: pd.Index) -> dict[str, tuple[str, ...]]:
    """Per replica, a line for each fingerprint value that differs from the judged majority's."""
    out: dict[str, list[str]] = {}
    if table.fingerprint is None or not len(table.fingerprint.columns):
        return {}
    fp = table.aligned(table.fingerprint)
    if judged is not table.replicas:
        fp = fp.loc[judged]
    for col in fp.columns:
        vals = fp[col].dropna().astype(str)
        if vals.empty:
            continue
        counts = vals.value_counts()
        majority, share = str(counts.index[0]), counts.iloc[0] / len(vals)
        if share <= 0.5:
            continue
        for r, v in vals[vals != majority].items():
            out.setdefault(str(r), []).append(
                f"config drift: {col} = {v!r} where {counts.iloc[0]} of {len(vals)} replicas "
                f"run {majority!r}"
            )
    return {r: tuple(v) for r, v in out.items()}


def matched_context(
    table: FleetTable, judged: pd.Index, cfg: DetectorConfig, wanted: set[str]
) -> dict[tuple[str, str], tuple[bool | None, tuple[str, ...]]]:
    """Like-for-like verdict per (replica, latency signal) for the replicas in ``wanted``."""
    if table.matched is None or not wanted:
        return {}
    m = table.matched.reindex(judged)
    cols = [c for c in m.columns if m[c].notna().any()]
    if not cols:
        return {}
    specs = [cfg.spec(c) for c in cols]
    level = signal_level(cfg.alpha, len(cols))
    rc, oz, _ = score_cells(
        m[cols].astype("float64"), None, specs, level, noise_shape=cfg.noise_shape
    )
    x = m[cols].to_numpy(dtype=np.float64, na_value=np.nan)
    out: dict[tuple[str, str], tuple[bool | None, tuple[str, ...]]] = {}
    for r in wanted:
        if r not in m.index:
            continue
        i = m.index.get_loc(r)
        for j, c in enumerate(cols):
            if math.isnan(x[i, j]):
                out[(r, c)] = (
                    None,
                    (
                        f"like-for-like {c}: not comparable (too few requests in prompt-length "
                        "buckets its peers also served)",
                    ),
                )
                continue
            rel = x[i, j] / rc.median[j] if rc.median[j] > 0 else math.nan
            # Slow when large and beyond the cutoff, normal when small; large but within the
            # fleet's spread decides nothing.
            big = bool(rel >= cfg.matched_effect)
            slow = big and bool(oz[i, j] > rc.cutoff[j])
            out[(r, c)] = (
                slow if slow or not big else None,
                (
                    f"like-for-like {c} (per prompt-length bucket, weighted by its requests): "
                    f"{x[i, j]:.2f}x the fleet's bucket medians (fleet median of this ratio "
                    f"{rc.median[j]:.2f}, robust z {oz[i, j]:.1f}"
                    + (
                        f" within the cutoff {rc.cutoff[j]:.3g}: not conclusive)"
                        if big and not slow
                        else ")"
                    ),
                ),
            )
    return out


def host_context(
    table: FleetTable,
    whole: FleetTable,
    rc: RobustColumns,
    specs: list[SignalSpec],
    cells: list[tuple[int, int]],
) -> tuple[dict[tuple[int, int], tuple[str, ...]], dict[tuple[int, int], tuple[str, ...]]]:
    """Evidence of host contention for flagged ``cells`` (row, column) of latency and
    throughput signals in ``table``: every replica on the host slow together, or its process
    CPU-starved beyond its peers by enough to explain the deviation (``_wait_line``).
    Host-mates are looked up in ``whole`` (the fleet before any replica was set aside) and
    compared with this judgement's medians. Returns (host evidence, notes): notes say the host
    was busy where that does not explain the finding."""
    out: dict[tuple[int, int], tuple[str, ...]] = {}
    notes: dict[tuple[int, int], tuple[str, ...]] = {}
    perf = [(i, j) for i, j in cells if specs[j].family in ("latency", "throughput")]
    if not perf:
        return out, notes
    judged = table.replicas
    at = sorted({i for i, _ in perf})
    names = dict(zip(at, map(str, judged[at].tolist()), strict=True))
    wait = whole.cpu_wait if whole.cpu_wait is not None else table.cpu_wait
    waits = {} if wait is None else {str(k): float(v) for k, v in wait.dropna().items()}
    host = whole.host if whole.host is not None else table.host
    hosts = {} if host is None else host.dropna().astype(str).to_dict()
    for i, j in perf:
        r, spec = names[i], specs[j]
        lines = []
        if waits.get(r, 0.0) >= CPU_WAIT:
            line, explains = _wait_line(r, waits, judged, float(rc.ratio[i, j]), spec)
            if explains:
                lines.append(line)
            else:
                notes[(i, j)] = (line,)
        h = hosts.get(r)
        if h is not None and spec.name in whole.values.columns and r in whole.values.index:
            mates = [m for m, hm in hosts.items() if hm == h and m in whole.values.index]
            v = whole.values.loc[mates, spec.name].astype("float64").dropna()
            med = rc.median[j : j + 1]
            worse = effect_mask(v.to_numpy()[:, None], med, [spec])[:, 0]
            own = np.sign(v.to_numpy()[v.index == r] - med[0])
            worse &= np.sign(v.to_numpy() - med[0]) == own
            if len(v) >= 2 and worse.sum() >= HOST_SHARE * len(v):
                ratios = ", ".join(f"{m} {x / med[0]:.2f}x" for m, x in v.items())
                lines.append(
                    f"host {h}: {int(worse.sum())} of its {len(v)} replicas are off the fleet "
                    f"on {spec.name} together ({ratios}): host contention"
                )
        if lines:
            out[(i, j)] = tuple(lines)
    return out, notes


def _wait_line(
    r: str, waits: dict[str, float], judged: pd.Index, ratio: float, spec: SignalSpec
) -> tuple[str, bool]:
    """Whether the replica's own CPU wait explains how far it is off the fleet: a process that
    waits a share w of the time runs ``1 / (1 − w)`` slower than with the CPU to itself, so
    against peers that waited ``w_med`` it is ``(1 − w_med) / (1 − w)`` slower from waiting
    alone. What is left beyond that must still reach the signal's effect size to be its own."""
    w = waits[r]
    peers = [waits[str(m)] for m in judged if str(m) in waits]
    w_med = float(np.median(peers)) if peers else 0.0
    explained = (1.0 - w_med) / max(1.0 - w, 1e-9)
    off = ratio if spec.worse != "lower" else (1.0 / ratio if ratio > 0 else math.inf)
    left = off / explained if math.isfinite(off) else math.inf
    head = (
        f"its process waited for a CPU {w:.0%} of the time (fleet median {w_med:.0%}; starved "
        f"from {CPU_WAIT:.0%}): waiting explains {explained:.2f}x of its {off:.2f}x"
    )
    if left < spec.min_effect:
        return f"{head}, which explains it: the host is short of CPU", True
    return (
        f"{head}; the {left:.2f}x left is its own (at least {spec.min_effect:g}x): the host is "
        "busy, but that is not why this replica stands out",
        False,
    )
