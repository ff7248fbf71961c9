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

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "DERIVED",
    "MODEL",
    "RATIO",
    "RELATIVE_ERROR",
    "UNNAMED",
    "ZERO_BUCKET",
    "Tally",
    "bucket_sql",
    "bucket_values",
    "counted",
    "exact_quantile",
    "exact_quantiles",
    "grouping_sets",
    "model_is",
    "order_statistics",
    "order_statistics_of",
    "run_starts",
    "weighted_quantile",
]

RATIO = 1.02
"""Each histogram bucket's upper edge over its lower edge."""
RELATIVE_ERROR = math.sqrt(RATIO) - 1.0
"""The most a bucket's middle is off any value in it, relatively (0.995 %)."""
_LN_RATIO = repr(math.log(RATIO))
ZERO_BUCKET = -(10**6)
"""The bucket of values at or below 0 (read back as 0.0)."""
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


_BATCH = 1 << 18
"""Rows of keys ``counted`` brings at once (8 bytes a key)."""
_DENSE = 1 << 22
"""The most cells a set's counts are held in a grid of (``Tally``: a count per cell of its keys'
spans, each batch one ``bincount``); beyond, batches' distinct rows are sorted and merged. Over
37 M rows and six bucket keys, counting here costs a third less CPU than DuckDB's ``histogram``
or grouping sets, whose hashing costs more than the scan."""


def counted(
    engine: Any,
    source: str,
    keys: dict[str, str],
    sets: Sequence[Sequence[str]],
    maps: Mapping[str, np.ndarray[Any, Any]] | None = None,
) -> list[Any]:
    """Per set of ``sets`` (tuples of names of ``keys``: name -> ``BIGINT`` SQL over ``source``,
    ``FROM … WHERE …``) a frame of its keys and ``n``, the rows whose keys are all non-NULL,
    sorted by the keys: the engine (one streaming Arrow batches) computes each row's keys and
    streams them, and each set is counted here (``Tally``). ``maps``: a key's values are
    positions in an array, each row's key that array's value there (a file's number read as
    the code of the one label value its rows hold)."""
    import pandas as pd
    import pyarrow.compute as pc

    names = list(keys)
    maps = maps or {}
    inner = ", ".join(f"CAST({sql} AS BIGINT) AS {k}" for k, sql in keys.items())
    tallies = [Tally() for _ in sets]
    for batch in engine.arrow_batches(f"SELECT {inner} {source}", _BATCH):
        cols: dict[str, np.ndarray[Any, Any]] = {}
        valid: dict[str, np.ndarray[Any, Any] | None] = {}
        for k, col in zip(names, batch.columns, strict=True):
            valid[k] = None
            if col.null_count:
                valid[k] = pc.is_valid(col).to_numpy(zero_copy_only=False)
                col = pc.fill_null(col, 0)
            cols[k] = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            if k in maps:
                cols[k] = np.asarray(maps[k], dtype=np.int64)[cols[k]]
        for tally, s in zip(tallies, sets, strict=True):
            keep: np.ndarray[Any, Any] | None = None
            for k in s:
                v = valid[k]
                if v is not None:
                    keep = v if keep is None else keep & v
            arrays = [cols[k] if keep is None else cols[k][keep] for k in s]
            if len(arrays[0]):
                tally.add(arrays)
    out = []
    for s, tally in zip(sets, tallies, strict=True):
        keys_of, n = tally.result(len(s))
        frame = pd.DataFrame({**dict(zip(s, keys_of, strict=True)), "n": n})
        out.append(frame.astype(np.int64))
    return out


