"""The comparison report: what moved, the workload verdict, and its text and JSON rendering.

``summary`` leads with the workload warning when the workloads differ, then the regressions, the
like-for-like ratios (when the workload differs) and the component that moved most in the e2e tail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleet.compare.components import ComponentMove
from fleet.compare.statistics import MetricComparison
from fleet.compare.workload import WorkloadCheck

__all__ = ["CompareReport"]


@dataclass(frozen=True, slots=True)
class CompareReport:
    """Before/after comparison; ``workload_differs`` qualifies every regression."""

    metrics: tuple[MetricComparison, ...]
    components: tuple[ComponentMove, ...]
    workload: tuple[WorkloadCheck, ...]
    error_rate_before: float
    error_rate_after: float
    error_rate_p: float
    confidence: float
    draws: int
    seed: int
    matched: tuple[tuple[str, float, float], ...] = ()
    """(metric, like-for-like ratio after/before, share of requests compared): per-prompt-length
    bucket median ratios weighted by the before run's mix, so a workload change cancels out."""

    @property
    def workload_differs(self) -> bool:
        return any(w.differs for w in self.workload)

    @property
    def regressions(self) -> tuple[str, ...]:
        return tuple(m.metric for m in self.metrics if m.verdict == "regressed")

    def moved(self, cohort: str = "e2e p99 tail") -> ComponentMove | None:
        """The component whose mean moved most (either way) in ``cohort``."""
        rows = [c for c in self.components if c.cohort == cohort]
        return max(rows, key=lambda c: abs(c.delta)) if rows else None

    def summary(self) -> str:
        parts = []
        if self.workload_differs:
            names = ", ".join(w.name for w in self.workload if w.differs)
            parts.append(
                f"WARNING: the workload differs ({names}): shifts below may be the workload, "
                "not a regression"
            )
        reg = self.regressions
        parts.append(f"regressed: {', '.join(reg)}" if reg else "no latency regression found")
        if self.workload_differs:
            like = [
                f"{m} {r:.2f}x" for m, r, cov in self.matched if math.isfinite(r) and cov >= 0.5
            ]
            if like:
                parts.append(
                    "like-for-like within prompt-length buckets (after/before): " + ", ".join(like)
                )
        mv = self.moved()
        if mv is not None and reg:
            parts.append(f"largest move in the e2e tail: {mv.component} {mv.delta:+.4g} s")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return v if math.isfinite(v) else None

        return {
            "summary": self.summary(),
            "workload_differs": self.workload_differs,
            "regressions": list(self.regressions),
            "confidence": self.confidence,
            "bootstrap_draws": self.draws,
            "seed": self.seed,
            "metrics": [
                {
                    "metric": m.metric,
                    "n_before": m.n_before,
                    "n_after": m.n_after,
                    "verdict": m.verdict,
                    "mann_whitney_p": num(m.mann_whitney_p),
                    "p_after_greater": num(m.p_after_greater),
                    "percentiles": [
                        {
                            "percentile": s.percentile,
                            "before": num(s.before),
                            "after": num(s.after),
                            "shift": num(s.shift),
                            "ratio": num(s.ratio),
                            "ci": [num(s.ci_low), num(s.ci_high)],
                            "significant": s.significant,
                        }
                        for s in m.shifts
                    ],
                }
                for m in self.metrics
            ],
            "components": [
                {
                    "component": c.component,
                    "cohort": c.cohort,
                    "before": num(c.before),
                    "after": num(c.after),
                    "delta": num(c.delta),
                }
                for c in self.components
            ],
            "workload": [
                {
                    "name": w.name,
                    "before": num(w.before),
                    "after": num(w.after),
                    "statistic": num(w.statistic),
                    "p_value": num(w.p_value),
                    "differs": w.differs,
                }
                for w in self.workload
            ],
            "matched": [
                {"metric": m, "ratio": num(r), "coverage": num(c)} for m, r, c in self.matched
            ],
            "error_rate": {
                "before": num(self.error_rate_before),
                "after": num(self.error_rate_after),
                "p_value": num(self.error_rate_p),
            },
        }

    def render(self) -> str:
        lines = [self.summary(), ""]
        lines.append(
            f"{'metric':<10} {'pct':>5} {'before':>10} {'after':>10} {'shift':>10} "
            f"{int(self.confidence * 100)}% CI"
        )
        for m in self.metrics:
            for s in m.shifts:
                mark = " *" if s.significant else ""
                lines.append(
                    f"{m.metric:<10} p{s.percentile:<4g} {s.before:>10.4g} {s.after:>10.4g} "
                    f"{s.shift:>+10.4g} [{s.ci_low:+.4g}, {s.ci_high:+.4g}]{mark}"
                )
            lines.append(
                f"{'':<10} Mann-Whitney p={m.mann_whitney_p:.3g}, "
                f"P(after>before)={m.p_after_greater:.2f} -> {m.verdict}"
            )
        lines.append("components (mean s, before -> after):")
        lines.extend(
            f"  {c.cohort:<14} {c.component:<20} {c.before:.4g} -> {c.after:.4g} ({c.delta:+.4g})"
            for c in self.components
        )
        if self.matched:
            lines.append("like-for-like after/before (per prompt-length bucket, before's mix):")
            lines.extend(
                f"  {m:<10} {r:.3f}x over {c:.0%} of requests"
                for m, r, c in self.matched
                if math.isfinite(r)
            )
        lines.append("workload:")
        lines.extend(
            f"  {w.name:<22} {w.before:.4g} -> {w.after:.4g}  stat {w.statistic:.3f} "
            f"p={w.p_value:.3g}{'  DIFFERS' if w.differs else ''}"
            for w in self.workload
        )
        lines.append(
            f"error rate {self.error_rate_before:.2%} -> {self.error_rate_after:.2%} "
            f"(Fisher p={self.error_rate_p:.3g})"
        )
        return "\n".join(lines)
