"""The service-time model: one group of features per suspect, fitted by least squares.

Service time (latency minus queue and preemption stall) is fitted on uncached prompt tokens,
output tokens (e2e only), the prompt tokens of *other* long-prompt prefills in flight on the same
replica (prefill interference), and, when one replica is over-represented in the tail, an
indicator for it interacted with the first two sizes (a slow replica is slower per token, not by
a constant). The groups keep their order: it is the order suspects are listed in before ranking.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetwatch.fleet.tail.cohorts import F64, Bools, Cohorts, Requests, Target

__all__ = ["Fit", "fit_service", "interference"]

PROMPT = "prompt-length variance"
OUTPUT = "output length"
INTERFERENCE = "prefill interference"
REPLICA = "one bad replica"


@dataclass(frozen=True, slots=True)
class Fit:
    """Feature columns by suspect and their coefficients (``beta[0]`` is the intercept, then each
    group's columns in order); ``long_threshold`` is the uncached-token size of a long prefill."""

    features: Mapping[str, tuple[F64, ...]]
    beta: F64
    long_threshold: float
    bad_replica: str | None

    def group(self, name: str) -> tuple[tuple[F64, ...], F64]:
        """The columns of suspect ``name`` and their coefficients."""
        k = 1
        for key, cols in self.features.items():
            if key == name:
                return cols, self.beta[k : k + len(cols)]
            k += len(cols)
        raise KeyError(name)


def interference(
    codes: np.ndarray[Any, Any],
    start: F64,
    end: F64,
    pf_end: F64,
    uncached: F64,
    long_mask: np.ndarray[Any, Any],
) -> F64:
    """Prompt tokens of other long-prompt prefills on the same replica overlapping each request.

    A long prefill j overlaps request i when ``start_j < end_i`` and ``pf_end_j > start_i``;
    counting those with ``start_j < end_i`` minus those with ``pf_end_j <= start_i`` gives the sum
    in two sorted searches. Replicas are kept apart by offsetting each one's clock.
    """
    lo = float(np.nanmin(start))
    span = float(np.nanmax(np.fmax(end, pf_end))) - lo + 1.0
    off = codes.astype(np.float64) * 2.0 * span - lo
    s, e = start + off, end + off
    ls, le = (start + off)[long_mask], (pf_end + off)[long_mask]
    tok = uncached[long_mask]
    o1, o2 = np.argsort(ls, kind="stable"), np.argsort(le, kind="stable")
    ls_sorted, le_sorted = ls[o1], le[o2]
    c1 = np.concatenate(([0.0], np.cumsum(tok[o1])))
    c2 = np.concatenate(([0.0], np.cumsum(tok[o2])))
    total = (
        c1[np.searchsorted(ls_sorted, e, side="left")]
        - c2[np.searchsorted(le_sorted, s, side="right")]
    )
    own = np.where(long_mask & (pf_end > start), uncached, 0.0)
    out: F64 = np.maximum(total - own, 0.0)
    return out


def _long_threshold(uncached: F64, quantile: float) -> float:
    """A long prompt: at or above the ``quantile`` of uncached tokens, at least twice the median."""
    q_long, q_mid = np.quantile(uncached, [quantile, 0.5])
    return max(float(q_long), 2.0 * float(q_mid), 1.0)


def _overlap(
    req: Requests, parts: Mapping[str, F64], c: Cohorts, target: Target, long_mask: Bools
) -> F64:
    """Long-prefill tokens in flight beside each request, over the window it would have been in
    flight at the body's typical speed: using the measured window would count more overlap for
    requests that were slow for other reasons."""
    if not long_mask.any():
        return np.zeros(len(req))
    uncached = req.uncached
    per_prompt = float(np.median(parts["prefill"][c.body] / np.maximum(uncached[c.body], 1.0)))
    nominal = req.scheduled + per_prompt * uncached
    if target == "e2e":
        out = req.out_tokens
        per_out = float(np.median(parts["decode"][c.body] / np.maximum(out[c.body] - 1, 1.0)))
        nominal = nominal + per_out * np.maximum(out - 1.0, 0.0)
    return interference(req.codes, req.scheduled, nominal, req.first, uncached, long_mask)


def _worst_replica(req: Requests, c: Cohorts) -> int | None:
    """The replica with at least 1.5 times its share of requests in the tail (and at least two
    tail requests), the most over-represented one; ``None`` when none is or there is one replica."""
    k = len(req.replicas)
    if k <= 1:
        return None
    counts_all = np.bincount(req.codes, minlength=k).astype(np.float64)
    counts_tail = np.bincount(req.codes[c.tail], minlength=k).astype(np.float64)
    lift = (counts_tail / c.n_tail) / (counts_all / len(req.codes))
    worst = int(np.argmax(lift))
    return worst if lift[worst] >= 1.5 and counts_tail[worst] >= 2 else None


def _solve(service: F64, cols: list[F64]) -> F64:
    """Least squares of ``service`` on ``cols`` (columns scaled to at most 1 in magnitude)."""
    scale = np.array([max(float(np.abs(col).max()), 1e-12) for col in cols])
    design = np.column_stack(cols) / scale
    # Normal equations: a k×k solve instead of an n×k factorisation (k ≤ 9, n up to millions).
    gram = design.T @ design
    beta: F64 = np.linalg.lstsq(gram, design.T @ service, rcond=None)[0] / scale
    return beta


def fit_service(
    req: Requests,
    parts: Mapping[str, F64],
    c: Cohorts,
    target: Target,
    long_prompt_quantile: float,
) -> Fit:
    """Build the feature groups and fit the service time of every request on them."""
    thr_long = _long_threshold(req.uncached, long_prompt_quantile)
    interf = _overlap(req, parts, c, target, req.uncached >= thr_long)
    features: dict[str, tuple[F64, ...]] = {PROMPT: (req.uncached,)}
    if target == "e2e":
        features[OUTPUT] = (np.maximum(req.out_tokens - 1.0, 0.0),)
    features[INTERFERENCE] = (interf,)
    worst = _worst_replica(req, c)
    if worst is not None:
        on = (req.codes == worst).astype(np.float64)
        sizes = [group[0] for group in list(features.values())[:2]]
        features[REPLICA] = (on, *(on * v for v in sizes))
    service = c.y - parts["queue"] - parts["preemption_stall"]
    cols = [np.ones(len(c.y)), *(col for group in features.values() for col in group)]
    bad = None if worst is None else str(req.replicas[worst])
    return Fit(features, _solve(service, cols), thr_long, bad)
