"""``fleet compare`` through a query engine, in memory bounded whatever the rows.

Every figure compare reports is a function of the two runs' values in order, or of counts:

- a percentile is the value at one rank (inverted CDF), and a bootstrap replicate of it one of
  the values within nine standard deviations of that rank (``statistics.bootstrap_window``):
  thousands of values, not the run;
- the exact quantile test needs, per stratum, the pooled value at the pooled rank and how many of
  each run's values lie at or below it;
- Mann–Whitney's U is the after run's rank sum, ties at their mid-rank, and the tie term;
- the like-for-like percentile is where the after run's reweighted CDF crosses the share;
- the workload checks' KS statistics are gaps between CDFs, from tables of distinct values: the
  token counts' (integers: at most the context length's values) and the prefix-cache share's
  (at most one a distinct pair of prompt and cached tokens); the request rate and error rate
  are counts, the components' means sums.

So for each metric each run's engine sorts that run's values (out of core: DuckDB spills to disk,
Spark sorts on its cluster), one pass merges the two ordered streams ``CHUNK_ROWS`` at a time,
equal values never split between chunks, and takes each figure as its rank goes by. Memory is a
chunk and the bootstrap windows. The report equals ``compare_runs``' on the same records, up to
the last bits of float summation in means and weights (``tests/fleet/test_compare_engine.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
from scipy import special

from fleetwatch.fleet.by_model import ByModel, gathered
from fleetwatch.fleet.compare.components import COMPONENTS, ComponentMove
from fleetwatch.fleet.compare.matching import (
    I64,
    MIN_COUNT,
    TRIM,
    describe_strata,
    strata_per_axis,
)
from fleetwatch.fleet.compare.quantile_test import counts_p_value
from fleetwatch.fleet.compare.report import CompareReport
from fleetwatch.fleet.compare.run import METRICS, check_options, finish
from fleetwatch.fleet.compare.statistics import (
    F64,
    MetricComparison,
    PercentileShift,
    bootstrap_quantiles,
    bootstrap_window,
    error_rates_from_counts,
    inverted_cdf_index,
)
from fleetwatch.fleet.compare.workload import (
    WorkloadCheck,
    ks_counts,
    matching_covariates,
    rate_check,
)
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.records.engine import Engine
from fleetwatch.records.engine.reductions import DERIVED, MODEL, lerp, weighted_quantile
from fleetwatch.records.filters import sql_string

__all__ = ["CHUNK_ROWS", "NEEDS", "compare_in_engines"]

CHUNK_ROWS = 1 << 18
"""Values each run's stream brings at a time (about 25 bytes each in the pass, a few copies of
them at once)."""
NEEDS = (
    "model",
    "status",
    "arrival_s",
    "scheduled_s",
    "first_token_s",
    "finished_s",
    "prompt_tokens",
    "output_tokens",
    "cached_prompt_tokens",
    "preemption_stall_s",
)
"""The stored columns compare reads."""
OK = "status = 'ok'"
_COVARIATE_SQL = {
    "prompt": "(CAST(prompt_tokens AS DOUBLE) - coalesce(CAST(cached_prompt_tokens AS DOUBLE), 0.0))",
    "output": "CAST(output_tokens AS DOUBLE)",
}
"""Each matching covariate as SQL (as ``matching._covariate``)."""
_CACHE_SHARE = (
    "(CASE WHEN prompt_tokens > 0 THEN CAST(cached_prompt_tokens AS DOUBLE) "
    "/ CAST(greatest(prompt_tokens, 1) AS DOUBLE) ELSE 0.0 END)"
)


@dataclass(frozen=True, slots=True)
class Run:
    """One run's records: an engine and the condition that picks the model compared."""

    engine: Engine
    where: str = "TRUE"

    def query(self, select: str, cond: str = "TRUE", tail: str = "") -> Any:
        return self.engine.query(
            f"SELECT {select} FROM records WHERE ({self.where}) AND {cond} {tail}"
        )

    def row(self, select: str, cond: str = "TRUE") -> list[Any]:
        return [None if _missing(x) else x for x in self.query(select, cond).iloc[0].tolist()]

    def counts(self, expr: str, cond: str) -> tuple[F64, I64]:
        """The distinct values of ``expr`` over the rows ``cond`` keeps, ascending, and the
        count of each (NULL left out)."""
        df = self.query(
            f"{expr} AS v, count(*) AS n", f"{cond} AND {expr} IS NOT NULL", "GROUP BY 1 ORDER BY 1"
        )
        return df["v"].to_numpy(np.float64), df["n"].to_numpy(np.int64)


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


