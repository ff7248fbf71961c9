"""The tail's first pass in two streamed scans, where each file holds one replica (a compacted
dataset, ``Engine.by_file``): no grouping sets, no string read, and no fetch of the medians'
buckets.

The engine streams each completed request's keys as integers, its replica its file's number, and
they are counted here (``records.engine.counting.Tally``). The first scan counts the requests per replica,
per 2 % bucket of the target latency, per uncached prompt size and per 0.05 % bucket of each
per-token value (with the first arrival). Those counts bound the tail before it is known: its
requests are those of the threshold's buckets or above, so the body holds between ``n`` less
those and ``n`` less the ones above, and a body median's rank among all requests lies between
its rank in the body and that plus the tail's size. The per-token buckets holding that range of
ranks (the window, about as many requests as the tail) are known after the first scan.

The second scan brings only the requests of the threshold's buckets or above (their latency,
replica and per-token buckets) and those in a window (their per-token value): a few percent of
the rows, for a sixth to a quarter less CPU than every row with NULLs in their place. Then the
threshold is read from the latencies, each replica's tail counted, and each median is an order
statistic of the body's values in its window, exact (``numpy.quantile``). The plan is the one
``engine.plan_in_engine`` computes with three scans of grouping sets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.tail.cohorts import Target
from fleetwatch.fleet.tail.sql import FINE, UNCACHED, base, exprs, per_token
from fleetwatch.fleet.tail.sums import Plan, check_spread, counted_plan
from fleetwatch.records.engine.counting import Tally
from fleetwatch.records.engine.reductions import (
    RATIO,
    ZERO_BUCKET,
    bucket_sql,
    lerp,
    weighted_quantile,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FirstCounts", "first_counts", "streamed_plan"]

_BATCH = 1 << 18
"""Rows a streamed batch brings at least (but the last)."""
_HELD = 1 << 22
"""Most requests in or above the threshold's buckets, and in a window, whose latencies and
buckets or per-token values the second scan brings: more, and the plan is left to the
grouping sets' path (from the same first counts)."""

I64 = np.ndarray[Any, np.dtype[np.int64]]
F64 = np.ndarray[Any, np.dtype[np.float64]]


def _ranks(n: int, q: float) -> tuple[list[int], float]:
    """The order statistics ``numpy.quantile`` (linear) of ``n`` values at ``q`` reads, and
    the weight of the second."""
    h = (n - 1) * q
    lo = math.floor(h)
    return ([lo] if h == lo or lo + 1 >= n else [lo, lo + 1]), h - lo


def _quantile(sorted_values: F64, below: int, n: int, q: float) -> float | None:
    """``numpy.quantile`` ``q`` of ``n`` values of which ``sorted_values`` are those ranked from
    ``below``; None where a rank it reads is not among them."""
    ranks, t = _ranks(n, q)
    at = [k - below for k in ranks]
    if min(at) < 0 or max(at) >= len(sorted_values):
        return None
    found = [float(sorted_values[i]) for i in at]
    return found[0] if len(found) == 1 else float(lerp(found[0], found[1], t))


def _ints(col: Any) -> I64:
    """An Arrow column's values that are not NULL, as int64."""
    if col.null_count:
        col = col.drop_null()
    out: I64 = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return out


def _doubles(col: Any) -> F64:
    """An Arrow column as float64, NULL as NaN."""
    out: F64 = col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    return out


def _located(keys: I64, counts: I64, k: int) -> tuple[int, int]:
    """The index of the key (ascending ``keys``) holding rank ``k`` and the count below it."""
    upto = np.cumsum(counts)
    i = int(np.searchsorted(upto, k, side="right"))
    return i, int(upto[i - 1]) if i else 0


@dataclass(frozen=True, slots=True)
class FirstCounts:
    """The first scan's counts of one model's completed requests."""

    source: str
    """The records as a ``FROM`` item numbering each row's file (``Engine.by_file``)."""
    code: I64
    """Each file's replica, by file number: its position in ``names``."""
    names: list[str]
    """The replicas the files name, sorted."""
    requests: I64
    """Each replica's requests (by position in ``names``)."""
    origin: float
    """The first arrival."""
    counts: dict[str, tuple[I64, I64]]
    """Per key, its values ascending and the requests of each: ``b`` the target latency's 2 %
    bucket, ``u`` the uncached prompt tokens, ``pp`` (and for e2e ``po``) the per-token
    seconds' 0.05 % bucket."""

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """The counts as the grouping sets' path holds them: per replica (``replica``, ``n``,
        ``a0``), per latency bucket (``b``, ``n``) and per uncached size (``u``, ``n``)."""
        import pandas as pd

        seen = np.flatnonzero(self.requests)
        per = pd.DataFrame(
            {
                "replica": [self.names[i] for i in seen],
                "n": self.requests[seen],
                "a0": np.full(len(seen), self.origin),
            }
        )
        (b, b_n), (u, u_n) = self.counts["b"], self.counts["u"]
        return per, pd.DataFrame({"b": b, "n": b_n}), pd.DataFrame({"u": u, "n": u_n})


