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

Up to ``EXACT_ROWS`` ok requests a run, one query a run brings every metric's values and each
request's stratum (``_values``; about 60 bytes a request), and for each metric the two runs'
values are sorted together here (``ordered.sorted_chunks``); one pass takes each figure as its
rank goes by, ``ordered.CHUNK_ROWS`` values at a time, equal values never split between chunks.
One query a run costs less than one sorted query a metric and run: a fifth less CPU for the
whole command at 1.9 M requests a run, for about 190 MB more memory (720 MB peak). The report equals
``compare_runs``' on the same records, up to the last bits of float summation in means and weights
(``tests/fleet/test_compare_engine.py``).

Beyond that, sorting and merging every value costs far more than reading it (252 s of CPU for two
runs of 50 M requests, against 13.5 s for one query of their percentiles), so each run's values
become exact counts on fine fixed buckets: one scan a run counts every (metric, stratum,
``BUCKET_RATIO`` bucket) as grouping sets, plain GROUP BY counts that Spark computes (DuckDB
streams each row's stratum and buckets here, where they are counted: a third less CPU than its
hashing; the same counts, ``reductions.grouping_sets``), and the same pass reads the two
tables, each bucket one tied value at its geometric middle. Every figure comes from those counts: a percentile (and each bootstrap replicate) is within
``BUCKET_ERROR`` (0.025 %) of the records' own (a value of zero or less, which only a clock
step can make of a duration, is counted as 0); the quantile test, Mann–Whitney (a bucket's values
tied at their mid-rank), the like-for-like percentiles and the e2e tail threshold the component
means are taken above see the values to that resolution. The report states it
(``CompareReport.resolution``).

The scans: one of each run listing its models (``_models``); then for each model and run, two of
the tallies (``_tallies``: requests per outcome and each distinct token count, as grouping sets;
each distinct prefix-cache share), where the workloads differ those of the strata (``_strata``:
value counts of each covariate, and the requests inside their common range), on the bucketed
path one of the counts per (metric, stratum, bucket) (``_histograms``; on the exact path one
count per stratum and one sorted stream of each metric), and last one of the first and last
arrival and the components' means (``_last_scan``). The tallies come before the bucket counts,
which are counted per stratum: the strata are known only once the workloads' value counts are
compared. The means come after them: the e2e tail cohort is the requests at or above the
threshold the pass over e2e finds, which may fall inside a bucket, so its sums are not a bucket's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from fleetwatch.fleet.by_model import ByModel, gathered
from fleetwatch.fleet.compare import ordered
from fleetwatch.fleet.compare.components import COMPONENTS, ComponentMove
from fleetwatch.fleet.compare.matching import (
    I64,
    TRIM,
    describe_strata,
    strata_per_axis,
)
from fleetwatch.fleet.compare.ordered import Pass, Plan, metric_comparison
from fleetwatch.fleet.compare.report import CompareReport
from fleetwatch.fleet.compare.run import METRICS, check_options, finish
from fleetwatch.fleet.compare.shape import ShapeCounts, shape_from_tallies
from fleetwatch.fleet.compare.statistics import (
    F64,
)
from fleetwatch.fleet.compare.workload import (
    WorkloadCheck,
    ks_counts,
    matching_covariates,
    rate_check,
)
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.records.engine import Engine
from fleetwatch.records.engine.folded import models
from fleetwatch.records.engine.reductions import (
    DERIVED,
    bucket_sql,
    bucket_values,
    grouping_sets,
    model_is,
    weighted_quantile,
)

__all__ = ["BUCKET_ERROR", "BUCKET_RATIO", "EXACT_ROWS", "NEEDS", "compare_in_engines"]

EXACT_ROWS = 2_000_000
"""Ok requests a run up to which the figures are exact (values sorted and merged); beyond, they
come from counts on ``BUCKET_RATIO`` buckets."""
BUCKET_RATIO = 1.0005
"""Each bucket's upper edge over its lower edge on the bucketed path (0.05 % wide)."""
BUCKET_ERROR = math.sqrt(BUCKET_RATIO) - 1.0
"""The most a bucket's middle is off any value in it, relatively (0.025 %)."""

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
    "finish_reason",
    "error_type",
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


def _ascending(v: F64, n: I64) -> tuple[F64, I64]:
    """Distinct values and their counts, as grouped by an engine, in ascending order, the group
    of NULL (read back as NaN: the values counted are integers and their quotients by a positive
    integer, never NaN) left out."""
    keep = ~np.isnan(v)
    order = np.argsort(v[keep])  # distinct values: no ties to keep in order
    return v[keep][order], n[keep][order]


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
        """The distinct values of ``expr`` (a number that is never NaN) over the rows ``cond``
        keeps, ascending, and the count of each (NULL left out)."""
        df = self.query(f"{expr} AS v, count(*) AS n", cond, "GROUP BY 1")
        return _ascending(df["v"].to_numpy(np.float64), df["n"].to_numpy(np.int64))