# --- the ordered pass ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Buffer:
    v: F64
    s: I64
    n: I64
    done: bool = False


def _empty() -> _Buffer:
    return _Buffer(np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64))


def _pull(buf: _Buffer, stream: Iterator[Any]) -> None:
    try:
        frame = next(stream)
    except StopIteration:
        buf.done = True
        return
    v = frame["v"].to_numpy(np.float64)
    s = frame["s"].to_numpy(np.int64)
    buf.v, buf.s = np.r_[buf.v, v], np.r_[buf.s, s]
    buf.n = np.r_[buf.n, np.ones(len(v), dtype=np.int64)]
    if len(buf.v) > 2 * CHUNK_ROWS and buf.v[0] == buf.v[-1]:
        # One value repeated past a chunk (a latency of exactly 0, say): kept as counts per stratum.
        keys, inverse = np.unique(buf.s, return_inverse=True)
        buf.n = np.bincount(inverse, weights=buf.n).astype(np.int64)
        buf.v, buf.s = np.full(len(keys), buf.v[0]), keys


def _take(buf: _Buffer, below: float | None) -> tuple[F64, I64, I64]:
    i = len(buf.v) if below is None else int(np.searchsorted(buf.v, below, side="left"))
    out = buf.v[:i], buf.s[:i], buf.n[:i]
    buf.v, buf.s, buf.n = buf.v[i:], buf.s[i:], buf.n[i:]
    return out


Chunk = tuple[F64, I64, I64, I64]
"""Rows ordered by value: value, stratum, run (0 before, 1 after), count."""


def merged(before: Iterator[Any], after: Iterator[Any]) -> Iterator[Chunk]:
    """The two runs' ordered streams of ``v`` (value) and ``s`` (stratum) as one, by value,
    a chunk at a time; all rows of one value are in one chunk."""
    bufs, streams = (_empty(), _empty()), (before, after)
    while True:
        for buf, stream in zip(bufs, streams, strict=True):
            while not buf.done and not len(buf.v):
                _pull(buf, stream)
        live = [b for b in bufs if not b.done]
        below = min(float(b.v[-1]) for b in live) if live else None
        parts = [_take(b, below) for b in bufs]
        if not sum(len(p[0]) for p in parts):
            if below is None:
                return
            for buf, stream in zip(bufs, streams, strict=True):
                if not buf.done and buf.v[-1] == below:
                    _pull(buf, stream)
            continue
        v = np.concatenate([p[0] for p in parts])
        order = np.argsort(v, kind="stable")  # two sorted runs: a linear merge
        s = np.concatenate([p[1] for p in parts])
        run = np.concatenate([np.full(len(p[0]), i, dtype=np.int64) for i, p in enumerate(parts)])
        n = np.concatenate([p[2] for p in parts])
        yield v[order], s[order], run[order], n[order]


