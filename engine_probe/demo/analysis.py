"""Everything the demo concludes from its request records: SLO report and backtest, slow-replica
findings with causes, tail attribution. Pure: a records frame in, values out.

Slow replicas are judged twice. With four replicas, two that stand out on the same signal hide
each other (the median moves towards them and the MAD grows), so a replica-side finding can mask a
workload-side one. The second pass sets aside the replicas already blamed and judges the rest
against each other (sequential outlier detection), which is what an operator does after draining
the bad replica: is anything else odd, and why?
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from engine_probe.demo.scenario import ReplicaRole

__all__ = ["Analysis", "Verdict", "analyse", "verdicts"]

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
    """The offline conclusions. ``outliers`` is the first pass, ``unmasked`` the second (None
    when nobody was blamed in the first or too few replicas remain)."""

    spec: Any
    slo_reports: tuple[Any, ...]
    backtests: tuple[Any, ...]
    outliers: Any
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


def analyse(frame: pd.DataFrame, spec: Any, *, min_requests: int = 30) -> Analysis:
    """SLO report/backtest over ``spec``, outliers (two passes), tail attribution of e2e."""
    from slo.report import backtest_spec, report_spec
    from telemetry.analysis.outliers import DetectorConfig, Side, detect, table_from_records
    from telemetry.analysis.tail import attribute_tail

    reports = tuple(report_spec(spec, frame))
    backtests = tuple(backtest_spec(spec, frame))
    config = DetectorConfig(min_requests=min_requests)
    table = table_from_records(frame, where="demo records")
    first = detect(table, config)
    blamed = {f.replica for f in first.findings if f.side is Side.REPLICA}
    unmasked = None
    rest = frame[~frame["replica"].astype(str).isin(blamed)]
    if blamed and rest["replica"].nunique() >= config.min_fleet:
        unmasked = detect(
            table_from_records(rest, where=f"demo records without {', '.join(sorted(blamed))}"),
            config,
        )
    tail = attribute_tail(frame, percentile=99.0, target="e2e")
    return Analysis(spec, reports, backtests, first, unmasked, tail, _ratios(table))


def _verdict(role: ReplicaRole, reports: Sequence[Any]) -> Verdict:
    for report in reports:
        if report is None:
            continue
        found = [f for f in report.findings if f.replica == role.name]
        if found:
            top = found[0]
            return Verdict(
                role.name,
                role.planted,
                top.side.value,
                top.cause.value,
                tuple(dict.fromkeys(f.signal for f in found)),
                tuple(top.evidence),
            )
    return Verdict(role.name, role.planted, None, None, (), ())


def verdicts(analysis: Analysis, roles: Sequence[ReplicaRole]) -> tuple[Verdict, ...]:
    """For each planted replica: the side and cause the analysis gives it (first pass first)."""
    return tuple(
        _verdict(r, (analysis.outliers, analysis.unmasked)) for r in roles if r.planted != "none"
    )
