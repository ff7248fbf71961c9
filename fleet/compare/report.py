"""The comparison report: what moved, the workload verdict, and its text and JSON rendering.

``summary`` leads with the workload warning when the workloads differ, then the regressions, the
metrics that moved with an unmatched workload change, the like-for-like ratios (when the workload
differs) and the component that moved most in the e2e tail. ``render`` and ``to_dict`` state the
family-wise error rate and the procedure behind every verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleetwatch.fleet.compare.components import ComponentMove
from fleetwatch.fleet.compare.decision import PROCEDURE
from fleetwatch.fleet.compare.shape import ShapeSignal
from fleetwatch.fleet.compare.statistics import MetricComparison
from fleetwatch.fleet.compare.workload import WorkloadCheck

__all__ = ["VERDICT_EXIT", "CompareReport", "run_verdict"]

VERDICT_EXIT = {"no regression": 0, "regression": 3, "inconclusive": 4}
"""``fleet compare --exit-code``: the status of each run verdict (1 and 2 are the command's
own: a failure, bad input)."""


def run_verdict(report: Any) -> str:
    """The verdict of a report, or of a report per model (``ByModel``): regression if any model
    regressed, else inconclusive if any could not decide, else no regression."""
    verdicts = {r.verdict for _, r in report} if hasattr(report, "reports") else {report.verdict}
    for v in ("regression", "inconclusive"):
        if v in verdicts:
            return v
    return "no regression"


def _num(v: float) -> float | None:
    return v if math.isfinite(v) else None


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
    """(metric, like-for-like median ratio after/before, share of the before run compared), when
    the comparison was matched: after reweighted to the before run's mix of request sizes."""
    alpha: float = 0.01
    """Family-wise error rate of the decision across metrics (Holm)."""
    min_effect: float = 0.05
    matched_on: tuple[str, ...] = ()
    """Covariates of the like-for-like comparison ("prompt", "output"); empty when unmatched."""
    strata: str | None = None
    """What the like-for-like comparison matched on, e.g. "35 strata of uncached prompt tokens"."""
    strata_coverage: float | None = None
    unmatched: tuple[str, ...] = ()
    """Workload checks that differ and could not be matched request by request."""
    error_verdict: str = "insufficient"
    """The error rate's verdict by its counts (``decision.error_verdict``)."""
    error_rise_ci: tuple[float, float] = (math.nan, math.nan)
    """The interval of the error rate's rise, after - before."""
    shape: tuple[ShapeSignal, ...] = ()
    """The output shape: finish-reason, empty-output and error-type shares (``shape``)."""
    resolution: float | None = None
    """The upper edge over the lower of the fixed buckets the latencies were counted in, when
    the runs were too large to sort (``fleet.compare.engine``); None when every figure is of the
    values themselves."""

    def _resolution(self) -> str:
        if self.resolution is None:
            return ""
        width = self.resolution - 1.0
        error = math.sqrt(self.resolution) - 1.0
        return (
            f"; latencies counted in fixed buckets {width:.2%} wide, each read at its middle "
            f"(percentiles within {error:.3%} of the records' own)"
        )

    @property
    def shape_moved(self) -> tuple[ShapeSignal, ...]:
        """Shares that rose materially and significantly (Holm across the shares)."""
        return tuple(s for s in self.shape if s.verdict == "rose")

    def _output_lengths_moved(self) -> WorkloadCheck | None:
        by = {w.name: w for w in self.workload}
        out, prompt = by.get("output_tokens"), by.get("prompt_tokens")
        if out is not None and out.differs and not (prompt is not None and prompt.differs):
            return out
        return None

    @property
    def workload_differs(self) -> bool:
        return any(w.differs for w in self.workload)

    @property
    def regressions(self) -> tuple[str, ...]:
        return tuple(m.metric for m in self.metrics if m.verdict == "regressed")

    @property
    def confounded(self) -> tuple[str, ...]:
        return tuple(m.metric for m in self.metrics if m.verdict == "confounded")

    @property
    def inconclusive(self) -> tuple[str, ...]:
        """Metrics with no regression found where the data could not have ruled one out."""
        return tuple(m.metric for m in self.metrics if m.verdict == "inconclusive")

    @property
    def verdict(self) -> str:
        """``regression`` if any metric regressed, else ``inconclusive`` if any could not rule a
        material regression out (or none could be compared), else ``no regression``."""
        if self.regressions or self.error_verdict == "regressed" or self.shape_moved:
            return "regression"
        compared = [m for m in self.metrics if m.verdict != "insufficient"]
        if self.inconclusive or self.confounded or not compared:
            return "inconclusive"
        if self.error_verdict == "inconclusive":
            return "inconclusive"
        return "no regression"

    def moved(self, cohort: str = "e2e p99 tail") -> ComponentMove | None:
        """The component whose mean moved most (either way) in ``cohort``."""
        rows = [c for c in self.components if c.cohort == cohort]
        return max(rows, key=lambda c: abs(c.delta)) if rows else None

    def decision(self) -> str:
        """One sentence: the error rate, the procedure and what counts as a regression."""
        n = sum(1 for m in self.metrics if m.verdict != "insufficient")
        basis = f", like-for-like ({self.strata})" if self.strata else ""
        return (
            f"family-wise error rate {self.alpha * 100:g}% across {n} metrics ({PROCEDURE}); regressed = "
            f"rejected and a significant percentile at least {self.min_effect:.0%} slower{basis}; "
            f"no regression = every percentile's {self.confidence:.0%} interval below "
            f"{self.min_effect:.0%}, else inconclusive{self._resolution()}"
        )

    def _like_label(self) -> str:
        # ("prompt",) -> "prompt-length"; ("prompt", "output") -> "prompt- and output-length"
        return "- and ".join(self.matched_on) + "-length"

    def summary(self) -> str:
        parts = []
        if self.workload_differs:
            names = ", ".join(w.name for w in self.workload if w.differs)
            parts.append(
                f"WARNING: the workload differs ({names}): shifts below may be the workload, "
                "not a regression"
            )
        reg = self.regressions
        if self.error_verdict == "regressed":
            parts.append(
                f"error rate regressed: {self.error_rate_before:.2%} -> "
                f"{self.error_rate_after:.2%} (Fisher p={self.error_rate_p:.3g})"
            )
        if self.shape_moved:
            parts.append(
                "output shape moved: "
                + ", ".join(
                    f"{s.name} {s.share_before:.2%} -> {s.share_after:.2%} (Holm p={s.p_adjusted:.3g})"
                    for s in self.shape_moved
                )
            )
        lengths = self._output_lengths_moved()
        if lengths is not None:
            parts.append(
                f"output lengths moved with the prompts unchanged (mean {lengths.before:.4g} -> "
                f"{lengths.after:.4g} tokens): the answers changed, or the max_tokens clients ask"
            )
        if reg:
            parts.append(f"regressed: {', '.join(reg)}")
        elif self.inconclusive:
            shown = ", ".join(
                f"{m.metric} {m.detectable:.0%}" if math.isfinite(m.detectable) else m.metric
                for m in self.metrics
                if m.verdict == "inconclusive"
            )
            parts.append(
                f"inconclusive: no latency regression found, but these samples cannot rule out a "
                f"{self.min_effect:.0%} one (smallest shift they would catch: {shown})"
            )
        else:
            parts.append("no latency regression found")
        if self.confounded:
            parts.append(
                f"moved with a workload change that cannot be matched ({', '.join(self.unmatched)}): "
                + ", ".join(self.confounded)
            )
        if self.workload_differs:
            like = [
                f"{m} {r:.2f}x" for m, r, cov in self.matched if math.isfinite(r) and cov >= 0.5
            ]
            if like:
                parts.append(
                    f"like-for-like within {self._like_label()} buckets (after/before): "
                    + ", ".join(like)
                )
        mv = self.moved()
        if mv is not None and reg:
            parts.append(f"largest move in the e2e tail: {mv.component} {mv.delta:+.4g} s")
        return "; ".join(parts)

    def _metric_dict(self, m: MetricComparison) -> dict[str, Any]:
        return {
            "metric": m.metric,
            "n_before": m.n_before,
            "n_after": m.n_after,
            "verdict": m.verdict,
            "detectable_shift": _num(m.detectable),
            "p_value": _num(m.p_value),
            "p_adjusted": _num(m.p_adjusted),
            "mann_whitney_p": _num(m.mann_whitney_p),
            "p_after_greater": _num(m.p_after_greater),
            "like_for_like_coverage": _num(m.coverage),
            "percentiles": [
                {
                    "percentile": s.percentile,
                    "before": _num(s.before),
                    "after": _num(s.after),
                    "shift": _num(s.shift),
                    "ratio": _num(s.ratio),
                    "ci": [_num(s.ci_low), _num(s.ci_high)],
                    "p_value": _num(s.p_value),
                    "p_adjusted": _num(s.p_adjusted),
                    "like_for_like_ratio": _num(s.like_for_like),
                    "significant": s.significant,
                    "verdict": s.verdict or None,
                }
                for s in m.shifts
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "verdict": self.verdict,
            "workload_differs": self.workload_differs,
            "regressions": list(self.regressions),
            "inconclusive": list(self.inconclusive),
            "confounded": list(self.confounded),
            "decision": {
                "family_wise_error": self.alpha,
                "procedure": PROCEDURE,
                "min_effect": self.min_effect,
                "like_for_like": self.strata,
                "like_for_like_coverage": self.strata_coverage,
                "unmatched_workload": list(self.unmatched),
                "bucket_resolution": self.resolution,
                "statement": self.decision(),
            },
            "confidence": self.confidence,
            "bootstrap_draws": self.draws,
            "seed": self.seed,
            "metrics": [self._metric_dict(m) for m in self.metrics],
            "components": [
                {
                    "component": c.component,
                    "cohort": c.cohort,
                    "before": _num(c.before),
                    "after": _num(c.after),
                    "delta": _num(c.delta),
                }
                for c in self.components
            ],
            "workload": [
                {
                    "name": w.name,
                    "before": _num(w.before),
                    "after": _num(w.after),
                    "statistic": _num(w.statistic),
                    "p_value": _num(w.p_value),
                    "differs": w.differs,
                }
                for w in self.workload
            ],
            "matched": [
                {"metric": m, "ratio": _num(r), "coverage": _num(c)} for m, r, c in self.matched
            ],
            "error_rate": {
                "before": _num(self.error_rate_before),
                "after": _num(self.error_rate_after),
                "p_value": _num(self.error_rate_p),
                "verdict": self.error_verdict,
                "rise_ci": [_num(self.error_rise_ci[0]), _num(self.error_rise_ci[1])],
            },
            "output_shape": [s.to_dict() for s in self.shape],
        }

    def render(self) -> str:
        lines = [self.summary(), f"decision: {self.decision()}", ""]
        like = self.strata is not None
        lines.append(
            f"{'metric':<10} {'pct':>5} {'before':>10} {'after':>10} {'shift':>10} "
            f"{f'{int(self.confidence * 100)}% CI':<24} {'p adj':>8}"
            + ("  like-for-like" if like else "")
        )
        for m in self.metrics:
            for s in m.shifts:
                mark = " *" if s.significant else "  "
                ci = f"[{s.ci_low:+.4g}, {s.ci_high:+.4g}]"
                lfl = f"  {s.like_for_like:.3f}x" if like and math.isfinite(s.like_for_like) else ""
                lines.append(
                    f"{m.metric:<10} p{s.percentile:<4g} {s.before:>10.4g} {s.after:>10.4g} "
                    f"{s.shift:>+10.4g} {ci:<24} {s.p_adjusted:>8.2g}{mark} {s.verdict}{lfl}"
                )
            lines.append(
                f"{'':<10} metric p={m.p_value:.3g} (Holm {m.p_adjusted:.3g}), Mann-Whitney "
                f"p={m.mann_whitney_p:.3g}, P(after>before)={m.p_after_greater:.2f} -> {m.verdict}"
            )
        lines.append("components (mean s, before -> after):")
        lines.extend(
            f"  {c.cohort:<14} {c.component:<20} {c.before:.4g} -> {c.after:.4g} ({c.delta:+.4g})"
            for c in self.components
        )
        if self.matched:
            cov = self.strata_coverage if self.strata_coverage is not None else math.nan
            lines.append(
                f"like-for-like median after/before ({self.strata} over their common range, "
                f"{cov:.0%} of the before run; after reweighted to before's mix):"
            )
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
            f"(Fisher p={self.error_rate_p:.3g}; rise {self.confidence:.0%} CI "
            f"[{self.error_rise_ci[0]:+.2%}, {self.error_rise_ci[1]:+.2%}]) -> {self.error_verdict}"
        )
        if self.shape:
            lines.append("output shape (share before -> after, Holm across the shares):")
            lines.extend(
                f"  {s.name:<28} {s.share_before:>7.2%} -> {s.share_after:>7.2%}  "
                f"p adj {s.p_adjusted:.3g} -> {s.verdict}"
                for s in self.shape
            )
        return "\n".join(lines)