class _Window:
    """The values of one run at ranks ``first..last`` (0-based) as the pass goes by."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last = first, last
        self.parts: list[F64] = []

    def feed(self, v: F64, n: I64, cum: I64, done: int) -> None:
        lo, hi = max(self.first, done), min(self.last, int(cum[-1]) - 1)
        if lo > hi:
            return
        i0 = int(np.searchsorted(cum, lo, side="right"))
        i1 = int(np.searchsorted(cum, hi, side="right"))
        rows = slice(i0, i1 + 1)
        # each row's overlap with lo..hi, so a value held a million times is not expanded
        held = np.minimum(cum[rows], hi + 1) - np.maximum(cum[rows] - n[rows], lo)
        self.parts.append(np.repeat(v[rows], held))

    @property
    def values(self) -> F64:
        return np.concatenate(self.parts) if self.parts else np.empty(0)

    @property
    def value(self) -> float:
        out = self.values
        return float(out[0]) if len(out) else math.nan


class _QuantileCounts:
    """Per stratum, the pooled value at the stratum's ``q`` rank and each count at or below it
    (``quantile_test.quantile_counts``), taken as the pass goes by."""

    def __init__(self, pooled: I64, q: float) -> None:
        self.present = np.flatnonzero(pooled > 0)
        size = pooled[self.present]
        self.size = size
        self.rank = np.clip(np.ceil(np.round(q * size, 9)).astype(np.int64), 1, size) - 1
        self.at_or_below = np.zeros(len(size), dtype=np.int64)
        self.after = np.zeros(len(size), dtype=np.int64)
        self.found = np.zeros(len(size), dtype=bool)

    def feed(self, chunk: Chunk, seen: I64, seen_after: I64, totals: I64) -> None:
        """``seen``/``seen_after``: each stratum's pooled/after values before the chunk;
        ``totals``: its pooled values in the chunk."""
        start = seen[self.present]
        hit = ~self.found & (self.rank < start + totals[self.present])
        if not hit.any():
            return
        v, s, run, n = chunk
        for i in np.flatnonzero(hit).tolist():
            stratum = int(self.present[i])
            mask = s == stratum
            vs, ns, rs = v[mask], n[mask], run[mask]
            cum = int(start[i]) + np.cumsum(ns)
            c = vs[int(np.searchsorted(cum, self.rank[i], side="right"))]
            j = int(np.searchsorted(vs, c, side="right"))
            self.at_or_below[i] = cum[j - 1]
            self.after[i] = int(seen_after[stratum]) + int(ns[:j][rs[:j] == 1].sum())
            self.found[i] = True

    def p_value(self, after_sizes: I64) -> float:
        return counts_p_value(
            int(self.after.sum()), self.size, self.at_or_below, after_sizes[self.present]
        )


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one metric's pass takes: ranks per run, strata, weights."""

    n: tuple[int, int]
    strata: tuple[I64, I64]
    """Values per stratum and run (index ``k`` is stratum ``k``; the last, values outside)."""
    percentiles: tuple[float, ...]
    matched: bool
    tail: bool
    """Also take each run's e2e tail threshold (its p99, linear)."""


