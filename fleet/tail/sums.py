"""The tail attribution in two passes, so a model's requests need never be in memory at once.

The first pass fixes what every request is judged against (``Plan``): the tail's threshold (the
percentile of the target latency), the size of a long prefill, the body's typical seconds per
prompt and per output token (for the in-flight overlap), and the replica over-represented in the
tail. It comes from the requests' arrays (``plan_from_requests``) or from exact order statistics in
a query engine (``fleet.tail.engine``).

The second pass (``TailSums.add``) takes the requests a group of whole replicas at a time (a
replica's requests together: the overlap is counted within a replica) and keeps only sums: the
least-squares normal equations of the service-time fit, each feature's and component's tail and
total sums, the counts and the queue trend's moments. Whatever the number of chunks, the sums
and so the report are those of the whole (to the last bits of float summation).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.tail.cohorts import F64, Bools, Requests, Target, decompose

__all__ = [
    "INTERFERENCE",
    "OUTPUT",
    "PROMPT",
    "REPLICA",
    "Plan",
    "TailSums",
    "counted_plan",
    "interference",
    "plan_from_requests",
    "worst_replica",
]

PROMPT = "prompt-length variance"
OUTPUT = "output length"
INTERFERENCE = "prefill interference"
REPLICA = "one bad replica"


@dataclass(frozen=True, slots=True)
class Plan:
    """What the second pass judges each request against."""

    target: Target
    percentile: float
    threshold: float
    """Tail: the target latency at or above it."""
    long_threshold: float
    """A long prefill: at least this many uncached prompt tokens."""
    per_prompt: float
    """The body's median prefill seconds per uncached prompt token."""
    per_out: float
    """The body's median decode seconds per output token after the first (e2e; else 0)."""
    worst: str | None
    """The replica over-represented in the tail, or None."""
    origin: float
    """A time near the requests' arrivals: the queue trend's sums are taken from it."""

    def groups(self) -> list[str]:
        """The fit's feature groups, in the order suspects are listed before ranking."""
        out = [PROMPT, *([OUTPUT] if self.target == "e2e" else []), INTERFERENCE]
        return [*out, REPLICA] if self.worst is not None else out


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
    if not len(start):
        return np.zeros(0)
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


def worst_replica(counts_all: F64, counts_tail: F64, names: list[str]) -> str | None:
    """The replica with at least 1.5 times its share of requests in the tail (and at least two
    tail requests), the most over-represented one (of equals, the first by name); ``None`` when
    none is or there is one replica."""
    if len(names) <= 1:
        return None
    seen = counts_all > 0  # a replica of no ok request has no share to be over
    with np.errstate(invalid="ignore", divide="ignore"):
        lift = np.where(
            seen, (counts_tail / counts_tail.sum()) / (counts_all / counts_all.sum()), -np.inf
        )
    top = np.flatnonzero(lift == lift.max())
    worst = min(top.tolist(), key=lambda i: names[i])  # a tie goes to the first name
    return names[worst] if lift[worst] >= 1.5 and counts_tail[worst] >= 2 else None


def _long_threshold(uncached: F64, quantile: float) -> float:
    """A long prompt: at or above the ``quantile`` of uncached tokens, at least twice the median."""
    q_long, q_mid = np.quantile(uncached, [quantile, 0.5])
    return long_threshold(float(q_long), float(q_mid))


def long_threshold(q_long: float, q_mid: float) -> float:
    """The long-prefill size from the uncached tokens' ``quantile`` and median."""
    return max(q_long, 2.0 * q_mid, 1.0)


def check_spread(n_tail: int, n: int, percentile: float, target: str) -> None:
    if n_tail in (0, n):
        raise AnalysisError(f"{target} has no spread at p{percentile:g}: tail equals body")


def plan_from_requests(
    req: Requests, percentile: float, target: Target, long_prompt_quantile: float
) -> Plan:
    """The first pass over requests held in memory."""
    y, parts = decompose(req, target)
    threshold = float(np.percentile(y, percentile))
    tail = y >= threshold
    check_spread(int(tail.sum()), len(y), percentile, target)
    body = ~tail
    per_prompt = float(np.median(parts["prefill"][body] / np.maximum(req.uncached[body], 1.0)))
    per_out = 0.0
    if target == "e2e":
        per_out = float(
            np.median(parts["decode"][body] / np.maximum(req.out_tokens[body] - 1, 1.0))
        )
    k = len(req.replicas)
    counts_all = np.bincount(req.codes, minlength=k).astype(np.float64)
    counts_tail = np.bincount(req.codes[tail], minlength=k).astype(np.float64)
    return Plan(
        target=target,
        percentile=percentile,
        threshold=threshold,
        long_threshold=_long_threshold(req.uncached, long_prompt_quantile),
        per_prompt=per_prompt,
        per_out=per_out,
        worst=worst_replica(counts_all, counts_tail, req.replicas),
        origin=float(np.min(req.arrival)),
    )