class Tally:
    """One set's counts over batches of its keys' rows. While the keys' spans (each key's least
    to greatest value, and a cell of its own for ``ZERO_BUCKET``) hold at most ``_DENSE`` cells,
    a count per cell, in an array of their shape widened as batches widen the spans: a batch is
    one ``bincount``, whatever its distinct rows. Past that, or where a value lies below
    ``ZERO_BUCKET``, each batch's distinct rows are sorted (``_packed``) and merged
    (``_summed``) when they pass twice the last merge (memory bounded, each row merged a
    bounded number of times)."""

    def __init__(self) -> None:
        self.bounds: list[tuple[int, int] | None] | None = None  # per key, ZERO_BUCKET aside
        self.grid: np.ndarray[Any, Any] | None = None
        self.parts: list[_Counts] = []
        self.pending = 0
        self.merged = 0

    def add(self, arrays: Sequence[np.ndarray[Any, Any]]) -> None:
        if not self.parts and self._dense(arrays):
            return
        self.parts.append(_packed(arrays))
        self.pending += len(self.parts[-1][1])
        if self.pending > max(_BATCH, 2 * self.merged):
            self.parts = [_summed(self.parts)]
            self.pending = self.merged = len(self.parts[0][1])

    def _dense(self, arrays: Sequence[np.ndarray[Any, Any]]) -> bool:
        """Count ``arrays`` in the grid (widened to hold them); False where it cannot (the
        grid's counts then moved to the sorted parts)."""
        bounds: list[tuple[int, int] | None] = []
        zeros: list[np.ndarray[Any, Any] | None] = []
        for i, a in enumerate(arrays):
            z: np.ndarray[Any, Any] | None = a == ZERO_BUCKET
            rest = a
            if z is not None and z.any():
                rest = a[~z]
            else:
                z = None
            low, high = (int(rest.min()), int(rest.max())) if len(rest) else (None, None)
            if low is not None and low < ZERO_BUCKET:
                self._to_parts()
                return False
            had = None if self.bounds is None else self.bounds[i]
            if had is not None and low is not None and high is not None:
                low, high = min(low, had[0]), max(high, had[1])
            elif had is not None:
                low, high = had
            bounds.append(None if low is None or high is None else (low, high))
            zeros.append(z)
        shape = _shape(bounds)
        if math.prod(shape) > _DENSE:
            self._to_parts()
            return False
        if self.grid is None or bounds != self.bounds:
            if self.bounds is not None:  # widened again: by half a span more, where it fits
                roomy = _roomier(self.bounds, bounds)
                if math.prod(_shape(roomy)) <= _DENSE:
                    bounds = roomy
                    shape = _shape(bounds)
            self._widen(bounds, shape)
        flat: np.ndarray[Any, Any] | None = None
        for a, z, b, span in zip(arrays, zeros, bounds, shape, strict=True):
            # a cell's digit: 0 for ZERO_BUCKET, 1 + the value's distance from the least
            digit = a - (b[0] - 1) if b is not None else np.zeros(len(a), np.int64)
            if z is not None:
                digit[z] = 0
            flat = digit if flat is None else flat * span + digit
        assert flat is not None and self.grid is not None
        cells = self.grid.reshape(-1)
        if 4 * len(flat) < len(cells):  # few rows for the cells: no pass over every cell
            np.add.at(cells, flat, 1)
        else:
            cells += np.bincount(flat, minlength=len(cells))
        return True

    def _widen(self, bounds: list[tuple[int, int] | None], shape: tuple[int, ...]) -> None:
        grid = np.zeros(shape, dtype=np.int64)
        if self.grid is not None and self.bounds is not None:
            slabs = []
            for old, new in zip(self.bounds, bounds, strict=True):
                mine = [(slice(0, 1), slice(0, 1))]  # the ZERO_BUCKET cell
                if old is not None and new is not None:
                    at = 1 + old[0] - new[0]
                    span = old[1] - old[0] + 1
                    mine.append((slice(1, 1 + span), slice(at, at + span)))
                slabs.append(mine)
            for pick in itertools.product(*slabs):
                grid[tuple(d for _, d in pick)] = self.grid[tuple(s for s, _ in pick)]
        self.grid, self.bounds = grid, bounds

    def _cells(self, width: int) -> _Counts:
        """The grid's counted cells: their keys (sorted) and counts."""
        if self.grid is None or self.bounds is None:
            return [np.zeros(0, np.int64) for _ in range(width)], np.zeros(0, np.int64)
        at = np.flatnonzero(self.grid)
        digits = np.unravel_index(at, self.grid.shape)
        keys = [
            np.where(d == 0, ZERO_BUCKET, d - 1 + (0 if b is None else b[0])).astype(np.int64)
            for d, b in zip(digits, self.bounds, strict=True)
        ]
        return keys, self.grid.reshape(-1)[at].astype(np.int64)

    def _to_parts(self) -> None:
        if self.grid is not None:
            self.parts = [self._cells(self.grid.ndim)]
            self.pending = self.merged = len(self.parts[0][1])
            self.grid = None

    def result(self, width: int) -> _Counts:
        """The distinct rows of keys counted (an array a key, ``width`` keys), sorted, and the
        count of each."""
        if self.parts:
            return _summed(self.parts)
        return self._cells(width)


