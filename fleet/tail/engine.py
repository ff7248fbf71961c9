"""The tail attribution through a query engine, in memory bounded whatever the rows.

The first pass (``plan_in_engine``) is SQL over one model's ok requests (on a compacted dataset
in DuckDB two streamed scans instead, ``fleet.tail.streamed``), two scans and the fetch of the
body's medians' buckets: the tail's threshold is read from the second scan's counts
of the requests in its buckets (``_split``), the body's medians per token are exact order
statistics (``records.engine.reductions``), the long-prefill size an exact quantile of the
uncached tokens' counts, the over-represented replica from counts per replica. The second pass
takes the model's completed requests, its replicas a group at a time, at most ``CHUNK_ROWS``
requests (a replica larger than that on its own), one query a group (DuckDB opens only the
Parquet files whose statistics may hold the group's replicas), into ``TailSums``: memory is one
group's columns, and the report equals the in-memory one to the last bits of float summation.
The requests listed are the candidates the second pass keeps, read again with their ids
(``examples.from_candidates``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from fleetwatch.fleet.by_model import ByModel, gathered
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.tail.attribute import check_options, tail_report
from fleetwatch.fleet.tail.cohorts import (
    MIN_REQUESTS,
    Requests,
    Target,
    arrow_requests,
    ok_requests,
)
from fleetwatch.fleet.tail.examples import Candidates, from_candidates
from fleetwatch.fleet.tail.report import TailReport
from fleetwatch.fleet.tail.sql import FINE, OK, UNCACHED, base, exprs
from fleetwatch.fleet.tail.sql import per_token as tokens
from fleetwatch.fleet.tail.streamed import first_counts, streamed_plan
from fleetwatch.fleet.tail.sums import Plan, TailSums, check_spread, counted_plan
from fleetwatch.records.engine import Engine
from fleetwatch.records.engine.folded import models
from fleetwatch.records.engine.reductions import (
    bucket_sql,
    exact_quantile,
    exact_quantiles,
    lerp,
    model_is,
    weighted_quantile,
)
from fleetwatch.records.filters import sql_string

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CHUNK_ROWS", "NEEDS", "plan_in_engine", "tail_in_engine"]

CHUNK_ROWS = 500_000
"""Ok requests the second pass holds at once (about 400 bytes each with the features and the
fit's columns; a replica's other records come with them)."""
_BATCH_ROWS = 1 << 16
"""Rows a batch of the sorted query brings."""
NEEDS = (
    "request_id",
    "replica",
    "model",
    "status",
    "arrival_s",
    "scheduled_s",
    "first_token_s",
    "finished_s",
    "prompt_tokens",
    "output_tokens",
    "cached_prompt_tokens",
    "preemptions",
    "preemption_stall_s",
    "trace_id",
)
"""The stored columns the tail reads."""
_FETCH = tuple(c for c in NEEDS if c not in ("request_id", "model", "status", "trace_id"))
"""The columns a group brings (the model and the outcome pick the rows; the ids are read only
for the requests listed, ``fleet.tail.examples``: ids as strings would cost more than all the
rest)."""
ROW_ORDER = (
    "replica",
    "arrival_s",
    "finished_s",
    "first_token_s NULLS LAST",
    "output_tokens",
    "prompt_tokens",
    "scheduled_s",
    "cached_prompt_tokens",
    "preemptions",
    "preemption_stall_s",
)
"""The order of a group's rows (floats are summed in it) where an engine's rows are not in the
files' order: the same on every run and engine (rows it leaves tied are alike in every column a
group brings, so their order changes no sum)."""


def _sets(
    engine: Engine,
    base: str,
    keys: dict[str, str],
    extra: str = "",
    values: dict[str, str] | None = None,
) -> dict[str, pd.DataFrame]:
    """One scan of ``base`` grouped by each of ``keys`` (name -> SQL, NULL where a row is not in
    that table) as grouping sets: per key the distinct values and their counts (and ``extra``
    aggregates), NULL keys left out. ``values`` (name -> SQL) are taken once a row, in a
    subquery, for the keys to use by name (a key's bucket names its value three times)."""
    marks = ", ".join(f"grouping({k}) AS g_{k}" for k in keys)
    rows = base
    if values:
        rows = f"FROM (SELECT *, {', '.join(f'{v} AS {k}' for k, v in values.items())} {base}) AS v"
    got = engine.query(
        f"SELECT {', '.join(keys)}, {marks}, count(*) AS n{extra} FROM (SELECT *, "
        + ", ".join(f"{sql} AS {k}" for k, sql in keys.items())
        + f" {rows}) AS t GROUP BY GROUPING SETS ({', '.join(f'({k})' for k in keys)})"
    )
    return {k: got[(got[f"g_{k}"] == 0) & got[k].notna()].reset_index(drop=True) for k in keys}


_HELD = 1 << 21
"""Most requests whose target latency's bucket holds the tail's threshold that the second scan
counts by their own values (more: the threshold is an order statistic of its own first)."""


def _split(
    engine: Engine,
    base: str,
    y: str,
    values: dict[str, str],
    hist: pd.DataFrame,
    n: int,
    q: float,
) -> tuple[float, pd.DataFrame, dict[str, pd.DataFrame]] | None:
    """The tail's threshold (``numpy.quantile`` ``q`` of ``y``, exact), the tail's counts per
    replica and the body's per-token histograms, from one scan: the buckets of ``hist`` holding
    the threshold's ranks are known before it, so a request below them is in the body and one
    above in the tail, and the requests in them are counted by their own latency (with their
    replica and per-token buckets), the threshold read from those counts. None where those
    buckets hold more than ``_HELD`` requests."""
    import pandas as pd

    h = (n - 1) * q
    lo = math.floor(h)
    ranks = [lo] if h == lo or lo + 1 >= n else [lo, lo + 1]
    hist = hist.sort_values("b").reset_index(drop=True)
    upto = np.cumsum(hist["n"].to_numpy(np.int64))
    at = sorted({int(np.searchsorted(upto, k, side="right")) for k in ranks})
    first, last = int(hist["b"].iloc[at[0]]), int(hist["b"].iloc[at[-1]])
    below = int(upto[at[0] - 1]) if at[0] else 0
    if int(upto[at[-1]]) - below > _HELD:
        return None
    tokens = [k[2:] for k in values if k != "v_y"]
    held = f"v_b BETWEEN {first} AND {last}"
    keys = {
        "rt": f"CASE WHEN v_b > {last} THEN replica END",
        **{k: f"CASE WHEN v_b < {first} THEN {bucket_sql(f'v_{k}', FINE)} END" for k in tokens},
        "yu": f"CASE WHEN {held} THEN v_y END",
        "ru": f"CASE WHEN {held} THEN replica END",
        **{f"{k}u": f"CASE WHEN {held} THEN {bucket_sql(f'v_{k}', FINE)} END" for k in tokens},
    }
    sets = [("rt",), *((k,) for k in tokens), ("yu", "ru"), *(("yu", f"{k}u") for k in tokens)]
    names = list(keys)
    got = engine.query(
        f"SELECT {', '.join(names)}, grouping_id({', '.join(names)}) AS g, count(*) AS n "
        "FROM (SELECT *, "
        + ", ".join(f"{sql} AS {k}" for k, sql in keys.items())
        + f" FROM (SELECT *, {bucket_sql(y)} AS v_b, "
        + ", ".join(f"{v} AS {k}" for k, v in values.items())
        + f" {base}) AS v) AS t GROUP BY GROUPING SETS ("
        + ", ".join("(" + ", ".join(s) + ")" for s in sets)
        + ")"
    )
    g = got["g"].to_numpy(np.int64)

    def rows(s: tuple[str, ...]) -> pd.DataFrame:
        # a set's rows: the bits of the keys it groups by clear, the first key's bit highest
        mark = sum(1 << (len(names) - 1 - i) for i, k in enumerate(names) if k not in s)
        keep = g == mark
        for k in s:
            keep &= got[k].notna().to_numpy()
        out: pd.DataFrame = got.loc[keep, [*s, "n"]].reset_index(drop=True)
        return out

    held_rows = rows(("yu", "ru"))
    by_value = held_rows.groupby("yu", sort=True)["n"].sum()
    v = by_value.index.to_numpy(np.float64)
    cum = np.cumsum(by_value.to_numpy(np.int64))
    found = [float(v[int(np.searchsorted(cum, k - below, side="right"))]) for k in ranks]
    threshold = found[0] if len(found) == 1 else float(lerp(found[0], found[1], h - lo))
    over = held_rows[held_rows["yu"].to_numpy(np.float64) >= threshold]
    both = pd.concat(
        [
            rows(("rt",)).rename(columns={"rt": "replica"}),
            over.groupby("ru", observed=True)["n"].sum().rename_axis("replica").reset_index(),
        ],
        ignore_index=True,
    )
    tails = both.groupby(both["replica"].astype(str))["n"].sum().rename_axis("replica")
    bodies = {}
    for k in tokens:
        part = rows((f"{k}u", "yu"))
        part = part[part["yu"].to_numpy(np.float64) < threshold]
        both = pd.concat(
            [rows((k,)).rename(columns={k: "b"}), part.rename(columns={f"{k}u": "b"})[["b", "n"]]],
            ignore_index=True,
        )
        bodies[k] = both.groupby("b", sort=True)["n"].sum().reset_index()
    return threshold, tails.reset_index(), bodies


def plan_in_engine(
    engine: Engine, model: str, percentile: float, target: Target, long_prompt_quantile: float
) -> tuple[Plan, dict[str, int]]:
    """The first pass over one model's ok requests in ``engine``, and each replica's count:
    two scans and the fetch of the medians' buckets: the replicas' counts, the target's
    histogram and the uncached tokens' counts in one; the tail's threshold, its counts per
    replica and the body's per-token histograms (0.05 % buckets: ``FINE``) in the other
    (``_split``; the threshold fetched first where its buckets hold too many requests). Where
    the engine numbers each file's replica (a compacted dataset in DuckDB) the first scan is
    streamed and two scans in all plan (``streamed``); where those cannot, the rest is planned
    here from the streamed scan's counts."""
    first = first_counts(engine, model, target)
    rows = base(model)
    ex = exprs(target)
    if first is not None:
        per, hist, u = first.frames()
    else:
        got = _sets(
            engine,
            rows,
            {"r": "replica", "b": bucket_sql("v_y"), "u": UNCACHED},
            ", min(arrival_s) AS a0",
            {"v_y": ex["y"]},
        )
        per, hist, u = got["r"].rename(columns={"r": "replica"}), got["b"][["b", "n"]], got["u"]
    per = per.sort_values("replica").reset_index(drop=True)
    n = int(per["n"].sum())
    if n < MIN_REQUESTS:
        raise AnalysisError(f"need at least {MIN_REQUESTS} completed requests, got {n}")
    if first is not None:
        streamed = streamed_plan(engine, first, model, percentile, target, long_prompt_quantile)
        if streamed is not None:
            return streamed
    q_long, q_mid = weighted_quantile(u["u"], u["n"], [long_prompt_quantile, 0.5])
    per_token = tokens(target)
    values = {"v_y": ex["y"], **{f"v_{k}": v for k, v in per_token.items()}}
    split = _split(engine, rows, ex["y"], values, hist, n, percentile / 100.0)
    if split is None:
        threshold = exact_quantile(engine, ex["y"], rows, percentile / 100.0, n, hist=hist)
        tail = f"v_y >= {threshold!r}"
        second = _sets(
            engine,
            rows,
            {
                "rt": f"CASE WHEN {tail} THEN replica END",
                **{
                    k: f"CASE WHEN NOT ({tail}) THEN {bucket_sql(f'v_{k}', FINE)} END"
                    for k in per_token
                },
            },
            values=values,
        )
        tails = second["rt"].rename(columns={"rt": "replica"})
        bodies = {k: second[k].rename(columns={k: "b"})[["b", "n"]] for k in per_token}
    else:
        threshold, tails, bodies = split
    n_tail = int(tails["n"].sum())
    check_spread(n_tail, n, percentile, target)
    body = f"{rows} AND {ex['y']} < {threshold!r}"
    found = exact_quantiles(
        engine,
        body,
        [(expr, 0.5, n - n_tail, bodies[k], FINE) for k, expr in per_token.items()],
    )
    medians = dict(zip(per_token, found, strict=True))
    names = [str(r) for r in per["replica"]]
    counts_tail = tails.set_index(tails["replica"].astype(str))["n"].reindex(names).fillna(0)
    return counted_plan(
        target,
        percentile,
        threshold,
        (float(q_long), float(q_mid)),
        medians,
        (names, per["n"].to_numpy(np.float64), counts_tail.to_numpy(np.float64)),
        float(per["a0"].min()),
    )


def _chunks(counts: dict[str, int], rows: int) -> Iterator[list[str]]:
    """Replicas in groups of at most ``rows`` requests (a larger replica alone)."""
    group: list[str] = []
    held = 0
    for name in sorted(counts):
        if group and held + counts[name] > rows:
            yield group
            group, held = [], 0
        group.append(name)
        held += counts[name]
    if group:
        yield group


def _groups(engine: Engine, model: str, counts: dict[str, int], rows: int) -> Iterator[Requests]:
    """The model's completed requests a group of whole replicas at a time (``_chunks``), one
    query a group: the engine reads only the files and row groups holding the group's replicas
    (by their statistics), so the groups' queries together read each row about once, and memory
    is one group. A replica with no ok request (not in ``counts``) is left out. Where the engine
    hands a query's rows as an Arrow table (DuckDB) the arrays are taken from it with no frame
    between (about a tenth of the pass's CPU at 100 M rows)."""
    import pandas as pd

    order = () if engine.in_file_order else ROW_ORDER  # sorting costs as much as reading
    alone = tuple(c for c in _FETCH if c != "replica")
    arrow = getattr(engine, "table", None)
    for group in _chunks(counts, rows):
        names = ", ".join(sql_string(r) for r in group)
        where = f"{model_is(model)} AND replica IN ({names}) AND {OK}"
        columns = alone if len(group) == 1 else _FETCH  # a replica alone is named here
        if arrow is not None:
            yield arrow_requests(arrow(columns, where, order=order, replicas=group), group)
            continue
        frame = pd.concat(
            list(engine.frames(columns, where, order=order, rows=_BATCH_ROWS, replicas=group)),
            ignore_index=True,
        )
        if len(group) == 1:
            frame["replica"] = pd.Categorical.from_codes(
                np.zeros(len(frame), np.int8), pd.Index(group)
            )
        yield ok_requests(frame, minimum=0)


def _model_report(
    engine: Engine,
    model: str,
    percentile: float,
    target: Target,
    long_prompt_quantile: float,
    chunk_rows: int,
) -> TailReport:
    plan, counts = plan_in_engine(engine, model, percentile, target, long_prompt_quantile)
    sums = TailSums(plan)
    candidates = Candidates(plan)
    for req in _groups(engine, model, counts, chunk_rows):
        candidates.add(req, sums.add(req))
    where = f"{model_is(model)} AND {OK}"
    listed = from_candidates(engine, where, exprs(target)["y"], UNCACHED, plan, candidates)
    return tail_report(plan, sums, listed)


def tail_in_engine(
    engine: Engine,
    *,
    percentile: float = 99.0,
    target: Target = "e2e",
    long_prompt_quantile: float = 0.9,
    chunk_rows: int = CHUNK_ROWS,
) -> TailReport | ByModel[TailReport]:
    """``attribute_tail_by_model`` over an engine's ``records``: each model's tail apart, the
    one report of a dataset of one model."""
    check_options(percentile, target)
    names = models(engine)
    runs: list[tuple[str, Callable[[], TailReport]]] = [
        (
            m,
            partial(
                _model_report,
                engine,
                m,
                percentile,
                target,
                long_prompt_quantile,
                chunk_rows,
            ),
        )
        for m in names
    ]
    if not runs:
        raise AnalysisError(f"need at least {MIN_REQUESTS} completed requests, got 0")
    if len(runs) == 1:
        return runs[0][1]()
    return gathered(runs, [])