def counted_plan(
    target: Target,
    percentile: float,
    threshold: float,
    sizes: tuple[float, float],
    medians: dict[str, float],
    counts: tuple[list[str], F64, F64],
    origin: float,
) -> tuple[Plan, dict[str, int]]:
    """The first pass's plan from a query engine's counts and order statistics (``sizes``: the
    uncached tokens' long-prompt quantile and median; ``medians``: the body's per token,
    ``pp`` and for e2e ``po``; ``counts``: the replicas of an ok request, sorted, with each
    one's requests and tail requests), and each replica's request count."""
    names, counts_all, counts_tail = counts
    plan = Plan(
        target=target,
        percentile=percentile,
        threshold=threshold,
        long_threshold=long_threshold(*sizes),
        per_prompt=medians["pp"],
        per_out=medians.get("po", 0.0),
        worst=worst_replica(counts_all, counts_tail, names),
        origin=origin,
    )
    return plan, dict(zip(names, counts_all.astype(int).tolist(), strict=True))


def _zeros() -> F64:
    return np.zeros(0)


_SHARED = 3
"""The over-represented replica's columns: its indicator times the intercept and the first two
groups' first columns (the first three feature columns), ``Plan.groups``."""
_COUNTED = 1 << 22
"""The largest token count tallied by ``numpy.bincount`` (a larger one by a sort)."""


def _value_counts(values: F64) -> dict[float, int]:
    """Each distinct value of ``values`` and how often it occurs (token counts: whole numbers
    from 0, tallied in one pass; any other value by a sort)."""
    if not len(values):
        return {}
    low, high = float(values.min()), float(values.max())
    if low >= 0.0 and high <= _COUNTED:
        whole = values.astype(np.int64)
        if np.array_equal(whole, values):
            counts = np.bincount(whole)
            seen = np.flatnonzero(counts)
            return dict(zip(seen.astype(np.float64).tolist(), counts[seen].tolist(), strict=True))
    found, counts = np.unique(values, return_counts=True)
    return dict(zip(found.tolist(), counts.tolist(), strict=True))


