"""Everything the demo concludes from its request records: SLO report and backtest, slow-replica
findings with causes, tail attribution. Pure: a records frame in, values out.

Slow replicas are judged in up to three passes, because with four replicas two that stand out on
the same signal hide each other (the median moves towards them and the MAD grows):

1. ``fleet``: every replica against the fleet median.
2. ``peers``: only the replicas whose traffic is like the fleet's (mean prompt length, prefix-cache
   hit rate and request rate within the detector's workload thresholds), so a replica that is
   sent different traffic cannot mask a slow one. Replica-side findings come from passes 1 and 2.
3. ``unmasked``: the replicas blamed so far are set aside and the rest judged against each other
   (sequential outlier detection), which is what an operator does after draining the bad
   replica: is anything else odd, and why?
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from engine_probe.demo.scenario import ReplicaRole

__all__ = ["Analysis", "Verdict", "analyse", "different_traffic", "verdicts"]

_RATIO_SIGNALS = ("ttft", "tpot", "e2e", "throughput")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the analysis says about one planted replica."""

    replica: str
    planted: str
    """``replica`` or ``workload``: what the demo planted there."""
    side: str | None
    """``replica``, ``workload``, or None when no finding names it."""
    cause: str | None
    signals: tuple[str, ...]
    evidence: tuple[str, ...]

    @property
    def correct(self) -> bool:
        return self.side == self.planted

    def to_dict(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "planted": self.planted,
            "found_side": self.side,
            "cause": self.cause,
            "signals": list(self.signals),
            "evidence": list(self.evidence),
            "correct": self.correct,
        }


@dataclass(frozen=True, slots=True)
class Analysis:
    """The offline conclusions. ``outliers``, ``peers`` and ``unmasked`` are the three passes
    (None when a pass had nothing to set aside or too few replicas remained)."""

    spec: Any
    slo_reports: tuple[Any, ...]
    backtests: tuple[Any, ...]
    outliers: Any
    peers: Any | None
    unmasked: Any | None
    tail: Any
    ratios: Mapping[str, Mapping[str, float]]
    """Signal -> replica -> value / fleet median (first-pass table)."""


def _ratios(table: Any) -> dict[str, dict[str, float]]:
    values: pd.DataFrame = table.values
    out: dict[str, dict[str, float]] = {}
    for sig in _RATIO_SIGNALS:
        if sig not in values.columns:
            continue
        col = values[sig].astype("float64")
        med = float(col.median())
        if not math.isfinite(med) or med == 0:
            continue
        out[sig] = {str(r): float(v) / med for r, v in col.items()}
    return out


def different_traffic(table: Any, config: Any) -> tuple[str, ...]:
    """Replicas whose traffic differs from the fleet median by the detector's own workload
    thresholds (prompt length, prefix-cache hit rate, request rate)."""
    wl: pd.DataFrame = table.workload
    if wl is None or wl.empty:
        return ()
    out = set()
    for col, limit in (
        ("mean_prompt_tokens", config.prompt_ratio),
        ("request_rate", config.request_rate_ratio),
    ):
        if col in wl.columns:
            x = wl[col].astype("float64")
            med = float(x.median())
            if med > 0:
                ratio = x / med
                out |= {str(r) for r in ratio.index[(ratio >= limit) | (ratio <= 1.0 / limit)]}
    if "cache_hit_rate" in wl.columns:
        c = wl["cache_hit_rate"].astype("float64")
        out |= {str(r) for r in c.index[(c - c.median()).abs() >= config.cache_hit_delta]}
    return tuple(sorted(out))


def _without(frame: pd.DataFrame, replicas: set[str] | tuple[str, ...], config: Any) -> Any:
    from telemetry.analysis.outliers import detect, table_from_records

    rest = frame[~frame["replica"].astype(str).isin(set(replicas))]
    if not replicas or rest["replica"].nunique() < config.min_fleet:
        return None
    where = f"demo records without {', '.join(sorted(replicas))}"
    return detect(table_from_records(rest, where=where), config)


def analyse(frame: pd.DataFrame, spec: Any, *, min_requests: int = 30) -> Analysis:
    """SLO report/backtest over ``spec``, outliers (three passes), tail attribution of e2e."""
    from slo.report import backtest_spec, report_spec
    from telemetry.analysis.outliers import DetectorConfig, Side, detect, table_from_records
    from telemetry.analysis.tail import attribute_tail

    reports = tuple(report_spec(spec, frame))
    backtests = tuple(backtest_spec(spec, frame))
    config = DetectorConfig(min_requests=min_requests)
    table = table_from_records(frame, where="demo records")
    first = detect(table, config)
    peers = _without(frame, different_traffic(table, config), config)
    blamed = {
        f.replica
        for report in (first, peers)
        if report is not None
        for f in report.findings
        if f.side is Side.REPLICA
    }
    unmasked = _without(frame, tuple(sorted(blamed)), config)
    tail = attribute_tail(frame, percentile=99.0, target="e2e")
    return Analysis(spec, reports, backtests, first, peers, unmasked, tail, _ratios(table))


def _verdict(role: ReplicaRole, reports: Sequence[Any]) -> Verdict:
    found = [
        f
        for report in reports
        if report is not None
        for f in report.findings
        if f.replica == role.name
    ]
    if not found:
        return Verdict(role.name, role.planted, None, None, (), ())
    # A replica-side finding in any pass outranks a workload-side one.
    found.sort(key=lambda f: f.side.value != "replica")
    top = found[0]
    same = [f for f in found if f.side is top.side]
    return Verdict(
        role.name,
        role.planted,
        top.side.value,
        top.cause.value,
        tuple(dict.fromkeys(f.signal for f in same)),
        tuple(top.evidence),
    )


def verdicts(analysis: Analysis, roles: Sequence[ReplicaRole]) -> tuple[Verdict, ...]:
    """For each planted replica: the side and cause the analysis gives it over all passes."""
    passes = (analysis.outliers, analysis.peers, analysis.unmasked)
    return tuple(_verdict(r, passes) for r in roles if r.planted != "none")