@dataclass(frozen=True, slots=True)
class _Tallies:
    """One run's counts: its requests per status, empty ok outputs, the output shape's outcome
    tallies and the workload's value counts (distinct values ascending, and the count of each)."""

    statuses: dict[str, int]
    empty: int
    tallies: dict[str, dict[str, int]]
    values: dict[str, tuple[F64, I64]]

    @property
    def rows(self) -> int:
        return sum(self.statuses.values())

    @property
    def ok(self) -> int:
        return self.statuses.get("ok", 0)

    @property
    def errors(self) -> int:
        return self.statuses.get("error", 0)


_OUTCOME_KEYS = {
    "st": "status",
    "z": f"coalesce({OK} AND output_tokens = 0, FALSE)",
    "fr": f"CASE WHEN {OK} THEN finish_reason END",
    "et": "CASE WHEN status = 'error' THEN error_type END",
}
"""A request's outcome: its status (the view reads a missing status as ok), whether it is an
ok request with an empty output, the finish reason of an ok request and the error type of an
errored one; every tally ``_Tallies`` holds is a sum of counts of these."""
_TOKENS = {
    "prompt_tokens": "CAST(prompt_tokens AS DOUBLE)",
    "output_tokens": "CAST(output_tokens AS DOUBLE)",
}
"""The workload checks' token counts, over all requests (integers: at most the context length's
values each)."""


def _tallies(run: Run) -> _Tallies:
    """``_Tallies`` of a run, in two scans: one counting the requests by outcome
    (``_OUTCOME_KEYS``, a handful of groups) and by each token count, as grouping sets (plain
    counts, which DuckDB takes with less CPU than a ``histogram`` of each tally, and Spark
    alike); and the prefix-cache share's value counts apart (a value for each distinct pair of
    prompt and cached tokens: millions in a large run, whose rows as one more grouping set would
    carry every other key's column too, the outcomes' strings among them)."""
    keys = {**_OUTCOME_KEYS, **{f"v{i}": sql for i, sql in enumerate(_TOKENS.values())}}
    names = list(keys)
    sets = [list(_OUTCOME_KEYS), *([k] for k in names[len(_OUTCOME_KEYS) :])]
    tables = grouping_sets(
        run.engine, f"FROM records WHERE {run.where}", keys, sets, nulls=True
    )  # an outcome's NULL is a value: an ok request has no error type
    counted: dict[str, dict[str, int]] = {
        o: {} for o in ("all", "finish_reason", "error_type", "status")
    }
    empty = 0
    for st, z, fr, et, n in tables[0].itertuples(index=False):
        n = int(n)
        for name, key in (("all", st), ("finish_reason", fr), ("error_type", et)):
            if not _missing(key):
                counted[name][str(key)] = counted[name].get(str(key), 0) + n
        if not _missing(st) and st not in ("ok", "error"):
            counted["status"][str(st)] = counted["status"].get(str(st), 0) + n
        if not _missing(z) and bool(z):
            empty += n
    values = {}
    for name, key, t in zip(_TOKENS, names[len(_OUTCOME_KEYS) :], tables[1:], strict=True):
        values[name] = _ascending(t[key].to_numpy(np.float64), t["n"].to_numpy(np.int64))
    values["prefix_cache_share"] = run.counts(_CACHE_SHARE, "TRUE")
    tallies = {name: dict(sorted(c.items())) for name, c in counted.items()}
    return _Tallies(tallies.pop("all"), empty, tallies, values)


def _shape(t: _Tallies) -> ShapeCounts:
    """``shape.shape_counts`` from counts grouped in the engine."""
    return shape_from_tallies(
        t.tallies["finish_reason"],
        t.empty,
        t.ok,
        t.tallies["error_type"],
        t.rows,
        t.tallies["status"],
    )


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _values(run: Run, exprs: Sequence[str], code: str) -> tuple[list[F64], I64]:
    """Each metric's value over the run's ok requests (NaN where it is NULL: the view's
    durations are never NaN, ``records.engine.implausible``) and each request's stratum, in one
    query: the exact path's runs hold at most ``EXACT_ROWS`` requests."""
    picked = ", ".join(f"{e} AS v{i}" for i, e in enumerate(exprs))
    df = run.query(f"{picked}, {code} AS s", OK)
    return [df[f"v{i}"].to_numpy(np.float64) for i in range(len(exprs))], df["s"].to_numpy(np.int64)


