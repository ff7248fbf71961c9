"""What the detector reports: findings, each with its evidence, and the fleet's verdict.

A ``Finding`` is one replica standing out on one signal; an ``OutlierReport`` ranks them and
renders as a dict (for JSON) or plain text (for a terminal). ``detect`` builds both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetwatch.fleet.outliers.judging.causes import Cause, Side

__all__ = ["Finding", "OutlierReport", "Pass", "Verdict", "finite_or_none"]

Verdict = Literal["outliers", "no outlier", "insufficient data"]
Pass = Literal["fleet", "peers", "unmasked"]
"""Which judgement found a finding: the whole fleet, peers with like traffic, or the fleet with
the replicas blamed so far set aside."""


def finite_or_none(v: float) -> float | None:
    """``v`` as a float for JSON, None where it is NaN or infinite."""
    return None if v is None or not math.isfinite(v) else float(v)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Finding:
    """One replica standing out on one signal (``signal="config"`` for fingerprint drift).

    ``found_in``: the pass that found it (see ``fleetwatch.fleet.outliers.detect``); ``value``, ``fleet_median``,
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
    lines: tuple[str, ...] | Callable[[], tuple[str, ...]] = field(compare=False, repr=False)
    """The evidence, or a function that writes it on first read (``evidence``): the detector
    decides every finding with array operations and writes text only for findings that are read."""
    found_in: Pass = "fleet"

    @property
    def evidence(self) -> tuple[str, ...]:
        """Why it is a finding, one line per reason; the last line says what it was judged
        against."""
        lines = self.lines
        if callable(lines):
            lines = lines()
            object.__setattr__(self, "lines", lines)
        return lines

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.replica, self.signal, self.found_in, self.evidence))

    def __repr__(self) -> str:
        return f"Finding({self.to_dict()!r})"

    def __reduce__(self) -> tuple[type[Finding], tuple[Any, ...]]:
        # Pickled and copied with its evidence written out (the writer is a closure).
        return (
            Finding,
            (
                self.replica,
                self.signal,
                self.value,
                self.fleet_median,
                self.ratio,
                self.robust_z,
                self.cutoff,
                self.side,
                self.cause,
                self.evidence,
                self.found_in,
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "signal": self.signal,
            "value": finite_or_none(self.value),
            "fleet_median": finite_or_none(self.fleet_median),
            "ratio": finite_or_none(self.ratio),
            "robust_z": finite_or_none(self.robust_z),  # None where MAD = 0 (infinite)
            "cutoff": finite_or_none(self.cutoff),
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
            "insufficient": [
                {"replica": r, "requests": finite_or_none(v)} for r, v in self.insufficient
            ],
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
            z = (
                "inf"
                if math.isinf(f.robust_z)
                else "-"
                if math.isnan(f.robust_z)
                else f"{f.robust_z:.1f}"
            )
            lines.append(
                f"{i:>3}. {f.replica}  {f.signal}  ratio {ratio}  z {z}  "
                f"{f.side.value}-side: {f.cause.value}"
            )
            lines.extend(f"       - {e}" for e in f.evidence)
        if self.verdict == "no outlier":
            lines.append("  no outlier")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)