class _Pass:
    """One metric's pass over the merged stream."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        cb, ca = plan.strata
        count = len(cb) - 1
        self.count = count
        self.windows: list[list[tuple[str, float, _Window]]] = [[], []]
        for side, n in enumerate(plan.n):
            for p in plan.percentiles:
                q = p / 100.0
                first, last = bootstrap_window(n, q)
                i = inverted_cdf_index(n, q)
                self.windows[side] += [("boot", p, _Window(first, last)), ("pct", p, _Window(i, i))]
            if plan.tail:
                h = (n - 1) * 0.99
                lo = math.floor(h)
                self.windows[side].append(("tail", h - lo, _Window(lo, min(lo + 1, n - 1))))
        self.pooled = (cb + ca)[:count]
        self.tests = [_QuantileCounts(self.pooled, p / 100.0) for p in plan.percentiles]
        self.done = [0, 0]
        self.seen = np.zeros(count + 1, dtype=np.int64)
        self.seen_after = np.zeros(count + 1, dtype=np.int64)
        self.pooled_done = 0
        self.rank_sum2 = 0  # twice the after run's rank sum (mid-ranks: integers when doubled)
        self.ties = 0  # the tie term, sum of t^3 - t over values held t times, exact
        # like-for-like: the kept strata, the after run's weights, the before run's ranks
        kept = (cb[:count] >= MIN_COUNT) & (ca[:count] >= MIN_COUNT)
        self.kept = np.r_[kept, False]
        self.weight = np.r_[np.where(kept, cb[:count] / np.maximum(ca[:count], 1), 0.0), 0.0]
        self.kept_before = int(cb[:count][kept].sum())
        total_weight = float(self.kept_before)  # sum of weight x after count, exactly
        self.l4l_percentiles = tuple(sorted({*plan.percentiles, 50.0}))
        self.l4l_before = [
            _Window(*(2 * (inverted_cdf_index(self.kept_before, p / 100.0),)))
            for p in self.l4l_percentiles
        ]
        self.l4l_threshold = [p / 100.0 * total_weight * (1 - 1e-12) for p in self.l4l_percentiles]
        self.l4l_after: list[float | None] = [None for _ in self.l4l_percentiles]
        self.l4l_last = math.nan
        self.cum_weight = 0.0
        self.kept_done = 0

    def feed(self, chunk: Chunk) -> None:
        v, s, run, n = chunk
        count = self.count
        s_idx = np.where(s >= 0, s, count)
        for side in (0, 1):
            mask = run == side
            if not mask.any():
                continue
            vs, ns = v[mask], n[mask]
            cum = self.done[side] + np.cumsum(ns)
            for _, _, window in self.windows[side]:
                window.feed(vs, ns, cum, self.done[side])
            self.done[side] = int(cum[-1])
        totals = np.bincount(s_idx, weights=n, minlength=count + 1).astype(np.int64)
        for test in self.tests:
            test.feed(chunk, self.seen, self.seen_after, totals)
        after_n = n * run
        self.seen += totals
        self.seen_after += np.bincount(s_idx, weights=after_n, minlength=count + 1).astype(np.int64)
        # Mann–Whitney: ties are the rows of one value
        starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
        t = np.add.reduceat(n, starts)
        ta = np.add.reduceat(after_n, starts)
        first = self.pooled_done + np.cumsum(t) - t
        self.rank_sum2 += int((ta * (2 * first + t + 1)).sum())
        small = t[(t > 1) & (t < 2**20)]  # t^3 well inside int64
        self.ties += int((small**3 - small).sum()) + sum(x**3 - x for x in t[t >= 2**20].tolist())
        self.pooled_done += int(t.sum())
        if self.plan.matched:
            self._like_for_like(v, s_idx, run, n)

    def _like_for_like(self, v: F64, s_idx: I64, run: I64, n: I64) -> None:
        before = (run == 0) & self.kept[s_idx]
        if before.any():
            vb, nb = v[before], n[before]
            cum = self.kept_done + np.cumsum(nb)
            for w in self.l4l_before:
                w.feed(vb, nb, cum, self.kept_done)
            self.kept_done = int(cum[-1])
        after = (run == 1) & self.kept[s_idx]
        if not after.any():
            return
        va = v[after]
        cw = self.cum_weight + np.cumsum(n[after] * self.weight[s_idx[after]])
        for i, threshold in enumerate(self.l4l_threshold):
            if self.l4l_after[i] is None and cw[-1] >= threshold:
                self.l4l_after[i] = float(va[int(np.searchsorted(cw, threshold, side="left"))])
        self.cum_weight = float(cw[-1])
        self.l4l_last = float(va[-1])

    def window(self, side: int, kind: str, p: float) -> _Window:
        return next(w for k, x, w in self.windows[side] if k == kind and x == p)

    def tail_threshold(self, side: int) -> float:
        frac, w = next((x, w) for k, x, w in self.windows[side] if k == "tail")
        values = w.values
        if not len(values):
            return math.nan
        return float(values[0]) if len(values) == 1 else float(lerp(values[0], values[1], frac))

    def like_for_like(self, p: float) -> tuple[float, float]:
        """The after/before like-for-like ratio at ``p`` and the share of the before run its
        strata hold (as ``matching.like_for_like``)."""
        nb, na = self.plan.n
        if not nb or not na or not self.kept_before:
            return math.nan, 0.0
        i = self.l4l_percentiles.index(p)
        qb = self.l4l_before[i].value
        qa = self.l4l_after[i]
        qa = self.l4l_last if qa is None else qa
        return (qa / qb if qb > 0 else math.nan), self.kept_before / nb


def _stream(run: Run, expr: str, code: str) -> Iterator[Any]:
    sql = (
        f"SELECT {expr} AS v, {code} AS s FROM records WHERE ({run.where}) AND {OK} "
        f"AND {expr} IS NOT NULL ORDER BY 1"
    )
    return run.engine.batches(sql, CHUNK_ROWS)


def _metric_pass(before: Run, after: Run, expr: str, code: str, plan: _Plan) -> _Pass:
    out = _Pass(plan)
    if plan.n[0] and plan.n[1]:
        for chunk in merged(_stream(before, expr, code), _stream(after, expr, code)):
            out.feed(chunk)
    return out


def _comparison(
    name: str,
    done: _Pass,
    plan: _Plan,
    draws: int,
    confidence: float,
    rng: np.random.Generator,
) -> MetricComparison:
    """``statistics.compare_metric`` from a pass."""
    nb, na = plan.n
    if nb < 10 or na < 10:
        return MetricComparison(name, nb, na, (), math.nan, math.nan, "insufficient")
    bounds = ((1 - confidence) / 2, 1 - (1 - confidence) / 2)
    shifts = []
    for p in plan.percentiles:
        q = p / 100.0
        wa, wb = done.window(1, "boot", p), done.window(0, "boot", p)
        diff = bootstrap_quantiles(
            wa.values, q, draws, rng, n=na, first=wa.first
        ) - bootstrap_quantiles(wb.values, q, draws, rng, n=nb, first=wb.first)
        lo, hi = np.quantile(diff, list(bounds))
        pb, pa = done.window(0, "pct", p).value, done.window(1, "pct", p).value
        shifts.append(PercentileShift(p, pb, pa, float(lo), float(hi)))
    coverage = math.nan
    if plan.matched:
        pairs = [done.like_for_like(p) for p in plan.percentiles]
        coverage = pairs[0][1] if pairs else 0.0
        shifts = [replace(s, like_for_like=r) for s, (r, _) in zip(shifts, pairs, strict=True)]
    after_sizes = plan.strata[1][: done.count]
    p_values = [t.p_value(after_sizes) for t in done.tests]
    shifts = [replace(s, p_value=p) for s, p in zip(shifts, p_values, strict=True)]
    p_min = min((s.p_value for s in shifts if math.isfinite(s.p_value)), default=math.nan)
    p_metric = min(1.0, len(shifts) * p_min) if math.isfinite(p_min) else math.nan
    u1 = done.rank_sum2 / 2 - na * (na + 1) / 2
    u = max(u1, na * nb - u1)
    n = na + nb
    sd = math.sqrt(max(0.0, na * nb / 12 * ((n + 1) - done.ties / (n * (n - 1)))))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.float64(u - na * nb / 2 - 0.5) / np.float64(sd)
    mw_p = float(np.clip(2 * special.ndtr(-z), 0.0, 1.0))
    return MetricComparison(
        name,
        nb,
        na,
        tuple(shifts),
        mw_p,
        u1 / (na * nb),
        "unchanged",
        p_value=p_metric,
        coverage=coverage,
    )


# --- the rest: workload, strata, components, errors ---------------------------------------------


def _workload(
    before: Run, after: Run, ks_alpha: float, ks_min_statistic: float, rate_ratio: float
) -> tuple[WorkloadCheck, ...]:
    """``workload.workload_checks`` from value counts and aggregates."""
    checks = []
    for name, expr in (
        ("prompt_tokens", "prompt_tokens"),
        ("output_tokens", "output_tokens"),
        ("prefix_cache_share", _CACHE_SHARE),
    ):
        b, a = before.counts(expr, "TRUE"), after.counts(expr, "TRUE")
        if len(b[0]) and len(a[0]):
            checks.append(ks_counts(name, b, a, ks_alpha, ks_min_statistic))
    rates = []
    for run in (before, after):
        n, lo, hi = run.row("count(*), min(arrival_s), max(arrival_s)")
        span = float(hi) - float(lo) if lo is not None else 0.0
        rates.append(int(n) / span if span > 0 else math.nan)
    checks.append(rate_check(rates[0], rates[1], rate_ratio))
    return tuple(checks)


@dataclass(frozen=True, slots=True)
class _Strata:
    covariates: tuple[str, ...]
    code: str
    """Each request's stratum as SQL (``-1``: outside the common range)."""
    count: int
    coverage: float

    def describe(self) -> str:
        return describe_strata(self.count, self.covariates)


