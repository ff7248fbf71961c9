"""The canary's report: the decision, its reasons and every verdict behind it, as text and JSON,
and the exit status a pipeline gates on."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DECISION_EXIT", "OUTPUT_LENGTH", "CanaryReport", "LatencyVerdict", "RateVerdict"]

OUTPUT_LENGTH = "output_length"
"""The histogram of requests by output tokens: judged both ways, its quantiles in tokens."""

DECISION_EXIT = {"promote": 0, "rollback": 3, "hold": 4}
"""The exit status of each decision (1 and 2 are the command's own errors, as for compare)."""


@dataclass(frozen=True, slots=True)
class LatencyVerdict:
    signal: str
    requests: tuple[int, int]
    """(baseline, canary) requests the histogram counted."""
    quantiles: Mapping[str, tuple[float, float]]
    """p50/p90/p99 (baseline, canary), by ``histogram_quantile``."""
    superiority: float
    upper: float
    """The one-sided ``confidence`` upper bound of ``superiority``."""
    material: float
    """The superiority a ``1 + min_effect`` slowdown would give in these buckets."""
    p_value: float
    verdict: str
    lower: float = math.nan
    """The one-sided ``confidence`` lower bound of ``superiority``, where it is judged both ways
    (the output length)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "requests": {"baseline": self.requests[0], "canary": self.requests[1]},
            "quantiles": {
                k: {"baseline": _num(b), "canary": _num(c)} for k, (b, c) in self.quantiles.items()
            },
            "superiority": _num(self.superiority),
            "superiority_upper": _num(self.upper),
            **({"superiority_lower": _num(self.lower)} if self.signal == OUTPUT_LENGTH else {}),
            "material_superiority": _num(self.material),
            "p_value": _num(self.p_value),
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True)
class RateVerdict:
    rate: str
    baseline: tuple[int, int]
    canary: tuple[int, int]
    p_adjusted: float
    verdict: str
    rise_ci: tuple[float, float]
    """Newcombe's interval of canary − baseline, two-sided at ``2 × confidence − 1``."""
    material: float = math.nan
    """The rise that counts (a share): ``--max-error-rise`` for a failure rate when given, else
    ``min_effect`` of the baseline's rate, 0.1 point at least."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "baseline": {"count": self.baseline[0], "requests": self.baseline[1]},
            "canary": {"count": self.canary[0], "requests": self.canary[1]},
            "p_adjusted": _num(self.p_adjusted),
            "verdict": self.verdict,
            "rise_ci": [_num(self.rise_ci[0]), _num(self.rise_ci[1])],
            "material_rise": _num(self.material),
        }


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


@dataclass(frozen=True, slots=True)
class CanaryReport:
    decision: str
    reasons: tuple[str, ...]
    latency: tuple[LatencyVerdict, ...]
    rates: tuple[RateVerdict, ...]
    requests: tuple[int, int]
    alpha: float
    min_effect: float
    confidence: float
    min_requests: int
    notes: tuple[str, ...] = ()
    max_error_rise: float | None = None
    """The rise of a failure rate that counts (a share), when the on-call set one."""

    @property
    def exit_code(self) -> int:
        return DECISION_EXIT[self.decision]

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reasons": list(self.reasons),
            "requests": {"baseline": self.requests[0], "canary": self.requests[1]},
            "latency": [v.to_dict() for v in self.latency],
            "rates": [v.to_dict() for v in self.rates],
            "procedure": {
                "family_wise_error": self.alpha,
                "min_effect": self.min_effect,
                "confidence": self.confidence,
                "min_requests": self.min_requests,
                "max_error_rise": self.max_error_rise,
                "latency": "Mann-Whitney over histogram buckets (ties at mid-ranks), Bonferroni "
                "across signals; material = the superiority of the baseline made 1 + min_effect "
                "times slower, in the same buckets; the output length two-sided, longer or "
                "shorter by as much",
                "rates": "Fisher's exact test, Holm across rates; material = max_error_rise "
                "for a failure rate when set, else min_effect of the baseline rate, 0.1 point at "
                "least",
            },
            "notes": list(self.notes),
        }

    def render(self) -> str:
        lines = [f"{self.decision.upper()}: " + "; ".join(self.reasons)]
        lines.append(
            f"requests in the window: baseline {self.requests[0]:,}, canary {self.requests[1]:,}"
        )
        for v in self.latency:
            scale, unit = (1.0, " tokens") if v.signal == OUTPUT_LENGTH else (1e3, " ms")
            qs = ", ".join(
                f"{k} {b * scale:.4g} -> {c * scale:.4g}{unit}"
                for k, (b, c) in v.quantiles.items()
                if math.isfinite(b) and math.isfinite(c)
            )
            lines.append(
                f"  {v.signal:<13} {v.verdict:<12} A={v.superiority:.4f} (upper {v.upper:.4f}, "
                f"material {v.material:.4f}, p={v.p_value:.3g}); {qs}"
            )
        for r in self.rates:
            sb = r.baseline[0] / r.baseline[1] if r.baseline[1] else math.nan
            sc = r.canary[0] / r.canary[1] if r.canary[1] else math.nan
            lines.append(
                f"  {r.rate:<26} {r.verdict:<12} {sb:.2%} -> {sc:.2%} (Holm p={r.p_adjusted:.3g})"
            )
        failures = (
            f"; a failure rate's rise {self.max_error_rise * 100:g} points (--max-error-rise)"
            if self.max_error_rise is not None
            else ""
        )
        lines.append(
            f"decision: family-wise error {self.alpha:g}; material = {self.min_effect:.0%} slower "
            f"(latency), longer or shorter (output length), or {self.min_effect:.0%} of the "
            "baseline rate, 0.1 point at least"
            f"{failures}; ruled out at {self.confidence:.0%} one-sided"
        )
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)