def _counted(values: list[F64], s: I64, count: int) -> I64:
    """Each metric's values (``_values``) per stratum (rows, outside the strata last)."""
    at = np.where(s >= 0, s, count)
    return np.stack(
        [np.bincount(at[~np.isnan(v)], minlength=count + 1) for v in values], axis=1
    ).astype(np.int64)


def _metric_pass(before: tuple[F64, I64], after: tuple[F64, I64], plan: Plan) -> Pass:
    """The pass over one metric's values of the two runs (``_values``), sorted here."""
    out = Pass(plan)
    if plan.n[0] and plan.n[1]:
        for chunk in ordered.sorted_chunks(before, after):
            out.feed(chunk)
    return out


Histogram = tuple[I64, I64, I64]
"""One metric's counts in one run: bucket (``bucket_sql`` at ``BUCKET_RATIO``), stratum, count."""


def _histograms(run: Run, exprs: Sequence[str], code: str) -> list[Histogram]:
    """Each metric's counts per (stratum, bucket) over the run's ok requests, in one scan. Each
    metric's value is taken once a row, in a subquery, and its bucket from that column (the value
    written three times into its bucket's ``CASE`` cost DuckDB 3 % more CPU over 37 M rows)."""
    values = ", ".join(f"{e} AS x{i}" for i, e in enumerate(exprs))
    keys = {"s": code, **{f"b{i}": bucket_sql(f"x{i}", BUCKET_RATIO) for i in range(len(exprs))}}
    tables = grouping_sets(
        run.engine,
        f"FROM (SELECT *, {values} FROM records WHERE ({run.where}) AND {OK}) AS u",
        keys,
        [("s", f"b{i}") for i in range(len(exprs))],
        integers=True,
    )
    return [
        (
            t[f"b{i}"].to_numpy(np.int64),
            t["s"].to_numpy(np.int64),
            t["n"].to_numpy(np.int64),
        )
        for i, t in enumerate(tables)
    ]


def _per_stratum(hists: Sequence[Histogram], count: int) -> I64:
    """Values per stratum (rows) and metric (columns), outside the strata last."""
    table = np.zeros((count + 1, len(hists)), dtype=np.int64)
    for i, (_, s, n) in enumerate(hists):
        table[:, i] = np.bincount(np.where(s >= 0, s, count), weights=n, minlength=count + 1)
    return table


def _bucket_pass(before: Histogram, after: Histogram, plan: Plan) -> Pass:
    """The pass over two runs' bucket counts: each bucket one value, its middle, held as often
    as the bucket counts."""
    out = Pass(plan)
    if plan.n[0] and plan.n[1]:
        b = np.r_[before[0], after[0]]
        order = np.argsort(b, kind="stable")
        run = np.r_[np.zeros(len(before[0]), np.int64), np.ones(len(after[0]), np.int64)]
        out.feed(
            (
                bucket_values(b[order], BUCKET_RATIO),
                np.r_[before[1], after[1]][order],
                run[order],
                np.r_[before[2], after[2]][order],
            )
        )
    return out


def _workload(
    before: _Tallies, after: _Tallies, ks_alpha: float, ks_min_statistic: float
) -> tuple[WorkloadCheck, ...]:
    """``workload.workload_checks``' distributions, from value counts."""
    checks = []
    for name in before.values:
        b, a = before.values[name], after.values[name]
        if len(b[0]) and len(a[0]):
            checks.append(ks_counts(name, b, a, ks_alpha, ks_min_statistic))
    return tuple(checks)


def _rate(rows: int, first: Any, last: Any) -> float:
    """Requests a second between the first and last arrival (``workload`` ``_rate``)."""
    span = float(last) - float(first) if first is not None and last is not None else 0.0
    return rows / span if span > 0 else math.nan


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


def _last_scan(
    run: Run, tail: float | None
) -> tuple[tuple[Any, Any], tuple[float, ...], tuple[float, ...] | None]:
    """One scan of a run: its first and last arrival, each component's mean over its ok
    requests and, given its e2e tail threshold, over its ok requests at or above it."""
    exprs = [DERIVED.get(c, c) for c in COMPONENTS]
    cohorts = [OK]
    if tail is not None:
        cohorts.append(f"{OK} AND {DERIVED['e2e_s']} >= {tail!r}")
    means = ", ".join(f"avg(CASE WHEN {c} THEN {e} END)" for c in cohorts for e in exprs)
    first, last, *got = run.row(f"min(arrival_s), max(arrival_s), {means}")
    values = tuple(_num(x) for x in got)
    k = len(exprs)
    return (first, last), values[:k], (values[k:] if tail is not None else None)


