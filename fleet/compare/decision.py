"""One decision per metric, with the family-wise error rate stated and controlled.

Per metric, each reported percentile has an exact p-value (``quantile_test``); the metric's
p-value is the smallest of them times their number (Bonferroni within the metric: valid whatever
the dependence between a metric's percentiles, and close to exact because p50, p90 and p99 of one
metric share little information about a small shift). Across metrics, Holm's step-down procedure
at ``alpha``: it controls the family-wise error rate — the chance that any metric whose
distribution did not change is declared changed — at ``alpha`` under any dependence between the
metrics (e2e contains decode, TTFT contains queue and prefill), and is uniformly more powerful
than Bonferroni. Holm, S. (1979), "A simple sequentially rejective multiple test procedure",
Scand. J. Statist. 6: 65–70.

Within a rejected metric a percentile counts as significant when its own p-value, times the number
of percentiles and the metric's Holm multiplier, is at most ``alpha`` (the smallest always is).

A metric is **regressed** only when, in addition, a significant percentile moved the bad way
(up: every metric here is a latency) by at least ``min_effect`` of its before value — the
practical gate: with thousands of requests a 1 % shift is significant and not worth a page. When
the workload changed and the comparison is like-for-like, the gate reads the like-for-like ratio,
so a latency that moved only because the requests got longer is not a regression. When the
workload changed in a way that cannot be matched (the request rate: load moves queueing and
batching), a material shift is reported as "confounded", never as "regressed".

Two-sided tests at family-wise ``alpha`` bound the chance of listing any regression between two
runs of the same system by ``alpha`` (default 1 %), before the practical gate, which only lowers it.

A metric with no material significant shift is **unchanged** ("no regression") only when the data
rule a material regression out: every percentile's interval (the bootstrap at ``confidence``) has
its upper end below ``min_effect`` of the before value. Otherwise it is **inconclusive**, and
``detectable`` says the smallest shift these sample sizes would have caught 80 % of the time
(``(z(1 - a/2) + z(0.8)) x SE``, the standard error read off the widest percentile's interval, ``a``
the level a percentile is tested at): "no regression found" is never said of data that could not
have found one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from fleetwatch.fleet.compare.statistics import MetricComparison, PercentileShift, Verdict

__all__ = [
    "ERROR_FLOOR",
    "PROCEDURE",
    "decide",
    "detectable_shift",
    "error_verdict",
    "holm",
    "material_rise",
]

ERROR_FLOOR = 0.001
"""The smallest rise of the error rate that counts (0.1 percentage points), whatever
``min_effect`` of a near-zero before rate would say."""

PROCEDURE = (
    "exact permutation test of each percentile (hypergeometric count at the pooled percentile); "
    "per metric the smallest p times the number of percentiles (Bonferroni); Holm across metrics"
)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order; NaN entries stay NaN and do not count
    towards the number of hypotheses."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(len(p), np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    if len(idx) == 0:
        return out.tolist()
    order = idx[np.argsort(p[idx], kind="stable")]
    m = len(order)
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out.tolist()


def _multipliers(p_values: Sequence[float]) -> list[float]:
    """Each finite p-value's Holm multiplier (number of hypotheses not yet rejected before it)."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(len(p), np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    order = idx[np.argsort(p[idx], kind="stable")]
    out[order] = len(order) - np.arange(len(order))
    return out.tolist()


def _effect(s: PercentileShift, matched: bool) -> float:
    if matched:
        return s.like_for_like - 1.0
    return s.shift / max(abs(s.before), 1e-12)


def _rules_out(s: PercentileShift, min_effect: float) -> bool:
    """The interval's upper end is below a material slowdown of the before value."""
    return s.before > 0 and math.isfinite(s.ci_high) and s.ci_high < min_effect * s.before


def detectable_shift(shifts: Sequence[PercentileShift], confidence: float, level: float) -> float:
    """The shift (a share of the before value) a two-sided test at ``level`` catches with 80 %
    power, for the least precise of ``shifts`` (standard errors from their ``confidence``
    intervals); NaN when none has an interval."""
    from scipy.stats import norm

    z_ci = float(norm.ppf(0.5 + confidence / 2.0))
    z = float(norm.ppf(1.0 - level / 2.0)) + float(norm.ppf(0.8))
    worst = math.nan
    for s in shifts:
        if s.before > 0 and math.isfinite(s.ci_low) and math.isfinite(s.ci_high):
            d = z * (s.ci_high - s.ci_low) / (2.0 * z_ci) / s.before
            worst = d if not math.isfinite(worst) else max(worst, d)
    return worst


def _shift_verdict(s: PercentileShift, min_effect: float, matched: bool, confounded: bool) -> str:
    """One percentile's verdict: significant and material, ruled out, or neither."""
    e = _effect(s, matched) if s.significant else math.nan
    if math.isfinite(e) and abs(e) >= min_effect:
        if confounded:
            return "confounded"
        return "regressed" if e > 0 else "improved"
    if s.significant and matched and math.isnan(e) and abs(_effect(s, False)) >= min_effect:
        return "confounded"
    return "unchanged" if _rules_out(s, min_effect) else "inconclusive"


