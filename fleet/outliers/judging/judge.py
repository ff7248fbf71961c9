"""One judgement pass: score a table's replicas against each other, flagged cells -> findings.

Each flagged cell becomes a ``Finding`` with its cause and evidence. The pass tests its signals at
``alpha / (k · passes)`` each (see ``stats``): k signals with at least three values, not all
equal, and ``passes`` the number of passes that share the family-wise level. Where the table has
per-request samples, the signals with samples are tested request by request instead
(``ranks``, ``score``), and a share of counted requests (the error rate) by its counts
(``shares``, Fisher's exact test). Where a signal's values are quantiles read from histograms, a
replica inside the bucket that holds the fleet median is not told apart from it
(``histogram.resolvable``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.fleet.outliers.config import DetectorConfig
from fleetwatch.fleet.outliers.judging.causes import Cause, ReplicaContext, Side, classify
from fleetwatch.fleet.outliers.judging.context import (
    config_drift,
    host_context,
    matched_context,
    workload_context,
)
from fleetwatch.fleet.outliers.report import Finding, Pass, finite_or_none
from fleetwatch.fleet.outliers.signals import SignalSpec
from fleetwatch.fleet.outliers.sources.histogram import median_bucket, resolvable
from fleetwatch.fleet.outliers.stats.ranks import rank_p_values
from fleetwatch.fleet.outliers.stats.robust import (
    FLOOR_CUTOFF,
    RobustColumns,
    max_z_sf,
    signal_level,
)
from fleetwatch.fleet.outliers.stats.score import score_matrix
from fleetwatch.fleet.outliers.stats.shares import ShareCounts, share_counts
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = ["Judgement", "judge"]


def _fmt(v: float, unit: str) -> str:
    if not math.isfinite(v):
        return "n/a"
    if unit == "ratio":
        return f"{v:.3g}"
    if unit == "s":
        return f"{v * 1000:.4g} ms" if abs(v) < 1 else f"{v:.4g} s"
    return f"{v:.4g} {unit}".rstrip()


def _spread_line(
    rc: RobustColumns, i: int, j: int, spec: SignalSpec, x: np.ndarray[Any, Any]
) -> str:
    n = int(rc.n[j])
    floor = (
        f"{abs(rc.z_floor[i, j]):.3g} spread floors from the median (at least "
        f"{FLOOR_CUTOFF:g} needed; floor {_fmt(float(rc.floor[j]), spec.unit)}, the larger of "
        f"{spec.rel_floor:.0%} of the median and {_fmt(spec.abs_floor, spec.unit)})"
    )
    if rc.mad[j] == 0:
        at = int(np.sum(x == rc.median[j]))
        return f"MAD = 0 ({at} of {n} replicas at the median), so the floor decides: {floor}"
    return f"spread {_fmt(float(rc.scale_mad[j]), spec.unit)} (1.4826·b(n)·MAD, n={n}); {floor}"


def _test_line(
    rc: RobustColumns,
    oz: float,
    i: int,
    j: int,
    spec: SignalSpec,
    count: float,
    p: float,
    share: ShareCounts | None = None,
) -> str:
    n = int(rc.n[j])
    two = spec.worse == "both"
    beyond = oz > rc.cutoff[j]
    line = (
        f"robust z {oz:.1f} {'beyond' if beyond else 'within'} {rc.cutoff[j]:.3g}, the cutoff for "
        f"the largest {'|z|' if two else 'z'} of {n} healthy replicas"
        + (f" (p = {p:.2g} as the largest)" if beyond and math.isfinite(p) and p > 0 else "")
    )
    if rc.rank_p is None or rc.rank_level is None or math.isnan(rc.rank_p[i, j]):
        return line
    rp, rl = float(rc.rank_p[i, j]), float(rc.rank_level[j])
    if share is not None:
        return (
            f"its {share.k[i]:.0f} of {share.n[i]:.0f} requests against the rest's "
            f"{share.rest_k[i]:.0f} of {share.rest_n[i]:.0f} ({share.test}, one-sided): "
            f"p = {rp:.2g}, {'below' if rp <= rl else 'above'} the level {rl:.2g} per replica "
            "(for reference, " + line + ")"
        )
    return (
        f"its {count:.0f} requests against the rest of the fleet's (Mann–Whitney, "
        f"{'two-sided' if two else 'one-sided'}): p = {rp:.2g}, "
        f"{'below' if rp <= rl else 'above'} the level {rl:.2g} per replica (for reference, "
        + line
        + ")"
    )


def _requests(samples: pd.DataFrame | None, replica: str, signal: str) -> float:
    """The replica's requests with a ``signal`` sample, for the evidence (written when read): a
    histogram source stacks each signal's requests in rows of their own."""
    if samples is None or signal not in samples.columns:
        return math.nan
    mine = samples["replica"].astype(str).to_numpy() == replica
    values = samples[signal].to_numpy(dtype=np.float64)[mine]
    if "weight" in samples.columns:
        weights = samples["weight"].to_numpy(dtype=np.float64)[mine]
        return float(weights[~np.isnan(values)].sum())
    return float(np.count_nonzero(~np.isnan(values)))


