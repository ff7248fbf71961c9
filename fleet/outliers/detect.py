"""Find replicas that stand out from their fleet, and say whether the replica or its traffic is
to blame.

Identical replicas serving identical traffic should produce identical numbers, so the fleet median
is the reference. A cell (replica, signal) is a finding when both gates pass: the robust z-score is
beyond the n-aware cutoff and the effect is at least the signal's ``min_effect`` (see ``signals``).
Replicas below ``min_requests`` are listed as insufficient and neither judged nor counted in the
fleet median. The statistics are vectorised over the whole table; only flagged cells become
``Finding`` objects, so a healthy fleet of 10,000 replicas costs a few matrix operations.

Masking. In a small fleet two replicas that stand out on the same signal hide each other: with four
replicas, a slowed one and one sent only long prompts (both high on TTFT) pull the median up and
inflate the MAD, so neither passes the cutoff. The detector therefore judges in passes, each over
the same table filtered to fewer replicas (so it works for every source), never below
``min_fleet`` replicas:

1. ``fleet``: every judged replica against the whole fleet.
2. ``peers``: only the replicas whose traffic is like the fleet's (``traffic.different_traffic``:
   prompt length, prefix-cache hit rate, request rate), so a replica sent different traffic cannot
   hide a slow one.
3. ``unmasked``: the replicas blamed replica-side so far set aside and the rest judged against each
   other (what an operator does after draining the bad replica); repeated while it blames someone
   new, at most ``_MAX_UNMASK_ROUNDS`` times.

Findings are merged: one per (replica, signal), the earliest pass's, and a replica blamed
replica-side in any pass keeps only its replica-side findings. Each finding's evidence ends with
the pass that found it, and ``Finding.found_in`` names it. The fleet statistics in the report are
the first pass's. A pass only runs when it has someone to set aside, so a healthy fleet of
like traffic is judged once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from fleet.errors import AnalysisError
from fleet.outliers.causes import Cause, ReplicaContext, Side, classify
from fleet.outliers.signals import SignalSpec, signal_spec
from fleet.outliers.stats import OWN_CUTOFF, RobustColumns, robust_columns
from fleet.outliers.table import FleetTable
from fleet.outliers.traffic import different_traffic

__all__ = ["DetectorConfig", "Finding", "OutlierReport", "Pass", "detect"]

Verdict = Literal["outliers", "no outlier", "insufficient data"]
Pass = Literal["fleet", "peers", "unmasked"]
"""Which judgement found a finding: the whole fleet, peers with like traffic, or the fleet with
the replicas blamed so far set aside."""

_MAX_UNMASK_ROUNDS = 3
"""Re-judgements with blamed replicas set aside; each sets aside at least one more replica."""


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Detector settings.

    ``min_requests``: requests a replica needs in the window to be judged. ``alpha``: family-wise
    false-positive level per signal for the n-aware cutoff. ``min_fleet``: replicas needed for a
    verdict (3: a median of two cannot outvote either). The workload thresholds decide when a
    replica's traffic differs from the fleet's (ratios to the fleet median of replica means).
    """

    min_requests: int = 50
    alpha: float = 0.01
    min_fleet: int = 3
    signals: Mapping[str, SignalSpec] = field(default_factory=dict)
    prompt_ratio: float = 1.25
    cache_hit_delta: float = 0.10
    request_rate_ratio: float = 1.5
    matched_effect: float = 1.2

    def spec(self, name: str) -> SignalSpec:
        return self.signals.get(name) or signal_spec(name)


