"""Everything the demo concludes from its request records: SLO report and backtest, slow-replica
findings with causes, tail attribution. Pure: a records frame in, values out.

Slow replicas are judged by one ``fleetwatch.fleet.outliers.detect`` call, which is itself
immune to masking in small fleets (a slowed replica and one sent only long prompts, both high on
TTFT, no longer hide each other among four): it re-judges against peers with like traffic and
with the blamed replicas set aside, and says in each finding which pass found it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fleetwatch.demo.scenario import ReplicaRole

__all__ = ["Analysis", "Verdict", "analyse", "verdicts"]

_RATIO_SIGNALS = ("ttft", "tpot", "e2e", "throughput")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the analysis says about one planted replica."""

    replica: str
    planted: str
    """``replica`` or ``workload``: what the demo planted there."""
    side: str | None
    """``replica``, ``workload``, ``host`` (host contention, nobody blamed), or None when no
    finding names it."""
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
    """The offline conclusions. ``outliers`` is the detector's report (all passes merged)."""

    spec: Any
    slo_reports: tuple[Any, ...]
    backtests: tuple[Any, ...]
    outliers: Any
    tail: Any
    ratios: Mapping[str, Mapping[str, float]]
    """Signal -> replica -> value / fleet median (whole fleet)."""


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


def analyse(
    frame: pd.DataFrame,
    spec: Any,
    *,
    min_requests: int = 30,
    cpu_wait: Mapping[str, float] | None = None,
) -> Analysis:
    """SLO report/backtest over ``spec``, slow-replica outliers, tail attribution of e2e.

    ``cpu_wait``: each replica's step-thread CPU wait during the run (``host.HostLoad``), so a
    replica slowed by the machine alone is host contention, not blamed."""
    import dataclasses

    from fleetwatch.fleet.outliers import DetectorConfig, detect, table_from_records
    from fleetwatch.fleet.tail import attribute_tail
    from fleetwatch.slo.report import backtest_spec, report_spec

    reports = tuple(report_spec(spec, frame))
    backtests = tuple(backtest_spec(spec, frame))
    table = table_from_records(frame, where="demo records")
    if cpu_wait:
        table = dataclasses.replace(table, cpu_wait=pd.Series(dict(cpu_wait), dtype="float64"))
    outliers = detect(table, DetectorConfig(min_requests=min_requests))
    tail = attribute_tail(frame, percentile=99.0, target="e2e")
    return Analysis(spec, reports, backtests, outliers, tail, _ratios(table))


def _verdict(role: ReplicaRole, report: Any) -> Verdict:
    found = [f for f in report.findings if f.replica == role.name]
    if not found:
        return Verdict(role.name, role.planted, None, None, (), ())
    # The detector already drops a blamed replica's workload-side findings; keep the rule here.
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
    """For each planted replica: the side and cause the detector gives it."""
    return tuple(_verdict(r, analysis.outliers) for r in roles if r.planted != "none")