def _strata(before: Run, after: Run, covariates: Sequence[str]) -> _Strata | None:
    """``matching.make_strata`` in SQL: the common range and the edges from value counts."""
    ranges = []
    for name in covariates:
        expr = _COVARIATE_SQL[name]
        (vb, nb), (va, na) = before.counts(expr, OK), after.counts(expr, OK)
        if not len(vb) or not len(va):
            return None
        lo = max(
            float(weighted_quantile(vb, nb, TRIM)[0]), float(weighted_quantile(va, na, TRIM)[0])
        )
        hi = min(
            float(weighted_quantile(vb, nb, 1 - TRIM)[0]),
            float(weighted_quantile(va, na, 1 - TRIM)[0]),
        )
        if not lo < hi:
            return None
        ranges.append((expr, lo, hi))
    inside = " AND ".join(f"({e} >= {lo!r} AND {e} <= {hi!r})" for e, lo, hi in ranges)
    is_inside = f"sum(CASE WHEN {inside} THEN 1 ELSE 0 END)"
    inside_b, all_b = (int(x or 0) for x in before.row(f"{is_inside}, count(*)", OK))
    inside_a = int(after.row(is_inside, OK)[0] or 0)
    per_axis = strata_per_axis(inside_b + inside_a, len(ranges))
    code, count = "0", 1
    for expr, _, _ in ranges:
        (vb, nb), (va, na) = (
            before.counts(expr, f"{OK} AND {inside}"),
            after.counts(expr, f"{OK} AND {inside}"),
        )
        values, where = np.unique(np.r_[vb, va], return_inverse=True)
        counts = np.bincount(where, weights=np.r_[nb, na]).astype(np.int64)
        cuts = weighted_quantile(values, counts, np.linspace(0, 1, per_axis + 1)[1:-1])
        edges = np.unique(np.atleast_1d(cuts)) if per_axis > 1 else np.empty(0)
        rank = " + ".join(f"(CASE WHEN {expr} >= {e!r} THEN 1 ELSE 0 END)" for e in edges.tolist())
        code = f"({code}) * {len(edges) + 1} + {rank or '0'}"
        count *= len(edges) + 1
    return _Strata(
        tuple(covariates),
        f"CAST(CASE WHEN {inside} THEN {code} ELSE -1 END AS BIGINT)",
        count,
        inside_b / all_b if all_b else 0.0,
    )


