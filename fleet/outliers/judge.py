"""One judgement pass: score a table's replicas against each other, flagged cells -> findings.

Each flagged cell becomes a ``Finding`` with its cause and evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleet.outliers.causes import Cause, ReplicaContext, Side, classify
from fleet.outliers.config import DetectorConfig
from fleet.outliers.context import config_drift, matched_context, workload_context
from fleet.outliers.report import Finding, Pass, finite_or_none
from fleet.outliers.score import score_cells
from fleet.outliers.signals import SignalSpec
from fleet.outliers.stats import RobustColumns
from fleet.outliers.table import FleetTable

__all__ = ["Judgement", "judge"]


def _fmt(v: float, unit: str) -> str:
    if not math.isfinite(v):
        return "n/a"
    if unit == "ratio":
        return f"{v:.3g}"
    if unit == "s":
        return f"{v * 1000:.4g} ms" if abs(v) < 1 else f"{v:.4g} s"
    return f"{v:.4g} {unit}".rstrip()


def _spread_line(rc: RobustColumns, j: int, spec: SignalSpec, x: np.ndarray[Any, Any]) -> str:
    n = int(rc.n[j])
    if rc.mad[j] == 0:
        at = int(np.sum(x == rc.median[j]))
        return (
            f"MAD = 0 ({at} of {n} replicas at the median): spread floor "
            f"{_fmt(float(rc.floor[j]), spec.unit)} used (max of {spec.rel_floor:.0%} of the "
            f"median and {_fmt(spec.abs_floor, spec.unit)})"
        )
    if rc.floored[j]:
        return (
            f"spread from MAD ({_fmt(float(rc.scale_mad[j]), spec.unit)}) below the floor "
            f"{_fmt(float(rc.floor[j]), spec.unit)}: floor used"
        )
    return f"spread {_fmt(float(rc.scale_mad[j]), spec.unit)} (1.4826·b(n)·MAD, n={n})"


@dataclass(frozen=True, slots=True)
class Judgement:
    """One judgement of part of the fleet: its findings and, for the first pass, the statistics."""

    findings: list[Finding]
    fleet: dict[str, dict[str, float | None]]


def judge(table: FleetTable, cfg: DetectorConfig, found_in: Pass, how: str) -> Judgement:
    """Judge every replica of ``table`` (all above the volume gate) against the others.

    ``how`` is the evidence line that says which replicas the finding was judged against.
    """
    judged = table.replicas
    cols = [c for c in table.values.columns if table.values[c].notna().any()]
    values = table.values.loc[:, cols].astype("float64")
    specs = [cfg.spec(c) for c in cols]
    rc, oz, flag = score_cells(values, table.stderr, specs, cfg.alpha)
    x = values.to_numpy(dtype=np.float64, na_value=np.nan)

    fleet = {
        c: {
            "median": finite_or_none(float(rc.median[j])),
            "mad": finite_or_none(float(rc.mad[j])),
            "n": float(rc.n[j]),
            "cutoff": finite_or_none(float(rc.cutoff[j])),
        }
        for j, c in enumerate(cols)
    }
    rows, colidx = np.nonzero(flag)
    flagged_replicas = {str(judged[int(i)]) for i in rows}
    drift = config_drift(table, judged)
    flagged_replicas |= set(drift)

    # Context only for replicas that need it: like-for-like, workload, GPU.
    matched_ctx = matched_context(table, judged, cfg, flagged_replicas)
    workload = workload_context(table, judged, cfg, flagged_replicas)
    gpu_cols = [j for j, s in enumerate(specs) if s.family == "gpu"]
    gpu_bad: dict[str, list[str]] = {}
    gpu_present: dict[str, bool] = {}
    for r in flagged_replicas:
        i = int(judged.get_loc(r))  # type: ignore[arg-type]
        gpu_present[r] = any(not math.isnan(x[i, j]) for j in gpu_cols)
        for j in gpu_cols:
            if flag[i, j]:
                s = specs[j]
                gpu_bad.setdefault(r, []).append(
                    f"GPU {s.description or s.name}: {_fmt(float(x[i, j]), s.unit)} vs fleet "
                    f"{_fmt(float(rc.median[j]), s.unit)}"
                )

    decode_slow = {
        str(judged[int(i)])
        for i, j in zip(rows.tolist(), colidx.tolist(), strict=True)
        if specs[j].family == "latency"
        and not specs[j].prompt_sensitive
        and matched_ctx.get((str(judged[int(i)]), cols[j]), (None, ()))[0] is not False
    }
    findings: list[Finding] = []
    for i, j in zip(rows.tolist(), colidx.tolist(), strict=True):
        r = str(judged[i])
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
        )
        side, cause, why = classify(spec, ctx)
        med = float(rc.median[j])
        evidence = (
            f"{spec.description or spec.name}: {_fmt(float(x[i, j]), spec.unit)} vs fleet median "
            f"{_fmt(med, spec.unit)}"
            + (f" ({rc.ratio[i, j]:.2f}x)" if math.isfinite(rc.ratio[i, j]) else ""),
            f"robust z {oz[i, j]:.1f} beyond the n-aware cutoff {rc.cutoff[j]:.2f} "
            f"(n={int(rc.n[j])})"
            + (
                f"; {rc.z_own[i, j]:.1f} of its own standard errors from the median"
                if math.isfinite(rc.z_own[i, j])
                else ""
            ),
            _spread_line(rc, j, spec, x[:, j]),
            *why,
            how,
        )
        findings.append(
            Finding(
                r,
                cols[j],
                float(x[i, j]),
                med,
                float(rc.ratio[i, j]),
                float(oz[i, j]),
                float(rc.cutoff[j]),
                side,
                cause,
                tuple(dict.fromkeys(evidence)),
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
    return Judgement(findings, fleet)