def _shape(bounds: Sequence[tuple[int, int] | None]) -> tuple[int, ...]:
    """A ``Tally`` grid's shape: per key a cell for ``ZERO_BUCKET`` and one a value between its
    bounds."""
    return tuple(1 + (0 if b is None else b[1] - b[0] + 1) for b in bounds)


def _roomier(
    old: Sequence[tuple[int, int] | None], new: list[tuple[int, int] | None]
) -> list[tuple[int, int] | None]:
    """``new`` bounds, each side that moved past ``old`` moved on by half the span more (a key
    that grows batch by batch, as a replica's code over files in replica order, widens its grid
    a few times, not once a batch), never down to ``ZERO_BUCKET``."""
    out: list[tuple[int, int] | None] = []
    for was, now in zip(old, new, strict=True):
        if was is None or now is None:
            out.append(now)
            continue
        more = (now[1] - now[0]) // 2 + 1
        low = max(now[0] - more, ZERO_BUCKET + 1) if now[0] < was[0] else now[0]
        high = now[1] + more if now[1] > was[1] else now[1]
        out.append((low, high))
    return out


def run_starts(*keys: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The first row of each run of equal ``keys`` (rows sorted by them)."""
    if not len(keys[0]):
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(len(keys[0]), dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


_Counts = tuple[list[np.ndarray[Any, Any]], np.ndarray[Any, Any]]
"""Distinct rows of integer keys (an array a key) and how many times each occurs."""


def _summed(got: Sequence[_Counts]) -> _Counts:
    """The counts of ``got`` (each ``_Counts`` of the same keys) added up: each distinct row
    once, rows sorted by the keys, the first key first."""
    arrays = [np.concatenate([g[0][i] for g in got]) for i in range(len(got[0][0]))]
    n = np.concatenate([g[1] for g in got])
    if len(got) > 1:
        order = np.lexsort(arrays[::-1])
        arrays, n = [a[order] for a in arrays], n[order]
        starts = run_starts(*arrays)
        arrays, n = [a[starts] for a in arrays], np.add.reduceat(n, starts)
    return arrays, n.astype(np.int64)


def _packed(arrays: Sequence[np.ndarray[Any, Any]]) -> _Counts:
    """The distinct rows of ``arrays`` (integer keys, one array each) sorted, and their counts.
    The keys are packed into one number, each key's span its own digit, and counted by
    ``bincount`` where the spans' product is at most ``_DENSE``; a key's ``ZERO_BUCKET`` values
    are counted as one below its least other value where none is below them (so a bucket key of
    values at or below zero spans its own buckets, not a million more, in the same order). Where
    the spans are wider the packed keys are sorted, and where they would not fit a number, the
    rows themselves."""
    lows: list[int] = []
    spans: list[int] = []
    zeros: list[int | None] = []
    for a in arrays:
        z = a == ZERO_BUCKET
        rest = a[~z]
        if len(rest) < len(a) and len(rest) and int(rest.min()) > ZERO_BUCKET + 1:
            lows.append(int(rest.min()) - 1)
            zeros.append(lows[-1])
            spans.append(int(rest.max()) - lows[-1] + 1)
        else:
            lows.append(int(a.min()))
            zeros.append(None)
            spans.append(int(a.max()) - lows[-1] + 1)
    total = math.prod(spans)
    if total >= 2**62:  # no number holds the packed keys: the rows sorted as they are
        rows, n = np.unique(np.stack(arrays, axis=1), axis=0, return_counts=True)
        return [rows[:, i].astype(np.int64) for i in range(len(arrays))], n.astype(np.int64)
    packed = np.zeros(len(arrays[0]), dtype=np.int64)
    for a, low, zero, span in zip(arrays, lows, zeros, spans, strict=True):
        digit = a - low if zero is None else np.where(a == ZERO_BUCKET, 0, a - low)
        packed = packed * span + digit
    if total <= _DENSE:
        counts = np.bincount(packed)
        cells = np.flatnonzero(counts)
        n = counts[cells]
    else:
        cells, n = np.unique(packed, return_counts=True)
    keys = []
    for span in reversed(spans):
        keys.append(cells % span)
        cells = cells // span
    keys.reverse()
    out = []
    for k, low, zero in zip(keys, lows, zeros, strict=True):
        k = k.astype(np.int64) + low
        if zero is not None:
            k[k == zero] = ZERO_BUCKET
        out.append(k)
    return out, n.astype(np.int64)


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