def first_counts(engine: Any, model: str, target: Target) -> FirstCounts | None:
    """The first scan, streamed: per replica, 2 % latency bucket, uncached size and 0.05 %
    per-token bucket, and the first arrival; None where the engine numbers no file's replica or
    streams no Arrow batches (the grouping sets' path then counts)."""
    if not hasattr(engine, "by_file") or not hasattr(engine, "arrow_batches"):
        return None
    coded = engine.by_file("replica")
    if coded is None:
        return None
    source, values = coded
    names = sorted({v for v in values if v is not None})
    index = {r: i for i, r in enumerate(names)}
    code = np.array([-1 if v is None else index[v] for v in values], dtype=np.int64)
    tokens = per_token(target)
    keys = {
        "b": bucket_sql("v_y"),
        "u": UNCACHED,
        **{k: bucket_sql(f"v_{k}", FINE) for k in tokens},
    }
    select = ", ".join(
        ["CAST(fw_file AS BIGINT)", *(f"CAST({sql} AS BIGINT) AS {k}" for k, sql in keys.items())]
    )
    tallies = {k: Tally() for k in keys}
    requests = np.zeros(len(names), dtype=np.int64)
    origin = math.inf
    rows = f"{select}, arrival_s FROM {_values(source, model, target)}"
    for batch in engine.arrow_batches(f"SELECT {rows}", _BATCH):
        if not batch.num_rows:
            continue
        cols = batch.columns
        mine = code[_ints(cols[0])]
        if int(mine.min()) < 0:  # every file of rows names its replica (``by_file``)
            raise AnalysisError("a request's file names no replica")
        requests += np.bincount(mine, minlength=len(names))
        for k, col in zip(keys, cols[1 : 1 + len(keys)], strict=True):
            got = _ints(col)
            if len(got):
                tallies[k].add([got])
        origin = min(origin, float(np.nanmin(_doubles(cols[-1]))))
    counts = {}
    for k, tally in tallies.items():
        (values_of,), n = tally.result(1)
        counts[k] = (values_of, n)
    return FirstCounts(source, code, names, requests, origin, counts)


def _values(source: str, model: str, target: Target) -> str:
    """A ``FROM`` item of the model's completed requests with their file, times, token counts,
    target latency (``v_y``) and per-token seconds (``v_pp``, ``v_po``)."""
    ex = exprs(target)
    taken = ", ".join(
        [f"{ex['y']} AS v_y", *(f"{sql} AS v_{k}" for k, sql in per_token(target).items())]
    )
    return (
        f"(SELECT fw_file, arrival_s, prompt_tokens, cached_prompt_tokens, {taken} "
        f"{base(model, source)}) AS v"
    )


