"""Compare two runs (before and after an upgrade): which latencies moved, by how much, how sure
we are, which component moved, and whether the workload itself changed.

- Percentile shifts (p50, p90, p99 by default) with bootstrap confidence intervals. The bootstrap
  is exact and vectorised: the p-quantile of a resample of sorted ``x`` is ``x[j]`` with
  ``P(Q* ≤ x[j]) = P(Binomial(n, j/n) ≥ ⌈p·n⌉)``, so replicate quantiles are drawn by inverting that
  distribution (seeded) instead of resampling millions of values.
- Mann–Whitney U per metric (scipy), with the effect size P(after > before), as Kayenta does.
- Which component moved: change in the mean queue, prefill, decode and stall, over all requests
  and over each run's e2e tail.
- Workload check: two-sample Kolmogorov–Smirnov on prompt and output lengths and the prefix-cache
  share, and the request rate. When they differ, shifts may be the workload, not a regression, and
  the report says so before anything else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats as st

from fleet.errors import AnalysisError

__all__ = [
    "CompareReport",
    "ComponentMove",
    "MetricComparison",
    "PercentileShift",
    "WorkloadCheck",
    "bootstrap_quantiles",
    "compare_runs",
]

F64 = np.ndarray[Any, np.dtype[np.float64]]
Verdict = Literal["regressed", "improved", "unchanged", "insufficient"]

METRICS = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "prefill_s", "decode_s")
COMPONENTS = ("queue_s", "prefill_s", "decode_s", "preemption_stall_s")


def bootstrap_quantiles(sorted_x: F64, q: float, draws: int, rng: np.random.Generator) -> F64:
    """``draws`` bootstrap replicates of the ``q``-quantile (inverted-CDF) of sorted data."""
    n = len(sorted_x)
    m = max(1, math.ceil(q * n))
    # Outside m ± 9 standard deviations the CDF is 0 or 1 to double precision: skip those j.
    half = int(9 * math.sqrt(n * q * (1 - q))) + 10
    lo, hi = max(1, m - half), min(n, m + half)
    j = np.arange(lo, hi + 1)
    cdf = st.binom.sf(m - 1, n, j / n)
    cdf[-1] = 1.0
    k = np.searchsorted(cdf, rng.uniform(size=draws), side="left") + (lo - 1)
    out: F64 = sorted_x[np.minimum(k, n - 1)]
    return out


@dataclass(frozen=True, slots=True)
class PercentileShift:
    """One percentile before and after, the shift (after − before) and its confidence interval."""

    percentile: float
    before: float
    after: float
    ci_low: float
    ci_high: float

    @property
    def shift(self) -> float:
        return self.after - self.before

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before > 0 else math.nan

    @property
    def significant(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """A latency metric compared across runs."""

    metric: str
    n_before: int
    n_after: int
    shifts: tuple[PercentileShift, ...]
    mann_whitney_p: float
    p_after_greater: float
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class ComponentMove:
    """Mean seconds of one latency component in a cohort, before and after."""

    component: str
    cohort: str
    before: float
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclass(frozen=True, slots=True)
class WorkloadCheck:
    """Did the workload change? KS statistic and p-value per distribution, or a rate ratio."""

    name: str
    before: float
    after: float
    statistic: float
    p_value: float
    differs: bool


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


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" not in df.columns:
        return df
    return df[(df["status"].astype(str) == "ok").to_numpy()]


def _values(df: pd.DataFrame, col: str) -> F64:
    if col not in df.columns:
        return np.empty(0)
    v = df[col].to_numpy(dtype=np.float64, na_value=np.nan)
    return np.sort(v[~np.isnan(v)])


def _compare_metric(
    name: str,
    b: F64,
    a: F64,
    percentiles: Sequence[float],
    draws: int,
    confidence: float,
    min_effect: float,
    rng: np.random.Generator,
) -> MetricComparison:
    if len(b) < 10 or len(a) < 10:
        return MetricComparison(name, len(b), len(a), (), math.nan, math.nan, "insufficient")
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    shifts = []
    for p in percentiles:
        q = p / 100.0
        pb = float(np.percentile(b, p, method="inverted_cdf"))
        pa = float(np.percentile(a, p, method="inverted_cdf"))
        diff = bootstrap_quantiles(a, q, draws, rng) - bootstrap_quantiles(b, q, draws, rng)
        lo, hi = np.quantile(diff, [lo_q, hi_q])
        shifts.append(PercentileShift(p, pb, pa, float(lo), float(hi)))
    mw = st.mannwhitneyu(a, b, alternative="two-sided")
    effect = float(mw.statistic) / (len(a) * len(b))

    def material(s: PercentileShift) -> bool:
        return s.significant and abs(s.shift) >= min_effect * max(abs(s.before), 1e-12)

    worse = any(material(s) and s.shift > 0 for s in shifts)
    better = any(material(s) and s.shift < 0 for s in shifts)
    verdict: Verdict = "regressed" if worse else "improved" if better else "unchanged"
    return MetricComparison(name, len(b), len(a), tuple(shifts), float(mw.pvalue), effect, verdict)


def _rate(df: pd.DataFrame) -> float:
    span = float(df["arrival_s"].max() - df["arrival_s"].min())
    return len(df) / span if span > 0 else math.nan


def compare_runs(
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    percentiles: Sequence[float] = (50.0, 90.0, 99.0),
    metrics: Sequence[str] = METRICS,
    confidence: float = 0.95,
    draws: int = 2000,
    seed: int = 0,
    min_effect: float = 0.05,
    ks_alpha: float = 0.001,
    ks_min_statistic: float = 0.1,
    rate_ratio: float = 1.2,
) -> CompareReport:
    """Compare two record frames. ``min_effect``: a significant shift counts as a regression
    only when it is at least this share of the before value (5 %)."""
    for label, df in (("before", before), ("after", after)):
        if "arrival_s" not in df.columns or df.empty:
            raise AnalysisError(f"{label}: no usable records (need arrival_s and at least one row)")
    if not 0.5 < confidence < 1.0:
        raise AnalysisError(f"confidence must be in (0.5, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    b_ok, a_ok = _ok(before), _ok(after)
    comps = tuple(
        _compare_metric(
            m, _values(b_ok, m), _values(a_ok, m), percentiles, draws, confidence, min_effect, rng
        )
        for m in metrics
    )
    moves: list[ComponentMove] = []
    cohorts: list[tuple[str, pd.DataFrame, pd.DataFrame]] = [("all", b_ok, a_ok)]
    if "e2e_s" in b_ok.columns and len(b_ok) >= 20 and len(a_ok) >= 20:
        tb = b_ok[b_ok["e2e_s"] >= b_ok["e2e_s"].quantile(0.99)]
        ta = a_ok[a_ok["e2e_s"] >= a_ok["e2e_s"].quantile(0.99)]
        cohorts.append(("e2e p99 tail", tb, ta))
    for cohort, cb, ca in cohorts:
        for c in COMPONENTS:
            if c in cb.columns and c in ca.columns:
                moves.append(ComponentMove(c, cohort, float(cb[c].mean()), float(ca[c].mean())))
    checks: list[WorkloadCheck] = []
    for col in ("prompt_tokens", "output_tokens"):
        if col in before.columns and col in after.columns:
            x, y = _values(before, col), _values(after, col)
            ks = st.ks_2samp(x, y)
            checks.append(
                WorkloadCheck(
                    col,
                    float(x.mean()),
                    float(y.mean()),
                    float(ks.statistic),
                    float(ks.pvalue),
                    bool(ks.pvalue < ks_alpha and ks.statistic >= ks_min_statistic),
                )
            )
    if "cached_prompt_tokens" in before.columns and "cached_prompt_tokens" in after.columns:

        def share(df: pd.DataFrame) -> F64:
            p = df["prompt_tokens"].to_numpy(dtype=np.float64)
            c = df["cached_prompt_tokens"].to_numpy(dtype=np.float64)
            return np.sort(np.where(p > 0, c / np.maximum(p, 1), 0.0))

        x, y = share(before), share(after)
        ks = st.ks_2samp(x, y)
        checks.append(
            WorkloadCheck(
                "prefix_cache_share",
                float(x.mean()),
                float(y.mean()),
                float(ks.statistic),
                float(ks.pvalue),
                bool(ks.pvalue < ks_alpha and ks.statistic >= ks_min_statistic),
            )
        )
    rb, ra = _rate(before), _rate(after)
    ratio = ra / rb if rb > 0 else math.nan
    checks.append(
        WorkloadCheck(
            "request_rate",
            rb,
            ra,
            ratio,
            math.nan,
            bool(math.isfinite(ratio) and (ratio >= rate_ratio or ratio <= 1 / rate_ratio)),
        )
    )
    eb = _errors(before)
    ea = _errors(after)
    p_err = (
        float(st.fisher_exact([[eb[0], eb[1] - eb[0]], [ea[0], ea[1] - ea[0]]]).pvalue)
        if eb[1] and ea[1]
        else math.nan
    )
    matched = tuple((m, *_matched_ratio(b_ok, a_ok, m)) for m in metrics if m in b_ok.columns)
    return CompareReport(
        matched=matched,
        metrics=comps,
        components=tuple(moves),
        workload=tuple(checks),
        error_rate_before=eb[0] / eb[1] if eb[1] else math.nan,
        error_rate_after=ea[0] / ea[1] if ea[1] else math.nan,
        error_rate_p=p_err,
        confidence=confidence,
        draws=draws,
        seed=seed,
    )


def _errors(df: pd.DataFrame) -> tuple[int, int]:
    if "status" not in df.columns:
        return 0, len(df)
    return int((df["status"].astype(str) == "error").sum()), len(df)


def _matched_ratio(
    before: pd.DataFrame, after: pd.DataFrame, col: str, buckets: int = 8, min_count: int = 20
) -> tuple[float, float]:
    """Like-for-like after/before ratio of ``col``: per bucket of uncached prompt tokens (edges
    from the before run), the ratio of medians, weighted by the before run's counts. Returns
    (ratio, share of the before run's requests in buckets both runs fill)."""

    def uncached(df: pd.DataFrame) -> F64:
        p = df["prompt_tokens"].to_numpy(dtype=np.float64)
        if "cached_prompt_tokens" in df.columns:
            p = p - df["cached_prompt_tokens"].to_numpy(dtype=np.float64)
        return p

    if "prompt_tokens" not in before.columns or "prompt_tokens" not in after.columns:
        return math.nan, 0.0
    ub, ua = uncached(before), uncached(after)
    vb = before[col].to_numpy(dtype=np.float64, na_value=np.nan)
    va = after[col].to_numpy(dtype=np.float64, na_value=np.nan)
    kb, ka = ~np.isnan(vb), ~np.isnan(va)
    if kb.sum() < min_count or ka.sum() < min_count:
        return math.nan, 0.0
    edges = np.unique(np.quantile(ub[kb], np.linspace(0, 1, buckets + 1))[1:-1])
    bb = np.searchsorted(edges, ub[kb], side="right")
    ba = np.searchsorted(edges, ua[ka], side="right")
    mb = pd.Series(vb[kb]).groupby(bb).agg(["median", "size"])
    ma = pd.Series(va[ka]).groupby(ba).agg(["median", "size"])
    both = mb.add_suffix("_b").join(ma.add_suffix("_a"), how="inner")
    both = both[(both["size_b"] >= min_count) & (both["size_a"] >= min_count)]
    both = both[both["median_b"] > 0]
    if both.empty:
        return math.nan, 0.0
    w = both["size_b"].to_numpy(dtype=np.float64)
    ratio = both["median_a"].to_numpy() / both["median_b"].to_numpy()
    return float(np.dot(w, ratio) / w.sum()), float(w.sum() / kb.sum())
