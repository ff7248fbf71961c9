"""What the detector reports: findings, each with its evidence, and the fleet's verdict.

A ``Finding`` is one replica standing out on one signal; an ``OutlierReport`` ranks them and
renders as a dict (for JSON) or plain text (for a terminal). ``detect`` builds both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from fleetwatch.fleet.outliers.judging.causes import Cause, Side

__all__ = ["NEXT_STEP", "Finding", "OutlierReport", "Pass", "Verdict", "finite_or_none"]

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
    verbose: bool = field(default=False, compare=False)
    """Render every finding with its evidence (``--verbose``), not one line per replica."""

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
        """Plain-text report for a terminal: one line per replica (its worst finding's side and
        cause, every signal it stands out on) and the next step; each finding with its
        evidence when ``verbose``."""
        lines = [
            f"fleet outliers ({self.source}): {len(self.judged)} replicas judged, "
            f"verdict: {self.verdict}"
        ]
        for r, v in self.insufficient:
            count = "unknown" if not math.isfinite(v) else f"{v:.0f}"
            lines.append(
                f"  insufficient: {r} ({count} requests < {self.min_requests}), not judged"
            )
        if self.verbose:
            for i, f in enumerate(self.findings, 1):
                lines.append(
                    f"{i:>3}. {f.replica}  {f.signal}  ratio {_ratio(f)}  z {_z(f)}  "
                    f"{f.side.value}-side: {f.cause.value}"
                )
                lines.extend(f"       - {e}" for e in f.evidence)
        else:
            by_replica: dict[str, list[Finding]] = {}
            for f in self.findings:
                by_replica.setdefault(f.replica, []).append(f)
            for replica, found in by_replica.items():
                worst = found[0]
                signals = ", ".join(f"{f.signal} {_ratio(f)} (z {_z(f)})" for f in found)
                lines.append(
                    f"  {replica}  {worst.side.value}-side: {worst.cause.value}  {signals}"
                )
                lines.append(f"      next: {NEXT_STEP[worst.cause]}")
            if self.findings:
                lines.append("  evidence: --verbose (or --json); runbooks/replica-outlier.md")
        if self.verdict == "no outlier":
            lines.append("  no outlier")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def _ratio(f: Finding) -> str:
    return "-" if not math.isfinite(f.ratio) else f"{f.ratio:.2f}x"


def _z(f: Finding) -> str:
    return (
        "inf" if math.isinf(f.robust_z) else "-" if math.isnan(f.robust_z) else f"{f.robust_z:.1f}"
    )


NEXT_STEP: Final[Mapping[Cause, str]] = {
    Cause.SLOW_HARDWARE: "drain it and replace it (cordon the node); a hardware ticket with the "
    "throttle reasons and clocks",
    Cause.HARDWARE_OR_HOST: "drain it and replace it (cordon the node); check the GPU's clocks "
    "and the host's other tenants first",
    Cause.HOST_CONTENTION: "move it (or its noisy neighbour) off the host; the replica itself "
    "is fine",
    Cause.CONFIG_DRIFT: "roll it back, or redeploy it from the version and flags its peers run",
    Cause.REPLICA_ERRORS: "drain it; its engine log holds the failing requests' errors",
    Cause.OUTPUT_SHAPE: "fingerprint it against its peers (fleetwatch probe fingerprint) and "
    "drain it if its answers differ",
    Cause.PROMPT_LENGTH_MIX: "leave it in service: its traffic has longer prompts; spread them "
    "at the router",
    Cause.PREFIX_CACHE_SKEW: "leave it in service: its traffic reuses fewer prefixes; route "
    "prefix-aware on every replica alike",
    Cause.LOAD_SKEW: "leave it in service: it is sent more than its share; fix the router's "
    "balance",
}
"""The first action for each cause (the replica-outlier runbook's Mitigate section)."""
