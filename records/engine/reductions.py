"""Portable reductions: SQL both engines run the same way, and the arithmetic on their results.

Only exact aggregates are pushed into an engine: counts, sums, minima and maxima, grouped by keys
that include fixed histogram buckets. A latency's bucket is ``floor(ln(v) / ln(RATIO))``: buckets
``RATIO`` wide (2 %), each read back at its geometric middle, so any quantile computed from the
counts is within ``RELATIVE_ERROR`` (1 %) of the sample's own, whatever the rows. The constant
``ln(RATIO)`` is written out as a literal so no engine computes it its own way; a value at or below
zero goes to ``ZERO_BUCKET`` and reads back as 0.

``weighted_quantile`` is ``numpy.quantile``'s default (linear) method over values given with
counts, equal to it on the expanded sample, without expanding it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fleetwatch.records.engine.counting import ZERO_BUCKET, counted

__all__ = [
    "DERIVED",
    "MODEL",
    "RATIO",
    "RELATIVE_ERROR",
    "UNNAMED",
    "ZERO_BUCKET",
    "bucket_sql",
    "bucket_values",
    "exact_quantile",
    "exact_quantiles",
    "grouping_sets",
    "model_is",
    "order_statistics",
    "order_statistics_of",
    "weighted_quantile",
]

RATIO = 1.02
"""Each histogram bucket's upper edge over its lower edge."""
RELATIVE_ERROR = math.sqrt(RATIO) - 1.0
"""The most a bucket's middle is off any value in it, relatively (0.995 %)."""
_LN_RATIO = repr(math.log(RATIO))
UNNAMED = "(no model)"
"""The model of records that name none (as ``fleet.by_model.UNNAMED``)."""
MODEL = f"coalesce(model, '{UNNAMED}')"
"""The model a record counts under."""

DERIVED: dict[str, str] = {
    "queue_s": "(scheduled_s - arrival_s)",
    "prefill_s": "(first_token_s - scheduled_s)",
    "decode_s": "(finished_s - first_token_s)",
    "ttft_s": "(first_token_s - arrival_s)",
    "e2e_s": "(finished_s - arrival_s)",
    "tpot_s": (
        "(CASE WHEN output_tokens >= 2 THEN (finished_s - first_token_s) "
        "/ CAST(output_tokens - 1 AS DOUBLE) END)"
    ),
}
"""The derived durations as SQL over the ``records`` view (as ``records.io.add_derived``)."""


def bucket_sql(expr: str, ratio: float = RATIO) -> str:
    """The histogram bucket of the value of ``expr`` (NULL stays NULL), buckets ``ratio`` wide."""
    ln_ratio = _LN_RATIO if ratio == RATIO else repr(math.log(ratio))
    return (
        f"(CASE WHEN {expr} > 0 THEN CAST(floor(ln({expr}) / {ln_ratio}) AS BIGINT) "
        f"WHEN {expr} IS NOT NULL THEN {ZERO_BUCKET} END)"
    )