def _components(
    before: Run, after: Run, tails: tuple[float, float] | None
) -> tuple[ComponentMove, ...]:
    """``components.component_moves`` from SQL means (the tail: each run's requests at or
    above its own e2e p99)."""
    exprs = [DERIVED.get(c, c) for c in COMPONENTS]
    select = ", ".join(f"avg({e})" for e in exprs)
    cohorts = [("all", before.row(select, OK), after.row(select, OK))]
    if tails is not None and all(math.isfinite(t) for t in tails):
        e2e = DERIVED["e2e_s"]
        cohorts.append(
            (
                "e2e p99 tail",
                before.row(select, f"{OK} AND {e2e} >= {tails[0]!r}"),
                after.row(select, f"{OK} AND {e2e} >= {tails[1]!r}"),
            )
        )
    return tuple(
        ComponentMove(c, cohort, _num(b[i]), _num(a[i]))
        for cohort, b, a in cohorts
        for i, c in enumerate(COMPONENTS)
    )


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _compare(
    before: Run,
    after: Run,
    *,
    percentiles: Sequence[float],
    alpha: float,
    min_effect: float,
    confidence: float,
    draws: int,
    seed: int,
    ks_alpha: float,
    ks_min_statistic: float,
    rate_ratio: float,
) -> CompareReport:
    """``run.compare_runs`` over two engines' records."""
    rows = [int(run.row("count(*)")[0]) for run in (before, after)]
    for label, n in zip(("before", "after"), rows, strict=True):
        if not n:
            raise AnalysisError(f"{label}: no usable records (need arrival_s and at least one row)")
    rng = np.random.default_rng(seed)
    checks = _workload(before, after, ks_alpha, ks_min_statistic, rate_ratio)
    covariates, unmatched = matching_covariates(checks)
    strata = _strata(before, after, covariates) if covariates else None
    if covariates and strata is None:
        unmatched = tuple(w.name for w in checks if w.differs)
    code = strata.code if strata is not None else "CAST(0 AS BIGINT)"
    count = strata.count if strata is not None else 1
    exprs = [DERIVED[m] for m in METRICS]
    per_stratum = []
    for run in (before, after):
        df = run.query(
            f"{code} AS s, " + ", ".join(f"count({e}) AS m{i}" for i, e in enumerate(exprs)),
            OK,
            "GROUP BY 1",
        )
        table = np.zeros((count + 1, len(exprs)), dtype=np.int64)
        s = df["s"].to_numpy(np.int64)
        table[np.where(s >= 0, s, count)] = df[[f"m{i}" for i in range(len(exprs))]].to_numpy(
            np.int64
        )
        per_stratum.append(table)
    n_ok = [int(x) for x in (before.row("count(*)", OK)[0], after.row("count(*)", OK)[0])]
    comps, matched, tails = [], [], None
    for i, (metric, expr) in enumerate(zip(METRICS, exprs, strict=True)):
        cb, ca = per_stratum[0][:, i], per_stratum[1][:, i]
        plan = _Plan(
            (int(cb.sum()), int(ca.sum())),
            (cb, ca),
            tuple(percentiles),
            strata is not None,
            metric == "e2e_s" and min(n_ok) >= 20,
        )
        done = _metric_pass(before, after, expr, code, plan)
        comps.append(_comparison(metric, done, plan, draws, confidence, rng))
        if strata is not None:
            matched.append((metric, *done.like_for_like(50.0)))
        if plan.tail:
            tails = (done.tail_threshold(0), done.tail_threshold(1))
    errors = []
    for run in (before, after):
        e, n = run.row("sum(CASE WHEN status = 'error' THEN 1 ELSE 0 END), count(*)")
        errors.append((int(e or 0), int(n)))
    return finish(
        comps,
        matched=matched,
        components=_components(before, after, tails),
        workload=checks,
        errors=error_rates_from_counts(*errors),
        strata=strata,
        unmatched=unmatched,
        alpha=alpha,
        min_effect=min_effect,
        confidence=confidence,
        draws=draws,
        seed=seed,
    )