def _num(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


@dataclass(frozen=True, slots=True)
class Finding:
    """One replica standing out on one signal (``signal="config"`` for fingerprint drift).

    ``found_in``: the pass that found it (see the module docstring); ``value``, ``fleet_median``,
    ``robust_z`` and ``cutoff`` are that pass's.
    """

    replica: str
    signal: str
    value: float
    fleet_median: float
    ratio: float
    robust_z: float
    cutoff: float
    side: Side
    cause: Cause
    evidence: tuple[str, ...]
    found_in: Pass = "fleet"

    def to_dict(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "signal": self.signal,
            "value": _num(self.value),
            "fleet_median": _num(self.fleet_median),
            "ratio": _num(self.ratio),
            "robust_z": _num(self.robust_z),
            "cutoff": _num(self.cutoff),
            "side": self.side.value,
            "cause": self.cause.value,
            "evidence": list(self.evidence),
            "found_in": self.found_in,
        }


@dataclass(frozen=True, slots=True)
class OutlierReport:
    """Ranked findings (replica-side first, then by effect size), or a verdict of no outlier."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    judged: tuple[str, ...]
    insufficient: tuple[tuple[str, float], ...]
    fleet: Mapping[str, Mapping[str, float | None]]
    min_requests: int
    source: str
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "source": self.source,
            "min_requests": self.min_requests,
            "judged": list(self.judged),
            "insufficient": [{"replica": r, "requests": _num(v)} for r, v in self.insufficient],
            "fleet": {k: dict(v) for k, v in self.fleet.items()},
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
        }

    def render(self) -> str:
        """Plain-text report for a terminal."""
        lines = [
            f"fleet outliers ({self.source}): {len(self.judged)} replicas judged, "
            f"verdict: {self.verdict}"
        ]
        for r, v in self.insufficient:
            count = "unknown" if not math.isfinite(v) else f"{v:.0f}"
            lines.append(
                f"  insufficient: {r} ({count} requests < {self.min_requests}), not judged"
            )
        for i, f in enumerate(self.findings, 1):
            ratio = "-" if not math.isfinite(f.ratio) else f"{f.ratio:.2f}x"
            z = "-" if not math.isfinite(f.robust_z) else f"{f.robust_z:.1f}"
            lines.append(
                f"{i:>3}. {f.replica}  {f.signal}  ratio {ratio}  z {z}  "
                f"{f.side.value}-side: {f.cause.value}"
            )
            lines.extend(f"       - {e}" for e in f.evidence)
        if self.verdict == "no outlier":
            lines.append("  no outlier")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def _orient(spec: SignalSpec, z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if spec.worse == "higher":
        return z
    if spec.worse == "lower":
        return np.asarray(np.negative(z))
    return np.asarray(np.abs(z))


def _effect(
    spec: SignalSpec, x: np.ndarray[Any, Any], med: float, ratio: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    with np.errstate(invalid="ignore"):
        if spec.gate == "absolute":
            d = x - med
            if spec.worse == "higher":
                return np.asarray(d >= spec.min_effect)
            if spec.worse == "lower":
                return np.asarray(-d >= spec.min_effect)
            return np.asarray(np.abs(d) >= spec.min_effect)
        m = spec.min_effect
        if spec.worse == "higher":
            return np.asarray(ratio >= m)
        if spec.worse == "lower":
            return np.asarray(ratio <= 1.0 / m)
        return np.asarray((ratio >= m) | (ratio <= 1.0 / m))


def _score(
    frame: pd.DataFrame, stderr: pd.DataFrame | None, specs: list[SignalSpec], alpha: float
) -> tuple[RobustColumns, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Robust statistics and the finding mask for every cell of ``frame``."""
    x = frame.to_numpy(dtype=np.float64, na_value=np.nan)
    se = None
    if stderr is not None and len(stderr.columns):
        se = stderr.reindex(index=frame.index, columns=frame.columns).to_numpy(
            dtype=np.float64, na_value=np.nan
        )
    rc = robust_columns(
        x,
        rel_floor=np.array([s.rel_floor for s in specs]),
        abs_floor=np.array([s.abs_floor for s in specs]),
        stderr=se,
        alpha=alpha,
    )
    oz = np.empty_like(x)
    eff = np.zeros(x.shape, dtype=bool)
    for j, spec in enumerate(specs):
        oz[:, j] = _orient(spec, rc.z[:, j])
        eff[:, j] = _effect(spec, x[:, j], float(rc.median[j]), rc.ratio[:, j])
    with np.errstate(invalid="ignore"):
        flag = (oz > rc.cutoff) & (rc.z_own >= OWN_CUTOFF) & eff & ~np.isnan(x)
    return rc, oz, flag


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


def _workload_context(
    table: FleetTable, judged: pd.Index, cfg: DetectorConfig, wanted: set[str]
) -> dict[str, tuple[tuple[tuple[Cause, str], ...], tuple[str, ...], bool]]:
    """How each replica in ``wanted`` differs in workload from the judged fleet."""
    wl = table.aligned(table.workload).loc[judged]
    out: dict[str, tuple[tuple[tuple[Cause, str], ...], tuple[str, ...], bool]] = {}
    meds: dict[str, float] = (
        {str(k): float(v) for k, v in wl.median(numeric_only=True).items()}
        if len(wl.columns)
        else {}
    )
    rows: dict[str, dict[str, float]] = {
        str(k): {str(c): float(v) for c, v in d.items()}
        for k, d in wl.loc[[r for r in sorted(wanted) if r in wl.index]]
        .to_dict(orient="index")
        .items()
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


def _drift(table: FleetTable, judged: pd.Index) -> dict[str, tuple[str, ...]]:
    fp = table.aligned(table.fingerprint).loc[judged]
    out: dict[str, list[str]] = {}
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


@dataclass(frozen=True, slots=True)
class _Pass:
    """One judgement of part of the fleet: its findings and, for the first pass, the statistics."""

    findings: list[Finding]
    fleet: dict[str, dict[str, float | None]]


def _judge(table: FleetTable, cfg: DetectorConfig, found_in: Pass, how: str) -> _Pass:
    """Judge every replica of ``table`` (all above the volume gate) against the others.

    ``how`` is the evidence line that says which replicas the finding was judged against.
    """
    judged = table.replicas
    cols = [c for c in table.values.columns if table.values[c].notna().any()]
    values = table.values.loc[:, cols].astype("float64")
    specs = [cfg.spec(c) for c in cols]
    rc, oz, flag = _score(values, table.stderr, specs, cfg.alpha)
    x = values.to_numpy(dtype=np.float64, na_value=np.nan)

    fleet = {
        c: {
            "median": _num(float(rc.median[j])),
            "mad": _num(float(rc.mad[j])),
            "n": float(rc.n[j]),
            "cutoff": _num(float(rc.cutoff[j])),
        }
        for j, c in enumerate(cols)
    }
    rows, colidx = np.nonzero(flag)
    flagged_replicas = {str(judged[int(i)]) for i in rows}
    drift = _drift(table, judged)
    flagged_replicas |= set(drift)

    # Context only for replicas that need it: like-for-like, workload, GPU.
    matched_ctx = _matched_context(table, judged, cfg, flagged_replicas)
    workload = _workload_context(table, judged, cfg, flagged_replicas)
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
    return _Pass(findings, fleet)


def _blamed(findings: list[Finding]) -> set[str]:
    return {f.replica for f in findings if f.side is Side.REPLICA}


def _merge(passes: list[_Pass]) -> list[Finding]:
    """One finding per (replica, signal), the earliest pass's; a replica blamed replica-side in
    any pass keeps only its replica-side findings (its traffic is noted in their evidence)."""
    every = [f for p in passes for f in p.findings]
    blamed = _blamed(every)
    out: dict[tuple[str, str], Finding] = {}
    for f in every:
        if f.replica in blamed and f.side is not Side.REPLICA:
            continue
        out.setdefault((f.replica, f.signal), f)
    return list(out.values())


def _severity(f: Finding) -> tuple[int, float]:
    if math.isfinite(f.ratio) and f.ratio > 0:
        s = abs(math.log(f.ratio))
    elif math.isfinite(f.robust_z):
        s = math.log1p(abs(f.robust_z) / max(f.cutoff, 1.0))
    else:
        s = 0.0
    return (0 if f.side is Side.REPLICA else 1, -s)


def _names(replicas: Iterable[str]) -> str:
    return ", ".join(sorted(replicas))


def detect(table: FleetTable, config: DetectorConfig | None = None) -> OutlierReport:
    """Judge every replica in ``table`` against its fleet; see the module docstring."""
    cfg = config or DetectorConfig()
    if cfg.min_fleet < 3:
        raise AnalysisError("min_fleet must be at least 3 (a median of two outvotes nobody)")
    volume = table.volume_array()
    ok = ~(volume < cfg.min_requests).to_numpy()
    judged = table.replicas[ok]
    insufficient = tuple((str(r), float(volume[r])) for r in table.replicas[~ok])
    notes = list(table.notes)
    names = tuple(map(str, judged.tolist()))
    if len(judged) < cfg.min_fleet:
        notes.append(
            f"only {len(judged)} replica(s) with at least {cfg.min_requests} requests; "
            f"need {cfg.min_fleet} to judge"
        )
        return OutlierReport(
            "insufficient data",
            (),
            names,
            insufficient,
            {},
            cfg.min_requests,
            table.source,
            tuple(notes),
        )
    base = table if len(names) == len(table.replicas) else table.only(names)
    first = _judge(base, cfg, "fleet", f"judged against the whole fleet ({len(names)} replicas)")
    passes = [first]

    # Pass 2: only the replicas whose traffic is like the fleet's.
    differ = set(different_traffic(base, cfg))
    peers = [r for r in names if r not in differ]
    if differ and len(peers) >= cfg.min_fleet:
        how = (
            f"judged against peers with like traffic ({len(peers)} replicas; set aside, traffic "
            f"differs: {_names(differ)})"
        )
        passes.append(_judge(base.only(peers), cfg, "peers", how))
        notes.append(f"re-judged without {_names(differ)} (traffic differs from the fleet's)")

    # Pass 3 and on: the replicas blamed so far set aside, until nobody new is blamed.
    blamed = _blamed([f for p in passes for f in p.findings])
    aside: set[str] = set()
    for _ in range(_MAX_UNMASK_ROUNDS):
        if not blamed - aside:
            break
        rest = [r for r in names if r not in blamed]
        if len(rest) < cfg.min_fleet:
            notes.append(
                f"not re-judged without {_names(blamed)}: {len(rest)} replica(s) would remain, "
                f"need {cfg.min_fleet}"
            )
            break
        aside = set(blamed)
        how = (
            f"judged with blamed replicas set aside ({len(rest)} replicas; set aside, blamed "
            f"replica-side: {_names(aside)})"
        )
        found = _judge(base.only(rest), cfg, "unmasked", how)
        passes.append(found)
        blamed |= _blamed(found.findings)
        notes.append(f"re-judged without {_names(aside)} (blamed replica-side)")

    findings = sorted(_merge(passes), key=_severity)
    return OutlierReport(
        "outliers" if findings else "no outlier",
        tuple(findings),
        names,
        insufficient,
        first.fleet,
        cfg.min_requests,
        table.source,
        tuple(notes),
    )


def _matched_context(
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
    rc, oz, _ = _score(m[cols].astype("float64"), None, specs, cfg.alpha)
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
            slow = bool(rel >= cfg.matched_effect and oz[i, j] > rc.cutoff[j])
            out[(r, c)] = (
                slow,
                (
                    f"like-for-like {c} (per prompt-length bucket, weighted by its requests): "
                    f"{x[i, j]:.2f}x the fleet's bucket medians (fleet median of this ratio "
                    f"{rc.median[j]:.2f}, robust z {oz[i, j]:.1f})",
                ),
            )
    return out