def bucket_values(buckets: Any, ratio: float = RATIO) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Each bucket's value read back, buckets ``ratio`` wide (``bucket_sql(expr, ratio)``): its
    geometric middle, within ``sqrt(ratio) - 1`` of any value in it (0 for ``ZERO_BUCKET``)."""
    b = np.asarray(buckets, dtype=np.float64)
    out: np.ndarray[Any, np.dtype[np.float64]] = np.where(
        b == ZERO_BUCKET, 0.0, np.power(ratio, b + 0.5)
    )
    return out


def grouping_sets(
    engine: Any,
    source: str,
    keys: dict[str, str],
    sets: Sequence[Sequence[str]],
    *,
    nulls: bool = False,
    integers: bool = False,
) -> list[Any]:
    """One scan of ``source`` (``FROM … WHERE …``) counted by each of ``sets`` (tuples of names
    of ``keys``: name -> SQL) as grouping sets: per set a frame of its keys and ``n``, the rows
    whose keys are all non-NULL (a NULL key leaves a row out of that set's counts), or with
    ``nulls`` every row (NULL a value of its own). ``integers``: every key is ``BIGINT`` SQL
    (bucket numbers, codes), so an engine streaming Arrow batches (DuckDB) has the keys counted
    here (``counted``), each set's rows sorted by its keys."""
    names = list(keys)
    if sets and integers and not nulls and hasattr(engine, "arrow_batches"):
        return counted(engine, source, keys, sets)
    if sets and not nulls and getattr(engine, "name", "") == "duckdb":
        common = [k for k in names if all(k in s for s in sets) and k != sets[0][-1]]
        alone = [[k for k in s if k not in common] for s in sets]
        if all(len(a) == 1 for a in alone) and len({a[0] for a in alone}) == len(sets):
            return _histograms(engine, source, keys, common, [a[0] for a in alone], sets)
    got = engine.query(
        f"SELECT {', '.join(names)}, grouping_id({', '.join(names)}) AS g, count(*) AS n "
        "FROM (SELECT "
        + ", ".join(f"{sql} AS {k}" for k, sql in keys.items())
        + f" {source}) AS t GROUP BY GROUPING SETS ("
        + ", ".join("(" + ", ".join(s) + ")" for s in sets)
        + ")"
    )
    g = got["g"].to_numpy(np.int64)
    out = []
    for s in sets:
        # a set's rows: the bits of the keys it groups by clear, the first key's bit highest
        mark = sum(1 << (len(names) - 1 - i) for i, k in enumerate(names) if k not in s)
        keep = g == mark
        for k in s if not nulls else ():
            keep &= got[k].notna().to_numpy()
        out.append(got.loc[keep, [*s, "n"]].reset_index(drop=True))
    return out


def _histograms(
    engine: Any,
    source: str,
    keys: dict[str, str],
    common: Sequence[str],
    alone: Sequence[str],
    sets: Sequence[Sequence[str]],
) -> list[Any]:
    """``grouping_sets`` where each set is the ``common`` keys and one key of its own, in
    DuckDB: one ``GROUP BY`` of the common keys with a ``histogram`` of each set's own key (a
    quarter less CPU than grouping sets over 37 M rows and six keys); the same exact counts, each
    set's rows sorted by its keys."""
    import pandas as pd

    inner = ", ".join(f"{sql} AS {k}" for k, sql in keys.items())
    hists = ", ".join(f"histogram({k}) AS h_{k}" for k in alone)
    group = f" GROUP BY {', '.join(common)}" if common else ""
    got = engine.query(
        f"SELECT {', '.join([*common, hists])} FROM (SELECT {inner} {source}) AS t{group}"
    )
    if common:
        got = got[got[list(common)].notna().all(axis=1)]
    out = []
    for s, k in zip(sets, alone, strict=True):
        cols: dict[str, list[Any]] = {c: [] for c in (*common, k, "n")}
        for row in got.itertuples(index=False):
            found = getattr(row, f"h_{k}")
            if not isinstance(found, dict) or not found:
                continue
            keep = [v for v in found if v == v]  # a NaN key is left out, as GROUP BY's notna
            if not keep:
                continue
            for c in common:
                cols[c].extend([getattr(row, c)] * len(keep))
            cols[k].extend(keep)
            cols["n"].extend(int(found[v]) for v in keep)
        frame = pd.DataFrame(cols).astype({"n": np.int64})
        frame = frame.sort_values([*common, k], kind="stable").reset_index(drop=True)
        out.append(frame[[*s, "n"]])
    return out


def weighted_quantile(values: Any, counts: Any, q: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """``numpy.quantile(np.repeat(values, counts), q)`` (linear interpolation) without the
    repeat; NaN for an empty sample."""
    v = np.asarray(values, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    keep = c > 0
    v, c = v[keep], c[keep]
    if not len(v):
        return np.full(qs.shape, np.nan)
    order = np.argsort(v, kind="stable")
    v, c = v[order], c[order]
    upto = np.cumsum(c)  # rows 0 .. upto[i]-1 hold values[0..i]
    n = upto[-1]
    h = (n - 1.0) * qs
    lo = np.floor(h)
    i_lo = np.searchsorted(upto, lo, side="right")
    i_hi = np.searchsorted(upto, np.minimum(lo + 1.0, n - 1.0), side="right")
    out: np.ndarray[Any, np.dtype[np.float64]] = lerp(v[i_lo], v[i_hi], h - lo)
    return out


def lerp(a: Any, b: Any, t: Any) -> Any:
    """``a + t (b - a)`` as numpy's quantiles compute it (from ``b`` when ``t >= 0.5``), so a
    quantile from counts is numpy's to the bit."""
    diff = np.subtract(b, a)
    return np.where(np.asarray(t) >= 0.5, np.subtract(b, diff * (1 - np.asarray(t))), a + diff * t)


_FETCH_LIMIT = 1 << 21
"""Most values an order statistic fetches (16 MB of doubles): a range holding more is
narrowed first."""
_SPLITS = 64


def model_is(name: str) -> str:
    """SQL true of the records counted under model ``name`` (``MODEL = name``), written on the
    stored column where it can be, so an engine skips the files and row groups of other
    models by their statistics."""
    from fleetwatch.records.filters import sql_string

    if name == UNNAMED:
        return f"({MODEL} = {sql_string(name)})"
    return f"(model = {sql_string(name)})"


def order_statistics(
    engine: Any,
    expr: str,
    source: str,
    ranks: Any,
    *,
    hist: Any = None,
    ratio: float = RATIO,
) -> list[float]:
    """The ``k``-th smallest (from 0) values of ``expr`` over ``source`` (``FROM … WHERE …``,
    the rows the value is taken over; NULL values are left out) for each ``k`` of ``ranks``,
    exact: one histogram of 2 % buckets finds the bucket holding each rank, a range holding
    more than ``_FETCH_LIMIT`` values is cut into ``_SPLITS`` equal parts until one does not,
    and each range's values are fetched once (ranks in one range share it). Memory: a
    histogram and at most ``_FETCH_LIMIT`` values, whatever the rows.

    ``hist`` is that histogram when a caller has it (columns ``b``, ``n``: counts of
    ``bucket_sql(expr, ratio)`` over the same rows, from a query of its own that took other
    tables in the same scan); buckets finer than 2 % (``ratio``) leave fewer values to a bucket,
    so a rank's range is fetched without narrowing. Each query takes ``expr`` once a row, in a
    subquery, and tests the ranges on that column."""
    return order_statistics_of(engine, source, [(expr, ranks, hist, ratio)])[0]


def order_statistics_of(
    engine: Any, source: str, items: Sequence[tuple[str, Any, Any, float]]
) -> list[list[float]]:
    """``order_statistics`` of several values over the same rows (``items``: each value's
    ``expr``, ``ranks``, ``hist`` or None, ``ratio``), their ranges' values fetched in one
    scan."""
    located = [
        _locate(engine, expr, source, ranks, hist, ratio, f"x{i}")
        for i, (expr, ranks, hist, ratio) in enumerate(items)
    ]
    ranges = [
        dict.fromkeys(rng for rng, _ in spots.values() if rng is not None) for spots in located
    ]
    columns = [(i, rng) for i in range(len(items)) for rng in ranges[i]]
    fetched: dict[tuple[int, str], np.ndarray[Any, np.dtype[np.float64]]] = {}
    if columns:
        select = ", ".join(
            f"CASE WHEN {rng} THEN x{i} END AS v{j}" for j, (i, rng) in enumerate(columns)
        )
        anywhere = " OR ".join(f"({rng})" for _, rng in columns)
        taken = ", ".join(f"{expr} AS x{i}" for i, (expr, *_) in enumerate(items))
        got = engine.query(f"SELECT {select} FROM (SELECT {taken} {source}) AS t WHERE {anywhere}")
        for j, (i, rng) in enumerate(columns):
            v = got[f"v{j}"].to_numpy(np.float64)
            fetched[(i, rng)] = np.sort(v[~np.isnan(v)])
    out = []
    for i, spots in enumerate(located):
        values = []
        for k in items[i][1]:
            where, at = spots[int(k)]
            values.append(at if where is None else float(fetched[(i, where)][int(at)]))
        out.append(values)
    return out


def _in_bucket(expr: str, bucket: str, b: int, ratio: float) -> str:
    """SQL true of the rows whose value of ``expr`` is in bucket ``b``: a range a little wider
    than the bucket's edges first (cheap, and false of nearly every row), then the bucket's own
    expression, so the logarithm is taken of the few rows in range only."""
    if b == ZERO_BUCKET:
        return f"({expr} <= 0.0 AND {bucket} = {b})"
    lo, hi = ratio**b * (1.0 - 1e-9), ratio ** (b + 1) * (1.0 + 1e-9)
    return f"({expr} BETWEEN {lo!r} AND {hi!r} AND {bucket} = {b})"


def _locate(
    engine: Any, expr: str, source: str, ranks: Any, hist: Any, ratio: float, name: str
) -> dict[int, tuple[str | None, float]]:
    """Per wanted rank: the SQL range holding it (over ``name``, the column ``expr`` is taken
    as) and its position in that range's sorted values, or (None, the value) when the range
    holds one value only."""
    where = f"FROM (SELECT {expr} AS {name} {source}) AS t WHERE {name} IS NOT NULL"
    bucket = bucket_sql(name, ratio)
    if hist is None:
        hist = engine.query(f"SELECT {bucket} AS b, count(*) AS n {where} GROUP BY 1")
    hist = hist.sort_values("b")
    upto = np.cumsum(hist["n"].to_numpy(dtype=np.int64))
    total = int(upto[-1]) if len(upto) else 0
    wanted = [int(k) for k in ranks]
    for k in wanted:
        if k >= total or k < 0:
            raise ValueError(f"rank {k} of {total} values")
    found: dict[int, tuple[str | None, float]] = {}
    for k in wanted:
        if k in found:
            continue
        i = int(np.searchsorted(upto, k, side="right"))
        below = int(upto[i - 1]) if i else 0
        rng = _in_bucket(name, bucket, int(hist["b"].iloc[i]), ratio)
        count = int(hist["n"].iloc[i])
        value: float | None = None
        while count > _FETCH_LIMIT:
            lo, hi = (
                float(x)
                for x in engine.query(
                    f"SELECT min({name}) AS lo, max({name}) AS hi {where} AND {rng}"
                )
                .iloc[0]
                .tolist()
            )
            if lo == hi:
                value = lo
                break
            step = (hi - lo) / _SPLITS
            part = f"least(CAST(floor(({name} - {lo!r}) / {step!r}) AS BIGINT), {_SPLITS - 1})"
            sub = engine.query(
                f"SELECT {part} AS p, count(*) AS n {where} AND {rng} GROUP BY 1"
            ).sort_values("p")
            cum = below + np.cumsum(sub["n"].to_numpy(dtype=np.int64))
            j = int(np.searchsorted(cum, k, side="right"))
            below = int(cum[j - 1]) if j else below
            rng = f"{rng} AND {part} = {int(sub['p'].iloc[j])}"
            count = int(sub["n"].iloc[j])
        if value is not None:
            found[k] = (None, value)
            continue
        for other in wanted:  # every wanted rank this range holds
            if below <= other < below + count and other not in found:
                found[other] = (rng, float(other - below))
    return found


def exact_quantile(
    engine: Any,
    expr: str,
    source: str,
    q: float,
    n: int,
    *,
    hist: Any = None,
    ratio: float = RATIO,
) -> float:
    """``numpy.quantile`` (linear) of ``expr`` over the ``n`` rows of ``source`` that hold a
    value, exact, from its two neighbouring order statistics (``order_statistics``: one
    histogram, and one fetch when they share a range, as they nearly always do)."""
    return exact_quantiles(engine, source, [(expr, q, n, hist, ratio)])[0]


def exact_quantiles(
    engine: Any, source: str, items: Sequence[tuple[str, float, int, Any, float]]
) -> list[float]:
    """``exact_quantile`` of several values over the same rows of ``source`` (``items``: each
    value's ``expr``, ``q``, ``n``, ``hist`` or None, ``ratio``), the ranges' values fetched
    in one scan."""
    asks = []
    for expr, q, n, hist, ratio in items:
        h = (n - 1) * q
        lo = math.floor(h)
        ranks = [lo] if h == lo or lo + 1 >= n else [lo, lo + 1]
        asks.append((expr, ranks, hist, ratio, h - lo))
    got = order_statistics_of(
        engine, source, [(e, r, hist, ratio) for e, r, hist, ratio, _ in asks]
    )
    return [
        v[0] if len(v) == 1 else float(lerp(v[0], v[1], t))
        for v, (*_, t) in zip(got, asks, strict=True)
    ]