def _models(engine: Engine) -> list[str]:
    return sorted(str(m) for m in engine.query(f"SELECT DISTINCT {MODEL} AS m FROM records")["m"])


def compare_in_engines(
    before: Engine,
    after: Engine,
    *,
    percentiles: Sequence[float] = (50.0, 90.0, 99.0),
    alpha: float = 0.01,
    min_effect: float = 0.05,
    confidence: float = 0.95,
    draws: int = 2000,
    seed: int = 0,
    ks_alpha: float = 0.001,
    ks_min_statistic: float = 0.1,
    rate_ratio: float = 1.2,
) -> CompareReport | ByModel[CompareReport]:
    """``run.compare_runs_by_model`` over two engines' ``records``: each model's before records
    against its after records, the one report when each run holds one model."""
    check_options(confidence, alpha, min_effect)
    for engine in (before, after):
        engine.share_memory(3)  # the two runs' sorts and this pass's arrays: one limit
    options: dict[str, Any] = {
        "percentiles": percentiles,
        "alpha": alpha,
        "min_effect": min_effect,
        "confidence": confidence,
        "draws": draws,
        "seed": seed,
        "ks_alpha": ks_alpha,
        "ks_min_statistic": ks_min_statistic,
        "rate_ratio": rate_ratio,
    }
    mb, ma = _models(before), _models(after)
    if not mb or not ma:
        label = "before" if not mb else "after"
        raise AnalysisError(f"{label}: no usable records (need arrival_s and at least one row)")
    if len(mb) == 1 and len(ma) == 1:
        return _compare(Run(before), Run(after), **options)
    notes = [
        f"model {m}: only in the {'before' if m in mb else 'after'} run, not compared"
        for m in sorted(set(mb) ^ set(ma))
    ]

    def one(m: str) -> CompareReport:
        where = f"{MODEL} = {sql_string(m)}"
        return _compare(Run(before, where), Run(after, where), **options)

    runs: list[tuple[str, Callable[[], CompareReport]]] = [
        (m, partial(one, m)) for m in sorted(set(mb) & set(ma))
    ]
    return gathered(runs, notes)