def _components(
    means: tuple[tuple[float, ...], tuple[float, ...]],
    tails: tuple[tuple[float, ...] | None, tuple[float, ...] | None],
) -> tuple[ComponentMove, ...]:
    """``components.component_moves`` from SQL means (``means``: each run's over its ok
    requests; ``tails``: over each run's requests at or above its own e2e p99, when taken)."""
    cohorts = [("all", means[0], means[1])]
    if tails[0] is not None and tails[1] is not None:
        cohorts.append(("e2e p99 tail", tails[0], tails[1]))
    return tuple(
        ComponentMove(c, cohort, b[i], a[i])
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
    exact_rows: int,
) -> CompareReport:
    """``run.compare_runs`` over two engines' records (from bucket counts when either run holds
    more than ``exact_rows`` ok requests)."""
    tallies = (_tallies(before), _tallies(after))
    for label, t in zip(("before", "after"), tallies, strict=True):
        if not t.rows:
            raise AnalysisError(f"{label}: no usable records (need arrival_s and at least one row)")
    rng = np.random.default_rng(seed)
    sizes = _workload(*tallies, ks_alpha, ks_min_statistic)
    covariates, _ = matching_covariates(sizes)
    strata = _strata(before, after, covariates) if covariates else None
    code = strata.code if strata is not None else "CAST(0 AS BIGINT)"
    count = strata.count if strata is not None else 1
    exprs = [DERIVED[m] for m in METRICS]
    n_ok = [t.ok for t in tallies]
    hists = (
        [_histograms(run, exprs, code) for run in (before, after)]
        if max(n_ok) > exact_rows
        else None
    )
    if hists is not None:
        per_stratum = [_per_stratum(h, count) for h in hists]
    else:
        (vb, sb), (va, sa) = (_values(run, exprs, code) for run in (before, after))
        per_stratum = [_counted(vb, sb, count), _counted(va, sa, count)]
    comps, matched, tails = [], [], None
    for i, metric in enumerate(METRICS):
        cb, ca = per_stratum[0][:, i], per_stratum[1][:, i]
        plan = Plan(
            (int(cb.sum()), int(ca.sum())),
            (cb, ca),
            tuple(percentiles),
            strata is not None,
            metric == "e2e_s" and min(n_ok) >= 20,
        )
        done = (
            _bucket_pass(hists[0][i], hists[1][i], plan)
            if hists is not None
            else _metric_pass((vb[i], sb), (va[i], sa), plan)
        )
        comps.append(metric_comparison(metric, done, plan, draws, confidence, rng))
        if strata is not None:
            matched.append((metric, *done.like_for_like(50.0)))
        if plan.tail:
            tails = (done.tail_threshold(0), done.tail_threshold(1))
    scans = [
        _last_scan(run, tails[i] if tails is not None and all(map(math.isfinite, tails)) else None)
        for i, run in enumerate((before, after))
    ]
    rates = [_rate(t.rows, *arrivals) for t, (arrivals, _, _) in zip(tallies, scans, strict=True)]
    checks = (*sizes, rate_check(rates[0], rates[1], rate_ratio))
    covariates, unmatched = matching_covariates(checks)
    if covariates and strata is None:
        unmatched = tuple(w.name for w in checks if w.differs)
    return finish(
        comps,
        matched=matched,
        components=_components((scans[0][1], scans[1][1]), (scans[0][2], scans[1][2])),
        workload=checks,
        errors=((tallies[0].errors, tallies[0].rows), (tallies[1].errors, tallies[1].rows)),
        shape=(_shape(tallies[0]), _shape(tallies[1])),
        strata=strata,
        unmatched=unmatched,
        alpha=alpha,
        min_effect=min_effect,
        confidence=confidence,
        draws=draws,
        seed=seed,
        resolution=BUCKET_RATIO if hists is not None else None,
    )


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
    exact_rows: int = EXACT_ROWS,
) -> CompareReport | ByModel[CompareReport]:
    """``run.compare_runs_by_model`` over two engines' ``records``: each model's before records
    against its after records, the one report when each run holds one model; a model with more
    than ``exact_rows`` ok requests in either run is compared from bucket counts (the module's
    docstring)."""
    check_options(confidence, alpha, min_effect)
    for engine in (before, after):
        engine.share_memory(3)  # the two runs' engines and this pass's arrays: one limit
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
        "exact_rows": exact_rows,
    }
    mb, ma = models(before), models(after)
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
        where = model_is(m)
        return _compare(Run(before, where), Run(after, where), **options)

    runs: list[tuple[str, Callable[[], CompareReport]]] = [
        (m, partial(one, m)) for m in sorted(set(mb) & set(ma))
    ]
    return gathered(runs, notes)
