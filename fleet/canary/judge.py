"""The canary's verdict from two sides' histograms and counts: promote, hold or roll back.

Latency (TTFT, TPOT, end to end) arrives as cumulative histogram buckets over the window, the
same bounds on both sides. Each signal gets the rank test the outlier detector uses (Mann–Whitney,
requests in one bucket tied at their mid-rank, the tie-corrected variance), read as the
probability of superiority ``A = P(canary > baseline) + ½ P(tie)``: 0.5 when the canary is alike.

What counts as material is ``min_effect`` of latency, turned into the ``A`` it would give *with
these buckets*: the baseline's own histogram, every request ``1 + min_effect`` times slower (its
CDF interpolated within buckets, as ``histogram_quantile`` does), against the baseline. With wide
buckets a 5 % slowdown moves few requests across an edge, the material ``A`` lies near 0.5 and
little can be ruled out; the verdict says so rather than promote on data that could not tell.

- a signal **regressed** when the canary ranks higher (one-sided p at most ``alpha`` over the
  number of histogram signals judged, the output length among them where the profile has it:
  Bonferroni) and its ``A`` is at least the material one;
- it is **unchanged** when the upper end of ``A``'s one-sided ``confidence`` bound lies below the
  material ``A``: a material slowdown is ruled out;
- else **inconclusive**; **insufficient** under ``min_requests`` on either side.

The output length (vLLM's ``vllm:request_generation_tokens``, requests by output tokens) is a
signal of the same family, judged the same way but both ways: answers that got materially
longer (``A`` at least the material one) or shorter (``A`` at most one minus it), two-sided p
at the same level, are a changed output shape and roll the canary back; it is unchanged when
the ``confidence`` bounds on both sides lie within the band.

Rates (each outcome's share: vLLM's ``finished_reason`` values, ``length`` among them, or the
errors and aborts the profile counts) are judged by their counts as
``fleet compare`` judges the error rate (Fisher's exact test, a rise of ``min_effect`` of the
baseline's rate and 0.1 point at least, Newcombe's interval), Holm across the rates. The failure
rates (each side's ``failures``: errors, aborts, rejections) take the on-call's own threshold
when one is given (``max_error_rise``, an absolute rise: 0.0025 for 0.25 points), the rise the
service can afford (e.g. half the SLO's error budget): ruling a 0.1-point rise out of a 0.5 %
baseline four times in five takes about 61,000 requests a side, a 0.3-point one about 6,800.

The decision: **roll back** when a signal or a rate regressed, the answers got longer or
shorter, or a fingerprint of the canary found it answering unlike its reference
(``--fingerprint``); **promote** when every histogram with data is unchanged and no rate could
have risen materially; otherwise **hold**, with
what could not be decided and how many more requests it would take to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from fleetwatch.fleet.canary.report import (
    OUTPUT_LENGTH,
    CanaryReport,
    LatencyVerdict,
    RateVerdict,
)
from fleetwatch.fleet.compare.decision import error_verdict, holm, material_rise
from fleetwatch.fleet.compare.shape import fold_rare
from fleetwatch.fleet.compare.statistics import error_rates_from_counts
from fleetwatch.fleet.outliers.sources.histogram import histogram_quantile

__all__ = ["OUTPUT_LENGTH", "Side", "judge_canary", "material_superiority", "rank_test"]

F64 = np.ndarray[Any, np.dtype[np.float64]]


@dataclass(frozen=True, slots=True)
class Side:
    """One side's window: per latency signal its cumulative buckets ``{le: count}`` (+Inf
    included), and per rate its (count, requests)."""

    histograms: Mapping[str, Mapping[float, float]]
    requests: int
    rates: Mapping[str, int] = field(default_factory=dict)
    failures: frozenset[str] = frozenset()
    """The names among ``rates`` that count failed requests (errors, aborts, rejections)."""


def _finite_count(x: float) -> float:
    return x if math.isfinite(x) and x > 0 else 0.0


def _counts(cumulative: Mapping[float, float], bounds: Sequence[float]) -> F64:
    """Requests per bucket at ``bounds`` (ascending, +Inf last; each a bound of ``cumulative``,
    bar a missing +Inf, read as the largest count), whole and never negative."""
    c = np.array([_finite_count(float(cumulative.get(b, 0.0))) for b in bounds])
    c = np.rint(np.maximum.accumulate(c))
    return np.diff(c, prepend=0.0)


def rank_test(baseline: F64, canary: F64) -> tuple[float, float, float, float]:
    """(A, its standard error under no difference, one-sided p that the canary ranks higher,
    one-sided p that it ranks lower) from per-bucket counts: Mann–Whitney with ties at
    mid-ranks, continuity corrected (each tail its own correction, as two one-sided tests)."""
    nb, nc = float(baseline.sum()), float(canary.sum())
    if nb < 1 or nc < 1:
        return math.nan, math.nan, math.nan, math.nan
    t = baseline + canary
    n = nb + nc
    below = np.cumsum(t) - t
    u = float(np.sum(canary * (below + (t + 1) / 2))) - nc * (nc + 1) / 2
    ties = float(np.sum(t**3 - t)) / (n * (n - 1)) if n > 1 else 0.0
    var = nb * nc / 12.0 * ((n + 1) - ties)
    a = u / (nb * nc)
    if var <= 0:
        return a, 0.0, 1.0, 1.0
    sd, centre = math.sqrt(var), u - nb * nc / 2
    higher = float(special.ndtr(-(centre - 0.5) / sd))
    lower = float(special.ndtr((centre + 0.5) / sd))
    return a, sd / (nb * nc), higher, lower


def _superiority(p: F64, q: F64) -> float:
    """P(Q > P) + ½ P(Q = P) for bucket shares ``p`` and ``q`` (each summing to 1)."""
    below = np.cumsum(p) - p
    return float(np.sum(q * (below + p / 2)))


def material_superiority(baseline: F64, bounds: Sequence[float], factor: float) -> float:
    """The ``A`` of the baseline made ``factor`` times slower against itself, in these buckets:
    its CDF interpolated linearly within each bucket (the first from 0), what lies beyond the
    last finite bound staying there."""
    total = float(baseline.sum())
    if total <= 0:
        return math.nan
    share = baseline / total
    finite = np.asarray(bounds[:-1], dtype=np.float64)
    cdf = np.cumsum(share)[:-1]
    lower = np.concatenate(([0.0], finite))
    lo_cdf = np.concatenate(([0.0], cdf))
    x = finite / factor
    i = np.searchsorted(finite, x, side="left")  # the bucket (lower[i], finite[i]] holding x
    width = finite[i] - lower[i]
    frac = np.where(width > 0, (x - lower[i]) / np.where(width > 0, width, 1.0), 1.0)
    shifted = lo_cdf[i] + (cdf[i] - lo_cdf[i]) * frac
    q = np.diff(np.concatenate((shifted, [1.0])), prepend=0.0)
    return _superiority(share, np.maximum(q, 0.0))


def _latency(
    name: str,
    base: Mapping[float, float],
    can: Mapping[float, float],
    *,
    level: float,
    min_effect: float,
    z_conf: float,
    min_requests: int,
) -> LatencyVerdict:
    """One histogram's verdict: one-sided for a latency (slower is worse), two-sided for the
    output length (``OUTPUT_LENGTH``: longer and shorter both changed the answers)."""
    # Only the bounds both sides have: an engine upgrade may move the buckets, and a bound one
    # side lacks would shift its requests into the next bucket up (a false slowdown).
    bounds = sorted((set(base) & set(can)) | {math.inf})
    b, c = _counts(base, bounds), _counts(can, bounds)
    nb, nc = int(b.sum()), int(c.sum())
    pairs = (
        list(zip(bounds, np.cumsum(b), strict=True)),
        list(zip(bounds, np.cumsum(c), strict=True)),
    )
    quantiles = {
        f"p{int(q * 100)}": (histogram_quantile(q, pairs[0]), histogram_quantile(q, pairs[1]))
        for q in (0.5, 0.9, 0.99)
    }
    if min(nb, nc) < min_requests:
        return LatencyVerdict(
            name, (nb, nc), quantiles, math.nan, math.nan, math.nan, math.nan, "insufficient"
        )
    a, se, p, p_lower = rank_test(b, c)
    material = material_superiority(b, bounds, 1.0 + min_effect)
    upper, lower = a + z_conf * se, a - z_conf * se
    if name == OUTPUT_LENGTH:
        p = min(1.0, 2.0 * min(p, p_lower))
        if p <= level and material > 0.5 and (a >= material or a <= 1.0 - material):
            verdict = "longer" if a > 0.5 else "shorter"
        elif upper < material and lower > 1.0 - material:
            verdict = "unchanged"
        else:
            verdict = "inconclusive"
        return LatencyVerdict(name, (nb, nc), quantiles, a, upper, material, p, verdict, lower)
    if p <= level and a >= material and material > 0.5:
        verdict = "regressed"
    elif upper < material:
        verdict = "unchanged"
    else:
        verdict = "inconclusive"
    return LatencyVerdict(name, (nb, nc), quantiles, a, upper, material, p, verdict)


def _needed(v: LatencyVerdict, z_conf: float) -> int | None:
    """Requests a side that would bring the upper bound under the material ``A`` if the
    canary's ``A`` stayed where it is (None: it never would)."""
    gap = v.material - v.superiority
    if v.signal == OUTPUT_LENGTH:
        gap = min(gap, v.superiority - (1.0 - v.material))
    if not (math.isfinite(gap) and gap > 0 and v.upper > v.superiority):
        return None
    se = (v.upper - v.superiority) / z_conf
    n = min(v.requests)
    return math.ceil(n * (se * z_conf / gap) ** 2)