def streamed_plan(
    engine: Any,
    first: FirstCounts,
    model: str,
    percentile: float,
    target: Target,
    long_prompt_quantile: float,
) -> tuple[Plan, dict[str, int]] | None:
    """``engine.plan_in_engine`` from the first scan's counts and a second streamed scan; None
    where the requests in or above the threshold's buckets, or those of a window, are more than
    ``_HELD``, or where the threshold's bucket is that of values at or below zero (the grouping
    sets' path then plans from the same first counts)."""
    tokens = per_token(target)
    n = int(first.requests.sum())
    u, u_n = first.counts["u"]
    q_long, q_mid = weighted_quantile(u, u_n, [long_prompt_quantile, 0.5])
    inner = _values(first.source, model, target)
    code = first.code

    # what the first scan's counts say of the tail and of the windows
    b, b_n = first.counts["b"]
    q = percentile / 100.0
    ranks, t = _ranks(n, q)
    at = [_located(b, b_n, k) for k in ranks]
    lowest, below = int(b[at[0][0]]), at[0][1]
    last = int(b[at[-1][0]])
    above = n - int(b_n[b <= last].sum())  # requests above the threshold's buckets
    if n - below > _HELD or lowest <= ZERO_BUCKET:
        return None  # (a threshold at or below zero: no edge keeps its bucket apart)
    least_body, most_body = below, n - above  # the body's size lies between them
    windows: dict[str, tuple[int, int, int]] = {}  # per token: its buckets, requests below
    for k in tokens:
        kb, kn = first.counts[k]
        lo_rank = _ranks(max(least_body, 1), 0.5)[0][0]
        hi_rank = min(n - 1, _ranks(most_body, 0.5)[0][-1] + (n - least_body))
        (i_lo, under), (i_hi, _) = _located(kb, kn, lo_rank), _located(kb, kn, hi_rank)
        inside = int(kn[i_lo : i_hi + 1].sum())
        if inside > _HELD:
            return None
        windows[k] = (int(kb[i_lo]), int(kb[i_hi]), under)

    # the second scan: the latency, replica and per-token buckets of the threshold's buckets
    # and above; each per-token value in its window
    high = f"v_b >= {lowest}"
    edge = RATIO**lowest * (1.0 - 1e-9)  # below it, a request's bucket is below ``lowest``
    cols = [
        f"CASE WHEN {high} THEN CAST(fw_file AS BIGINT) END AS r",
        f"CASE WHEN {high} THEN v_y END AS y",
        *(f"CASE WHEN {high} THEN {bucket_sql(f'v_{k}', FINE)} END AS {k}_b" for k in tokens),
    ]
    for k, (lo, hi, _) in windows.items():
        range_ = (
            f"v_{k} BETWEEN {FINE**lo * (1.0 - 1e-9)!r} AND {FINE ** (hi + 1) * (1.0 + 1e-9)!r}"
        )
        if lo <= ZERO_BUCKET:  # the window holds the bucket of values at or below zero
            range_ = f"v_{k} <= {FINE ** (hi + 1) * (1.0 + 1e-9)!r}"
        in_bucket = bucket_sql(f"v_{k}", FINE)
        cols.append(
            f"CASE WHEN {range_} THEN (CASE WHEN {in_bucket} BETWEEN {lo} AND {hi} THEN v_{k} END) "
            f"END AS {k}_w"
        )
    bucket = f"(CASE WHEN v_y >= {edge!r} THEN {bucket_sql('v_y')} ELSE {lowest - 1} END)"
    # only the rows of a value here: the body's requests out of every window bring nothing
    kept = " OR ".join(f"{c} IS NOT NULL" for c in ["r", *(f"{k}_w" for k in windows)])
    sql = (
        f"SELECT * FROM (SELECT {', '.join(cols)} FROM (SELECT *, {bucket} AS v_b FROM {inner}) "
        f"AS w) AS k WHERE {kept}"
    )
    parts: dict[str, list[Any]] = {"r": [], "y": [], **{f"{k}_b": [] for k in tokens}}
    body_w: dict[str, list[F64]] = {k: [] for k in tokens}  # window values of the body's
    high_w: dict[str, list[F64]] = {k: [] for k in tokens}  # and of the high requests
    for batch in engine.arrow_batches(sql, _BATCH):
        r = batch.column(0)
        mine = r.is_valid().to_numpy(zero_copy_only=False) if r.null_count else None
        some = mine is None or bool(mine.any())
        if some:
            pick = slice(None) if mine is None else mine
            parts["r"].append(code[_ints(r)])
            parts["y"].append(_doubles(batch.column(1))[pick])
            for i, k in enumerate(tokens):
                parts[f"{k}_b"].append(_doubles(batch.column(2 + i))[pick])
        for i, k in enumerate(tokens):
            col = batch.column(2 + len(tokens) + i)
            w = _doubles(col)
            if mine is None:
                high_w[k].append(w)
            else:
                if col.null_count < len(col):  # the body's values in the window only
                    body_w[k].append(w[~mine & ~np.isnan(w)])
                high_w[k].append(w[mine])
    r_high = np.concatenate(parts["r"]) if parts["r"] else np.zeros(0, np.int64)
    y_high = np.concatenate(parts["y"]) if parts["y"] else np.zeros(0)
    if len(y_high) != n - below:  # cannot be (the edge is below the bucket's least value):
        return None  # the grouping sets' path then plans

    # the threshold, read from the requests of its buckets (all others are above them)
    in_held = np.sort(y_high)[: n - below - above]
    found = [float(in_held[k - below]) for k in ranks]
    threshold = found[0] if len(found) == 1 else float(lerp(found[0], found[1], t))
    tail = y_high >= threshold
    n_tail = int(tail.sum())
    check_spread(n_tail, n, percentile, target)
    medians = {}
    for k, (lo, _, under) in windows.items():
        kb_high = np.concatenate(parts[f"{k}_b"])
        w_high = np.concatenate(high_w[k])
        w_body = np.concatenate([*body_w[k], w_high[~tail]])
        w_body = np.sort(w_body[~np.isnan(w_body)])
        below_body = under - int(np.count_nonzero(tail & (kb_high < lo)))
        value = _quantile(w_body, below_body, n - n_tail, 0.5)
        if value is None:  # cannot be (the window holds every rank the median may read)
            return None
        medians[k] = value
    names = first.names
    counts_all = first.requests.astype(np.float64)
    counts_tail = np.bincount(r_high[tail], minlength=len(names)).astype(np.float64)
    seen = np.flatnonzero(counts_all > 0)
    return counted_plan(
        target,
        percentile,
        threshold,
        (float(q_long), float(q_mid)),
        medians,
        ([names[i] for i in seen], counts_all[seen], counts_tail[seen]),
        first.origin,
    )