def _verdict(
    shifts: Sequence[PercentileShift], min_effect: float, matched: bool, confounded: bool
) -> Verdict:
    sig = [s for s in shifts if s.significant]
    raw_material = any(abs(_effect(s, False)) >= min_effect for s in sig)
    effects = [_effect(s, matched) for s in sig]
    if matched and raw_material and any(math.isnan(e) for e in effects):
        return "confounded"
    worse = any(e >= min_effect for e in effects)
    better = any(e <= -min_effect for e in effects)
    if (worse or better) and confounded:
        return "confounded"
    if worse:
        return "regressed"
    if all(_rules_out(s, min_effect) for s in shifts):
        return "improved" if better else "unchanged"
    return "improved" if better else "inconclusive"


def decide(
    metrics: Sequence[MetricComparison],
    *,
    alpha: float,
    min_effect: float,
    matched: bool = False,
    confounded: bool = False,
    confidence: float = 0.95,
) -> tuple[MetricComparison, ...]:
    """Holm across ``metrics`` at family-wise ``alpha``, significance per percentile, and the
    verdict of each metric (see the module docstring). ``matched``: the p-values are within strata
    and the practical gate reads like-for-like ratios. ``confounded``: the workload changed in a
    way that was not matched, so no metric is called regressed or improved."""
    p_metric = [m.p_value if m.verdict != "insufficient" else math.nan for m in metrics]
    adjusted = holm(p_metric)
    mult = _multipliers(p_metric)
    out = []
    for m, p_adj, h in zip(metrics, adjusted, mult, strict=True):
        if m.verdict == "insufficient" or not math.isfinite(p_adj):
            out.append(m)
            continue
        k = len(m.shifts)
        shifts = []
        for s in m.shifts:
            own = min(1.0, k * h * s.p_value) if math.isfinite(s.p_value) else 1.0
            s_adj = max(p_adj, own)
            judged = replace(s, p_adjusted=s_adj, significant=s_adj <= alpha)
            shifts.append(
                replace(judged, verdict=_shift_verdict(judged, min_effect, matched, confounded))
            )
        verdict = _verdict(shifts, min_effect, matched, confounded)
        if verdict == "confounded":  # no percentile of a confounded metric is called moved
            shifts = [
                replace(x, verdict="confounded") if x.verdict in ("regressed", "improved") else x
                for x in shifts
            ]
        level = alpha / (k * max(len([p for p in p_metric if math.isfinite(p)]), 1))
        out.append(
            replace(
                m,
                shifts=tuple(shifts),
                p_adjusted=p_adj,
                verdict=verdict,
                detectable=detectable_shift(shifts, confidence, level),
            )
        )
    return tuple(out)


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def material_rise(rate: float, min_effect: float) -> float:
    """The rise of an error rate (a share) that counts: ``min_effect`` of the before ``rate``,
    ``ERROR_FLOOR`` at least, so a rate near zero is not judged on a rise of nothing."""
    return max(min_effect * rate, ERROR_FLOOR)


def error_verdict(
    before: tuple[int, int],
    after: tuple[int, int],
    p_value: float,
    *,
    alpha: float,
    min_effect: float,
    confidence: float,
    material: float | None = None,
) -> tuple[str, float, float]:
    """The error rate's verdict by its counts ((errors, requests) a run) and the interval of the
    rise after - before (Newcombe's hybrid score interval from each run's Wilson interval, at
    ``confidence``). The rise that counts is ``min_effect`` of the before rate, at least
    ``ERROR_FLOOR``: ``regressed`` when Fisher's exact ``p_value`` is at most ``alpha`` and the
    rate rose by that much, ``improved`` when it fell so, ``unchanged`` when the interval's upper
    end is below it, else ``inconclusive``; ``insufficient`` without requests on both sides.
    ``material``, when given, is the rise that counts instead (a share: 0.0025 for 0.25 points),
    as a canary's ``--max-error-rise`` sets it."""
    (eb, nb), (ea, na) = before, after
    if not nb or not na:
        return "insufficient", math.nan, math.nan
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + confidence / 2.0))
    rb, ra = eb / nb, ea / na
    lb, ub = _wilson(eb, nb, z)
    la, ua = _wilson(ea, na, z)
    rise = ra - rb
    low = rise - math.sqrt((ra - la) ** 2 + (ub - rb) ** 2)
    high = rise + math.sqrt((ua - ra) ** 2 + (rb - lb) ** 2)
    if material is None:
        material = material_rise(rb, min_effect)
    significant = math.isfinite(p_value) and p_value <= alpha
    if significant and rise >= material:
        return "regressed", low, high
    if significant and rise <= -material:
        return "improved", low, high
    return ("unchanged" if high < material else "inconclusive"), low, high