def _rate_needed(r: RateVerdict) -> int | None:
    """Requests a side that would bring the rise's upper bound under the material rise if the
    rates stayed where they are (None: they never would)."""
    rise = r.canary[0] / r.canary[1] - r.baseline[0] / r.baseline[1]
    gap, half = r.material - rise, r.rise_ci[1] - rise
    if not (math.isfinite(gap) and gap > 0 and half > 0):
        return None
    return math.ceil(min(r.baseline[1], r.canary[1]) * (half / gap) ** 2)


def judge_canary(
    baseline: Side,
    canary: Side,
    *,
    alpha: float = 0.01,
    min_effect: float = 0.05,
    confidence: float = 0.95,
    min_requests: int = 500,
    notes: Sequence[str] = (),
    fingerprint: Sequence[str] = (),
    max_error_rise: float | None = None,
) -> CanaryReport:
    """The decision for ``canary`` against ``baseline`` (one window each); ``fingerprint``:
    reasons a fingerprint of the canary gave to roll it back (``canary.fingerprint``);
    ``max_error_rise``: the rise of a failure rate that counts (a share), else ``min_effect``
    of the baseline's rate, 0.1 point at least."""
    z_conf = float(special.ndtri(confidence))
    names = [n for n in baseline.histograms if n in canary.histograms]
    level = alpha / max(len(names), 1)
    latency = tuple(
        _latency(
            n,
            baseline.histograms[n],
            canary.histograms[n],
            level=level,
            min_effect=min_effect,
            z_conf=z_conf,
            min_requests=min_requests,
        )
        for n in names
    )
    base_rates, can_rates = fold_rare(baseline.rates, canary.rates)
    rate_names = sorted(
        r for r in set(base_rates) | set(can_rates) if base_rates.get(r) or can_rates.get(r)
    )
    counts = [
        (
            (min(base_rates.get(r, 0), baseline.requests), baseline.requests),
            (min(can_rates.get(r, 0), canary.requests), canary.requests),
        )
        for r in rate_names
    ]
    p_adj = holm([error_rates_from_counts(b, c)[2] for b, c in counts])
    failures = baseline.failures | canary.failures
    rates = []
    for r, (b, c), p in zip(rate_names, counts, p_adj, strict=True):
        own = max_error_rise if r in failures else None
        material = own if own is not None else material_rise(b[0] / max(b[1], 1), min_effect)
        verdict, low, high = error_verdict(
            b, c, p, alpha=alpha, min_effect=min_effect, confidence=2 * confidence - 1,
            material=material,
        )  # fmt: skip
        if "=" in r:  # a share of one whole (an outcome label's value): it moves
            verdict = {"regressed": "rose", "improved": "fell"}.get(verdict, verdict)
        rates.append(RateVerdict(r, b, c, p, verdict, (low, high), material))
    requests = (baseline.requests, canary.requests)
    reasons: list[str] = []
    worse = [v for v in latency if v.verdict in ("regressed", "longer", "shorter")] + [
        r for r in rates if r.verdict in ("regressed", "rose")
    ]
    if worse or fingerprint:
        reasons.extend(fingerprint)
        for v in worse:
            if isinstance(v, LatencyVerdict) and v.signal == OUTPUT_LENGTH:
                b50, c50 = v.quantiles["p50"]
                band = f"{1 - v.material:.3f}..{v.material:.3f}"
                reasons.append(
                    f"answers {v.verdict}: {v.signal} A={v.superiority:.3f} outside material "
                    f"{band} (p={v.p_value:.2g}; p50 {b50:.4g} -> {c50:.4g} tokens)"
                )
            elif isinstance(v, LatencyVerdict):
                b50, c50 = v.quantiles["p50"]
                reasons.append(
                    f"{v.signal} slower: A={v.superiority:.3f} >= material {v.material:.3f} "
                    f"(p={v.p_value:.2g}; p50 {b50 * 1e3:.4g} -> {c50 * 1e3:.4g} ms)"
                )
            else:
                sb, sc = v.baseline[0] / v.baseline[1], v.canary[0] / v.canary[1]
                reasons.append(f"{v.rate} rose: {sb:.2%} -> {sc:.2%} (Holm p={v.p_adjusted:.2g})")
        decision = "rollback"
    elif min(requests) < min_requests:
        side = "canary" if canary.requests <= baseline.requests else "baseline"
        reasons.append(
            f"not enough data: the {side} served {min(requests):,} requests in the window, "
            f"{min_requests:,} needed (--min-requests)"
        )
        decision = "hold"
    else:
        judged = [v for v in latency if v.verdict != "insufficient"]
        open_latency = [v for v in judged if v.verdict != "unchanged"]
        open_rates = [r for r in rates if r.verdict == "inconclusive"]
        for v in open_latency:
            more = _needed(v, z_conf)
            hint = f"; about {more:,} requests a side would decide" if more else ""
            if v.signal == OUTPUT_LENGTH:
                reasons.append(
                    f"{v.signal} inconclusive: answers {min_effect:.0%} longer or shorter not "
                    f"ruled out (A {v.lower:.3f}..{v.upper:.3f} vs material "
                    f"{1 - v.material:.3f}..{v.material:.3f}){hint}"
                )
                continue
            reasons.append(
                f"{v.signal} inconclusive: a {min_effect:.0%} slowdown not ruled out (A upper "
                f"{v.upper:.3f} vs material {v.material:.3f}){hint}"
            )
        for o in open_rates:
            more = _rate_needed(o)
            hint = f"; about {more:,} requests a side would decide" if more else ""
            reasons.append(
                f"{o.rate} inconclusive: a rise of {o.material * 100:.2g} points not ruled out "
                f"(upper bound {o.rise_ci[1] * 100:.2g}){hint}"
            )
        if not judged:
            reasons.append("no latency histogram with data on both sides")
        if open_latency or open_rates or not judged:
            decision = "hold"
        else:
            decision = "promote"
            reasons.append(
                "every latency signal and rate rules out a material regression "
                f"({', '.join(v.signal for v in judged)}"
                + (f"; {', '.join(r.rate for r in rates)}" if rates else "")
                + ")"
            )
    return CanaryReport(
        decision,
        tuple(reasons),
        latency,
        tuple(rates),
        requests,
        alpha,
        min_effect,
        confidence,
        min_requests,
        tuple(notes),
        max_error_rise,
    )