def _bucket_line(held: tuple[float, float] | None, spec: SignalSpec) -> tuple[str, ...]:
    if held is None:
        return ()
    lo, hi = held
    return (
        f"read from a histogram: outside the bucket ({_fmt(lo, spec.unit)}, "
        f"{_fmt(hi, spec.unit)}] that holds the fleet median, the finest difference it can show",
    )


@dataclass(frozen=True, slots=True)
class Judgement:
    """One judgement of part of the fleet: its findings and, for the first pass, the statistics."""

    findings: list[Finding]
    fleet: dict[str, dict[str, float | None]]
    rows: dict[str, int] = field(default_factory=dict)
    """The row in the judged table of each replica with a finding."""


def judge(
    table: FleetTable,
    cfg: DetectorConfig,
    found_in: Pass,
    how: str,
    passes: int = 1,
    whole: FleetTable | None = None,
) -> Judgement:
    """Judge every replica of ``table`` (all above the volume gate) against the others.

    ``how`` is the evidence line that says which replicas the finding was judged against;
    ``passes`` how many passes share the family-wise level (see ``detect``); ``whole`` the fleet
    before any replica was set aside, where host-mates are looked up (``table`` when None).
    """
    judged = table.replicas
    every = table.values.to_numpy(dtype=np.float64, na_value=np.nan)
    missing = np.isnan(every)
    complete = not missing.any()  # the common case: one comparison per cell below, no NaN paths
    present = np.full(every.shape[1], len(every) > 0)
    if len(every) and not complete:
        present = ~missing.all(axis=0)
    cols = [c for c, keep in zip(table.values.columns, present.tolist(), strict=True) if keep]
    x = every if present.all() else every[:, present]
    specs = [cfg.spec(c) for c in cols]
    # A signal with under three values, or the same value everywhere, cannot produce a finding.
    if complete:
        varied = (x != x[:1]).any(axis=0)
        tested = int(varied.sum()) if len(x) >= 3 else 0
    else:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            varied = np.nanmax(x, axis=0) > np.nanmin(x, axis=0) if x.size else np.zeros(0, bool)
        tested = int(((~np.isnan(x)).sum(axis=0) >= 3)[varied].sum())
    level = signal_level(cfg.alpha, tested, passes)
    signs = np.array([{"higher": 1.0, "lower": -1.0, "both": 0.0}[s.worse] for s in specs])
    rank_p = None
    if table.samples is not None and len(table.samples):
        rank_p = rank_p_values(table.samples, judged, cols, signs)
    shares: dict[str, ShareCounts] = {}
    for j, c in enumerate(cols):
        if c in table.counted and specs[j].worse == "higher":
            got = share_counts(x[:, j], table.volume_array().to_numpy(dtype=np.float64))
            if np.isfinite(got.p).any():
                shares[c] = got
                if rank_p is None:
                    rank_p = np.full(x.shape, np.nan)
                rank_p[:, j] = got.p
    se = None
    if table.stderr is not None and len(table.stderr.columns):
        se = table.stderr.reindex(index=judged, columns=pd.Index(cols)).to_numpy(
            dtype=np.float64, na_value=np.nan
        )
    rc, oz, flag = score_matrix(x, specs, level, se, rank_p, cfg.noise_shape)
    buckets: dict[str, tuple[float, float]] = {}
    for j, c in enumerate(cols):
        bounds = table.bins.get(c)
        if bounds and flag[:, j].any():
            flag[:, j] &= resolvable(x[:, j], float(rc.median[j]), bounds, specs[j].worse)
        held = median_bucket(float(rc.median[j]), bounds) if bounds else None
        if held is not None:
            buckets[c] = held

    fleet = {
        c: {
            "median": finite_or_none(float(rc.median[j])),
            "mad": finite_or_none(float(rc.mad[j])),
            "n": float(rc.n[j]),
            "cutoff": finite_or_none(float(rc.cutoff[j])),
            "level": level,
            **(
                {"rank_level": finite_or_none(float(rc.rank_level[j]))}
                if rc.rank_level is not None
                else {}
            ),
            **(
                {
                    "median_bucket_low": finite_or_none(buckets[c][0]),
                    "median_bucket_high": finite_or_none(buckets[c][1]),
                }
                if c in buckets
                else {}
            ),
        }
        for j, c in enumerate(cols)
    }
    rows, colidx = np.nonzero(flag)
    # Names looked up once: indexing an Arrow-backed index per cell costs microseconds each.
    row_names = [str(n) for n in judged[np.unique(rows)].tolist()] if len(rows) else []
    pos = dict(zip(row_names, np.unique(rows).tolist(), strict=True))
    flagged_replicas = set(row_names)
    drift = config_drift(table, judged)
    pos |= {r: int(judged.get_loc(r)) for r in drift if r not in pos}  # type: ignore[arg-type]
    flagged_replicas |= set(drift)

    # Context only for replicas that need it: like-for-like, workload, GPU.
    matched_ctx = matched_context(table, judged, cfg, flagged_replicas)
    workload = workload_context(table, judged, cfg, flagged_replicas, pos)
    gpu_cols = [j for j, s in enumerate(specs) if s.family == "gpu"]
    gpu_bad: dict[str, list[str]] = {}
    gpu_present: dict[str, bool] = {}
    for r in flagged_replicas:
        i = pos[r] if r in pos else int(judged.get_loc(r))  # type: ignore[arg-type]
        gpu_present[r] = any(not math.isnan(x[i, j]) for j in gpu_cols)
        for j in gpu_cols:
            if flag[i, j]:
                s = specs[j]
                gpu_bad.setdefault(r, []).append(
                    f"GPU {s.description or s.name}: {_fmt(float(x[i, j]), s.unit)} vs fleet "
                    f"{_fmt(float(rc.median[j]), s.unit)}"
                )

    # Slow on TPOT like-for-like: per prompt-length bucket, or raw where its traffic is like the
    # fleet's (TPOT includes the stalls of the replica's own prefills in a batched engine, so a
    # replica sent longer prompts has a higher raw TPOT on the same hardware).
    cells = list(zip(rows.tolist(), colidx.tolist(), strict=True))
    name = dict(zip(pos.values(), pos.keys(), strict=True))
    decode = [j for j, s in enumerate(specs) if s.family == "latency" and not s.prompt_sensitive]
    decode_slow = {
        name[i]
        for i, j in cells
        if j in decode
        and (
            matched_ctx.get((name[i], cols[j]), (None, ()))[0] is True
            or (
                matched_ctx.get((name[i], cols[j]), (None, ()))[0] is None
                and not workload.get(name[i], ((), (), False))[0]
            )
        )
    }
    host, busy = host_context(table, whole if whole is not None else table, rc, specs, cells)
    p_max: list[np.ndarray[Any, Any]] = []

    def evidence(i: int, j: int, r: str, why: tuple[str, ...]) -> tuple[str, ...]:
        if not p_max:  # each flagged cell's p-value as the largest z, one call per column
            p_max.append(np.full(x.shape, np.nan))
            for c in np.unique(colidx).tolist():
                at = rows[colidx == c]
                p_max[0][at, c] = max_z_sf(
                    oz[at, c], int(rc.n[c]), specs[c].worse == "both", cfg.noise_shape
                )
        spec = specs[j]
        lines = (
            f"{spec.description or spec.name}: {_fmt(float(x[i, j]), spec.unit)} vs fleet median "
            f"{_fmt(float(rc.median[j]), spec.unit)}"
            + (f" ({rc.ratio[i, j]:.2f}x)" if math.isfinite(rc.ratio[i, j]) else ""),
            _test_line(
                rc,
                float(oz[i, j]),
                i,
                j,
                spec,
                _requests(table.samples, r, cols[j]),
                float(p_max[0][i, j]),
                shares.get(cols[j]),
            )
            + (
                f"; {rc.z_own[i, j]:.3g} of its own standard errors from the median"
                if math.isfinite(rc.z_own[i, j])
                else ""
            ),
            _spread_line(rc, i, j, spec, x[:, j]),
            *_bucket_line(buckets.get(cols[j]), spec),
            *why,
            *busy.get((i, j), ()),
            how,
        )
        return tuple(dict.fromkeys(lines))

    findings: list[Finding] = []
    for i, j in cells:
        r = name[i]
        spec = specs[j]
        wl = workload.get(r, ((), (), False))
        ctx = ReplicaContext(
            matched_slow=matched_ctx.get((r, cols[j]), (None, ()))[0],
            matched_evidence=matched_ctx.get((r, cols[j]), (None, ()))[1],
            workload=wl[0],
            workload_evidence=wl[1],
            gpu_present=gpu_present.get(r, False),
            gpu_bad=tuple(gpu_bad.get(r, ())),
            drift=drift.get(r, ()),
            low_request_rate=wl[2],
            decode_slow=r in decode_slow,
            host=host.get((i, j), ()),
        )
        side, cause, why = classify(spec, ctx)
        findings.append(
            Finding(
                r,
                cols[j],
                float(x[i, j]),
                float(rc.median[j]),
                float(rc.ratio[i, j]),
                float(oz[i, j]),
                float(rc.cutoff[j]),
                side,
                cause,
                partial(evidence, i, j, r, why),
                found_in,
            )
        )
    for r, lines in drift.items():
        findings.append(
            Finding(
                r,
                "config",
                math.nan,
                math.nan,
                math.nan,
                math.nan,
                math.nan,
                Side.REPLICA,
                Cause.CONFIG_DRIFT,
                (*lines, how),
                found_in,
            )
        )
    return Judgement(findings, fleet, pos)