@dataclass
class TailSums:
    """The second pass's sums; ``add`` one chunk of whole replicas' requests at a time."""

    plan: Plan
    n: int = 0
    n_tail: int = 0
    y_sum: float = 0.0
    y_tail: float = 0.0
    parts_sum: dict[str, float] = field(default_factory=dict)
    parts_tail: dict[str, float] = field(default_factory=dict)
    preempted: int = 0
    preempted_tail: int = 0
    gram: F64 = field(default_factory=_zeros)
    rhs: F64 = field(default_factory=_zeros)
    col_max: F64 = field(default_factory=_zeros)
    col_sum: F64 = field(default_factory=_zeros)
    col_tail: F64 = field(default_factory=_zeros)
    a_sum: float = 0.0
    a_sq: float = 0.0
    aq_sum: float = 0.0
    q_sum: float = 0.0
    a_min: float = np.inf
    a_max: float = -np.inf
    tail_max_uncached: float = -np.inf
    body_uncached: Counter[float] = field(default_factory=Counter)

    def _features(self, req: Requests) -> F64:
        """The fit's feature columns but the over-represented replica's, one a row of a matrix:
        the intercept, then the groups' columns in order."""
        plan = self.plan
        uncached = req.uncached
        long_mask = uncached >= plan.long_threshold
        out1 = np.maximum(req.out_tokens - 1.0, 0.0) if plan.target == "e2e" else None
        rows = 3 if out1 is None else 4
        x = np.empty((rows, len(req)))
        x[0] = 1.0
        x[1] = uncached
        if out1 is not None:
            x[2] = out1
        if long_mask.any():
            nominal = req.scheduled + plan.per_prompt * uncached
            if out1 is not None:
                nominal = nominal + plan.per_out * out1
            x[rows - 1] = interference(
                req.codes, req.scheduled, nominal, req.first, uncached, long_mask
            )
        else:
            x[rows - 1] = 0.0
        return x

    def _worst_rows(self, req: Requests) -> np.ndarray[Any, Any] | None:
        """The rows of the over-represented replica (None when the fit has no such column)."""
        worst = self.plan.worst
        if worst is None:
            return None
        if worst not in req.replicas:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(req.codes == req.replicas.index(worst))

    def add(self, req: Requests) -> F64:
        """Count one chunk: the requests of whole replicas; their target latencies."""
        plan = self.plan
        y, parts = decompose(req, plan.target)
        if not len(req):
            return y
        tail = y >= plan.threshold
        at = np.flatnonzero(tail)
        self.n += len(y)
        self.n_tail += len(at)
        self.y_sum += float(y.sum())
        self.y_tail += float(y[at].sum())
        for name, v in parts.items():
            self.parts_sum[name] = self.parts_sum.get(name, 0.0) + float(v.sum())
            self.parts_tail[name] = self.parts_tail.get(name, 0.0) + float(v[at].sum())
        self.preempted += int(np.count_nonzero(req.preempted))
        self.preempted_tail += int(np.count_nonzero(req.preempted[at]))
        service = y - parts["queue"] - parts["preemption_stall"]
        self._fit_sums(req, service, tail)
        a = req.arrival - plan.origin
        q = parts["queue"]
        self.a_sum += float(a.sum())
        self.a_sq += float(a @ a)
        self.aq_sum += float(a @ q)
        self.q_sum += float(q.sum())
        self.a_min = min(self.a_min, float(a.min()))
        self.a_max = max(self.a_max, float(a.max()))
        if len(at):
            self.tail_max_uncached = max(self.tail_max_uncached, float(req.uncached[at].max()))
        self.body_uncached.update(_value_counts(req.uncached[~tail]))
        return y

    def _fit_sums(self, req: Requests, service: F64, tail: Bools) -> None:
        """The normal equations' sums, each column's largest magnitude, sum and tail sum. The
        replica's columns are nought but on its rows: their sums are those rows' sums of the
        columns they interact with (the first ``_SHARED`` of the others)."""
        x = self._features(req)
        worst = self._worst_rows(req)
        gram = x @ x.T
        rhs = x @ service
        col_max = np.abs(x).max(axis=1)
        col_sum = x.sum(axis=1)
        col_tail = x[:, tail].sum(axis=1)
        if worst is not None:
            xw = x[:, worst]
            gw = xw @ xw.T
            m = _SHARED
            gram = np.block([[gram, gw[:, :m]], [gw[:m, :], gw[:m, :m]]])
            own = xw[:m]
            rhs = np.concatenate([rhs, own @ service[worst]])
            top = np.abs(own).max(axis=1) if len(worst) else np.zeros(m)
            col_max = np.concatenate([col_max, top])
            col_sum = np.concatenate([col_sum, own.sum(axis=1)])
            col_tail = np.concatenate([col_tail, own[:, tail[worst]].sum(axis=1)])
        if not len(self.gram):
            k = len(gram)
            self.gram, self.rhs = np.zeros((k, k)), np.zeros(k)
            self.col_max, self.col_sum, self.col_tail = np.zeros(k), np.zeros(k), np.zeros(k)
        self.gram += gram
        self.rhs += rhs
        self.col_max = np.maximum(self.col_max, col_max)
        self.col_sum += col_sum
        self.col_tail += col_tail

    @property
    def n_body(self) -> int:
        return self.n - self.n_tail

    def means(self, tail_sum: float, total: float) -> tuple[float, float]:
        """Tail and body means of a quantity from its tail sum and total."""
        return tail_sum / self.n_tail, (total - tail_sum) / self.n_body

    def solve(self) -> F64:
        """Least squares of the service time on the feature columns (columns scaled to at most 1
        in magnitude: the normal equations of the scaled design)."""
        scale = np.maximum(self.col_max, 1e-12)
        gram = self.gram / np.outer(scale, scale)
        beta: F64 = np.linalg.lstsq(gram, self.rhs / scale, rcond=None)[0] / scale
        return beta

    def queue_growth(self) -> float:
        """The queue's least-squares trend over arrival times, times the arrivals' span."""
        sxx = self.a_sq - self.a_sum**2 / self.n
        sxy = self.aq_sum - self.a_sum * self.q_sum / self.n
        slope = sxy / sxx if sxx > 0 else 0.0
        return slope * (self.a_max - self.a_min)

    def body_uncached_percentile(self, percentile: float) -> float:
        """A percentile of the body's uncached prompt tokens (linear, as ``numpy``)."""
        from fleetwatch.records.engine.reductions import weighted_quantile

        values = np.fromiter(self.body_uncached.keys(), dtype=np.float64)
        counts = np.fromiter(self.body_uncached.values(), dtype=np.float64)
        return float(weighted_quantile(values, counts, percentile / 100.0)[0])
