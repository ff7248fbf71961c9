"""Request records in a query engine -> one ``FleetTable`` per model, from reduced tables only.

The engine (DuckDB in process, or Spark) reduces the dataset to three small tables, whatever its
rows: per replica its counts and sums (volume, errors, tokens, active span); per model and signal
the distribution of uncached prompt tokens (for the like-with-like buckets' edges); and per
replica, signal, prompt bucket and latency bucket the count of ok requests (2 % latency buckets,
``records.engine.reductions``), one scan each. The first reads no time where the footers say
each replica's first arrival and last finish (``Engine.spans``), and is no scan at all where
the files' stamps tally their rows (``Engine.tallies``). The third reads no model where
each replica serves one: its prompt buckets are the models' edges merged, each replica's cells
put in its model's buckets here. Each model's table is computed from those counts
(``sources.counted``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.core.records.write import TALLIED
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.sources.counted import LATENCY, rows_of, table_from_counts
from fleetwatch.fleet.outliers.table import FleetTable
from fleetwatch.records.engine import Engine
from fleetwatch.records.engine.counting import counted, run_starts
from fleetwatch.records.engine.folded import check_columns, checked
from fleetwatch.records.engine.reductions import (
    DERIVED,
    UNNAMED,
    bucket_sql,
    bucket_values,
    model_is,
    weighted_quantile,
)

__all__ = ["NEEDS", "tables_from_engine"]

NEEDS = ("model", "replica", *TALLIED)
"""The stored columns the reductions read: the labels, and those a file's stamp tallies (the
summary, ``_tallied``)."""
_UNCACHED = "(prompt_tokens - coalesce(cached_prompt_tokens, 0))"
_CELL_BATCH = 1 << 17
"""Rows of the cells' result brought at once."""
_OK = "status = 'ok'"
_HAS = {
    "ttft": "first_token_s IS NOT NULL AND arrival_s IS NOT NULL",
    "tpot": "output_tokens >= 2 AND finished_s IS NOT NULL AND first_token_s IS NOT NULL",
    "e2e": "finished_s IS NOT NULL AND arrival_s IS NOT NULL",
}
"""SQL true of the requests whose ``DERIVED`` duration of each signal is not NULL."""
_TIMES = ("first_token_s", "arrival_s", "finished_s")
_FEW_TOKENS = f"WHEN {_OK} AND (output_tokens IS NULL OR output_tokens < 2) THEN 1"
_LACKING = (
    f"CASE WHEN {_OK} AND ({' OR '.join(f'{c} IS NULL' for c in _TIMES)}) THEN 2 "
    f"{_FEW_TOKENS} ELSE 0 END"
)
"""SQL: how a request may lack a signal's duration: 2 an ok one lacking a time, 1 an ok one of
too few output tokens for a tpot (its times all there), 0 otherwise (``_uncached_counts``)."""


def _summary(engine: Engine, *, times: bool = True) -> pd.DataFrame:
    """Per model and replica the counts and sums, the typed errors' counts (a column
    ``_TYPED`` + type each) and how its ok requests may lack a signal's duration (``lacking``,
    the most of ``_LACKING``);
    the first scan, so it also counts and checks every record where the engine's are not
    checked yet (``records.engine.folded``). One ``GROUP BY`` of the model, replica and error
    type (a failed request's; NULL for the others): the error types cost no scan of their own.
    On a compacted dataset the model and replica are each row's file number instead, each
    file's from its footer (``_files_labels``).

    Without ``times`` no time is read (the three time columns are a third of the scan's CPU):
    no first arrival and last finish (the footers say them, ``Engine.spans``), and ``lacking``
    at most 1, from the output tokens alone (whether an ok request lacks a time is then told by
    the cells' counts, ``_lack_times``). Where each file's stamp tallies its rows, read with
    no filter (``_tallied``), no row at all: the tallies' ``lacking`` is exact, 2 where an ok
    request lacks a time, and each file's sums exact integers (a replica's files then added as
    doubles, as a scan's sums are: the same up to 2**53)."""
    ok = f"CASE WHEN {_OK} THEN 1 ELSE 0 END"
    lacking = _LACKING if times else f"CASE {_FEW_TOKENS} ELSE 0 END"
    ends = "min(arrival_s) AS first_s, max(finished_s) AS last_s," if times else ""
    labels, source, groups = "model, replica", "records", "1, 2, 3"
    files = _files_labels(engine)
    if files is not None:
        labels, source, groups = "fw_file", files[0], "1, 2"
    tallied = None if files is None or times else _tallied(engine)
    got = (
        tallied
        if tallied is not None
        else engine.query(
            f"""SELECT {labels},
            CASE WHEN status = 'error' THEN error_type END AS error_type,
            count(*) AS n,
            sum({ok}) AS n_ok,
            sum(CASE WHEN status = 'error' THEN 1 ELSE 0 END) AS n_error,
            sum(CASE WHEN finish_reason = 'length' THEN 1 ELSE 0 END) AS n_truncated_share,
            sum(CASE WHEN {_OK} AND output_tokens = 0 THEN 1 ELSE 0 END) AS n_empty_share,
            max({lacking}) AS lacking,
            {ends}
            sum(CAST(output_tokens AS DOUBLE) * {ok}) AS out_ok,
            sum(CAST(output_tokens AS DOUBLE)) AS out_sum,
            sum(CAST(output_tokens AS DOUBLE) * CAST(output_tokens AS DOUBLE)) AS out_sq,
            sum(CAST(prompt_tokens AS DOUBLE)) AS prompt_sum,
            sum(CAST(coalesce(cached_prompt_tokens, 0) AS DOUBLE)) AS cached_sum
            {check_columns(engine)}
        FROM {source} GROUP BY {groups}"""
        )
    )
    got = checked(engine, got)
    if files is not None:
        number = got.pop("fw_file").to_numpy(np.int64)
        got.insert(0, "model", np.array(files[1], dtype=object)[number])
        got.insert(1, "replica", np.array(files[2], dtype=object)[number])
    got = _unnamed(got)
    typed = got[got["error_type"].notna()]
    typed = typed.assign(error_type=_TYPED + typed["error_type"].astype(str))
    counts = typed.pivot_table(
        index=["model", "replica"], columns="error_type", values="n", aggfunc="sum", sort=True
    )
    firsts = {"first_s": "min", "last_s": "max", "lacking": "max"}
    keys = ["model", "replica", "error_type"]
    how = {c: firsts.get(c, "sum") for c in got.columns if c not in keys}
    out = got.drop(columns="error_type")
    if out.duplicated(["model", "replica"]).any():
        out = out.groupby(["model", "replica"], as_index=False, sort=False, dropna=False).agg(how)
    if len(counts.columns):
        counts = counts.reset_index().astype({"model": object, "replica": object})
        out = out.merge(counts, on=["model", "replica"], how="left", sort=False)
        out[list(counts.columns[2:])] = out[list(counts.columns[2:])].fillna(0.0)
    return out.reset_index(drop=True)


def _tallied(engine: Engine) -> pd.DataFrame | None:
    """The summary's rows by file number (``fw_file``, as ``_files_labels`` numbers them) from
    each file's stamp (``DuckEngine.tallies``: counted and summed when written), with no scan:
    a row a file, and a row of each error type it names (its failures' count). Its ``lacking``
    is exact (2 where an ok request lacks a time). None where the files do not say them all
    (a query counts them)."""
    tallies = getattr(engine, "tallies", None)
    said = None if tallies is None else tallies()
    if said is None or check_columns(engine):  # vouched: the rows counted from the footers
        return None
    rows: list[tuple[Any, ...]] = []
    for number, t in enumerate(said):
        if t is None:  # a file of no rows: no group
            continue
        typed = sum(t.error_types.values())
        lacking = 2 if t.ok_untimed else 1 if t.ok_short else 0
        sums = [float(t.sums[k]) for k in _TALLIED_SUMS]
        rows.append(
            (
                number,
                None,
                sum(t.status.values()) - typed,
                float(t.status.get("ok", 0)),
                float(t.status.get("error", 0) - typed),
                float(t.length),
                float(t.ok_empty),
                lacking,
                *sums,
            )
        )
        for kind, n in sorted(t.error_types.items()):
            rows.append((number, kind, n, 0.0, float(n), 0.0, 0.0, 0, *(0.0 for _ in sums)))
    names = ["fw_file", "error_type", "n", "n_ok", "n_error", "n_truncated_share"]
    names += ["n_empty_share", "lacking", "out_ok", "out_sum", "out_sq", "prompt_sum"]
    frame = pd.DataFrame.from_records(rows, columns=[*names, "cached_sum"])
    return frame.astype(
        {"fw_file": np.int64, "error_type": object, "n": np.int64, "lacking": np.int32}
    )


_TALLIED_SUMS = (
    "ok_output_tokens",
    "output_tokens",
    "output_tokens_squared",
    "prompt_tokens",
    "cached_prompt_tokens",
)
"""``Tallies.sums``' names of the summary's ``out_ok``, ``out_sum``, ``out_sq``,
``prompt_sum`` and ``cached_sum``."""


def _files_labels(engine: Engine) -> tuple[str, list[str | None], list[str | None]] | None:
    """Where each Parquet file holds one model and one replica (a compacted dataset,
    ``Engine.by_file``): the records numbering each row's file, and each file's model and
    replica by that number, so the summary groups by an integer, not two strings (a seventh
    less of its CPU at 100 M rows); None otherwise."""
    by_file = getattr(engine, "by_file", None)
    if by_file is None:
        return None
    replica, model = by_file("replica"), by_file("model")
    if replica is None or model is None:
        return None
    return replica[0], model[1], replica[1]


_TYPED = "n_type:"
"""The prefix of the summary's columns counting a replica's failures of one error type."""


def _unnamed(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` grouped by the stored ``model`` column (grouping by ``MODEL`` would expand a
    dictionary-encoded column row by row), a record naming no model counted under the model
    ``MODEL`` names it (a model so named is then two groups: the caller adds them up)."""
    return frame.assign(model=frame["model"].astype(object).where(frame["model"].notna(), UNNAMED))


def _lack_times(summary: pd.DataFrame, cells: pd.DataFrame) -> bool:
    """Whether an ok request lacks a time, from counts alone: a replica's cells of its ttft or
    its e2e (a request's duration of either is NULL only where a time it takes is) count fewer
    requests than its ok ones."""
    keys = [summary["model"].astype(str), summary["replica"].astype(str)]
    ok = summary["n_ok"].groupby(keys).sum()
    for name in ("ttft", "e2e"):
        mine = cells[cells["signal"] == name]
        got = mine["n"].groupby([mine["model"].astype(str), mine["replica"].astype(str)]).sum()
        if bool((got.reindex(ok.index, fill_value=0) < ok).any()):
            return True
    return False


def _error_types(summary: pd.DataFrame) -> pd.DataFrame:
    """Failed requests per model, replica and error type (typed errors only), from the
    summary's ``_TYPED`` columns."""
    typed = [c for c in summary.columns if str(c).startswith(_TYPED)]
    long = summary[["model", "replica", *typed]].melt(
        id_vars=["model", "replica"], value_vars=typed, var_name="error_type", value_name="n"
    )
    long = long[long["n"] > 0]
    return long.assign(
        model=long["model"].astype(str),
        replica=long["replica"].astype(str),
        error_type=long["error_type"].astype(str).str.slice(len(_TYPED)),
    ).reset_index(drop=True)


def _uncached_counts(engine: Engine, lacking: int = 2) -> pd.DataFrame:
    """Per model and latency signal the count of each uncached prompt size over the ok requests
    holding that signal's value: one ``GROUP BY`` of the size and which signals a request has
    (the three signals' rows are the same requests but for a missing first token or a single
    output token), summed per signal here. Which signals a request has is told by the columns'
    nulls (``_HAS``), without computing the durations, and only as far as the summary found ok
    requests lacking one (``lacking``, as ``_LACKING``): at 1 by the output tokens alone, at 0
    not at all, the sizes alone the same for each signal (reading the times is most of the
    query's cost). A signal every ok request has is no key of the ``GROUP BY`` (a constant
    key costs as much hashing as any other)."""
    flags: dict[str, str] = {}
    if lacking >= 2:
        flags = {name: f"CASE WHEN {cond} THEN 1 ELSE 0 END" for name, cond in _HAS.items()}
    elif lacking == 1:
        flags["tpot"] = "CASE WHEN output_tokens >= 2 THEN 1 ELSE 0 END"
    has = "".join(f", {expr} AS has_{name}" for name, expr in flags.items())
    names = "".join(f", has_{name}" for name in flags)
    keys = ", ".join(str(i + 1) for i in range(2 + len(flags)))
    got = engine.query(
        f"SELECT model, u{names}, count(*) AS n FROM (SELECT model, {_UNCACHED} AS u{has} "
        f"FROM records WHERE {_OK}) AS t GROUP BY {keys}"
    )
    got = _unnamed(got)
    parts = []
    for name in LATENCY:
        mine = got[got[f"has_{name}"] == 1] if name in flags else got
        part = mine.groupby(["model", "u"], sort=True, observed=True)["n"].sum().reset_index()
        part.insert(1, "signal", name)
        parts.append(part[["model", "signal", "u", "n"]])
    return pd.concat(parts, ignore_index=True)


def _edges(counts: pd.DataFrame, buckets: int) -> dict[tuple[str, str], np.ndarray[Any, Any]]:
    """Per (model, signal) the inner quantile edges of uncached tokens, as ``matched_ratios``."""
    out = {}
    qs = np.linspace(0.0, 1.0, buckets + 1)
    for (model, signal), g in counts.groupby(["model", "signal"], sort=False):
        q = weighted_quantile(g["u"].to_numpy(np.float64), g["n"].to_numpy(np.float64), qs)
        out[(str(model), str(signal))] = np.unique(q[1:-1])
    return out


def _searched(expr: str, edges: Sequence[float], below: int = 0) -> str:
    """SQL: ``below`` plus the number of ``edges`` (ascending) at or below the value of ``expr``,
    as a binary search of nested CASEs (a few comparisons a row, not one an edge). ``expr`` is
    an integer (the uncached tokens): an edge is written as the least integer at or above it,
    the same comparison of an integer, made without casting the integer to a double."""
    if not edges:
        return str(below)
    mid = len(edges) // 2
    above = _searched(expr, edges[mid + 1 :], below + mid + 1)
    edge = float(edges[mid])
    bound = str(math.ceil(edge)) if math.isfinite(edge) else repr(edge)
    return (
        f"(CASE WHEN {expr} >= {bound} THEN {above} ELSE {_searched(expr, edges[:mid], below)} END)"
    )


def _model_bucket(
    edges: Mapping[tuple[str, str], np.ndarray[Any, Any]],
    models: Sequence[str],
    signal: str,
    width: int,
) -> str:
    """SQL: a request's model (its index in ``models``) and prompt bucket (the number of the
    (model, ``signal``) edges at or below its uncached tokens, ``searchsorted(edges, u,
    side="right")``) as one number, ``index * width + bucket``; -1 for a model not in
    ``models``."""
    cases = [
        f"WHEN {model_is(model)} THEN "
        f"{_searched('u', [float(x) for x in edges.get((model, signal), ())], i * width)}"
        for i, model in enumerate(models)
    ]
    return f"(CASE {' '.join(cases)} ELSE -1 END)"


def _bounds(edges: Any) -> list[int | float]:
    """``edges`` as ``_searched`` compares an integer with them: each the least integer at or
    above it (an edge that is not finite as it is)."""
    return [math.ceil(x) if math.isfinite(x) else x for x in (float(e) for e in edges)]


def _merged(
    edges: Mapping[tuple[str, str], np.ndarray[Any, Any]], models: Sequence[str], signal: str
) -> tuple[list[int | float], np.ndarray[Any, Any]]:
    """The edges of every model of ``models`` for ``signal`` in one ascending list (as
    ``_bounds``, each once), and per model (a row each, in ``models``' order) its prompt bucket
    of each bucket of that list: the number of its own edges at or below the merged bucket's
    lower edge (none below the first). A model's edges are all in the list, so every merged
    bucket lies in one bucket of each model's."""
    own = [_bounds(edges.get((model, signal), ())) for model in models]
    merged = sorted({b for bounds in own for b in bounds})
    lower = np.array([-math.inf, *merged], dtype=np.float64)
    table = np.array(
        [np.searchsorted(np.sort(np.array(b, dtype=np.float64)), lower, side="right") for b in own],
        dtype=np.int64,
    ).reshape(len(models), len(lower))
    return merged, table


_SPAN = 1 << 22
"""A cell's key is ``bucket * _SPAN + b``, ``bucket`` the model and prompt bucket or the merged
prompt bucket: every latency bucket ``b`` lies within ``±_SPAN / 2`` (``ZERO_BUCKET`` is
-10**6, a positive double's bucket within ±40,000)."""
_NARROW = (2**31 - 1 - _SPAN // 2) // _SPAN
"""The buckets below which every key (``bucket * _SPAN + b``, with ``bucket`` from -1) and
``bucket * _SPAN`` fit a 32-bit integer."""


def _cells(
    engine: Engine,
    edges: Mapping[tuple[str, str], np.ndarray[Any, Any]],
    models: Sequence[str],
    replicas: Sequence[str],
    *,
    owners: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Per model, replica, signal, prompt bucket and 2 % latency bucket the count of ok requests:
    one scan, the three signals as grouping sets (no row repeated per signal) of the replica and
    one integer key a signal (a prompt bucket and the latency bucket packed: fewer and cheaper
    keys to hash than three), the prompt bucket computed once a row when the signals' edges
    agree (they do but for the rare request of one output token or none).

    Where each replica serves one model (``owners``: replica -> model, every replica of
    ``replicas`` in it) the prompt bucket is one of the models' edges merged (``_merged``),
    the model not read at all: each cell's model is its replica's, its prompt bucket that
    model's of the merged bucket, and the cells of merged buckets within one prompt bucket are
    added up here. Otherwise the key holds the model too (``_model_bucket``).

    The result (about a million rows at 200 replicas) is brought a batch at a time, its replicas
    as codes of ``replicas`` (the summary's): a string object a row would cost more memory than
    the engine's own work. Where each Parquet file holds one replica too (a compacted dataset,
    ``Engine.by_file``), no grouping sets: the keys are streamed as integers, the replica its
    file's number, and counted in this process (``_by_file``; a quarter less CPU over 100 M
    rows)."""
    names = {"model": sorted(models), "replica": sorted(replicas)}
    if owners is not None:
        index = {m: i for i, m in enumerate(names["model"])}
        of_replica = np.array([index[owners[r]] for r in names["replica"]], dtype=np.int64)
        merged = {name: _merged(edges, names["model"], name) for name in LATENCY}
        mbs = {name: _searched("u", merged[name][0]) for name in LATENCY}
        top = max(len(m) for m, _ in merged.values())
    else:
        width = 1 + max((len(e) for e in edges.values()), default=0)
        mbs = {name: _model_bucket(edges, names["model"], name, width) for name in LATENCY}
        top = len(names["model"]) * width
    shared = {expr: f"mb{i}" for i, expr in enumerate(dict.fromkeys(mbs.values()))}
    durations = ", ".join(f"{DERIVED[col]} AS x_{name}" for name, col in LATENCY.items())
    inner = ", ".join(
        [f"{expr} AS {alias}" for expr, alias in shared.items()]
        + [f"{bucket_sql(f'x_{name}')} AS b_{name}" for name in LATENCY]
    )
    if top < _NARROW:  # 32-bit keys: less to hash and to hold per row than 64-bit ones
        key = "CAST({mb} * {span} + b_{name} AS INTEGER) AS k_{name}"
    else:
        key = "CAST({mb} AS BIGINT) * {span} + b_{name} AS k_{name}"
    keys = ", ".join(key.format(mb=shared[mbs[name]], span=_SPAN, name=name) for name in LATENCY)
    read = "replica" if owners is not None else "model, replica"
    sets = ", ".join(f"(replica, k_{name})" for name in LATENCY)
    marks = ", ".join(f"grouping(k_{name}) AS g_{name}" for name in LATENCY)
    cols = ", ".join(f"k_{name}" for name in LATENCY)
    sql = f"""SELECT replica, {marks}, {cols}, count(*) AS n
            FROM (SELECT replica, {keys} FROM (SELECT replica, {inner} FROM (
                SELECT {read}, {_UNCACHED} AS u, {durations} FROM records WHERE {_OK}
            ) AS t0) AS t1) AS t
            GROUP BY GROUPING SETS ({sets})"""
    empty = {c: pd.Categorical([], categories=v) for c, v in names.items()}
    none = np.zeros(0, dtype=np.int64)
    parts = [
        pd.DataFrame(
            {**empty, "signal": pd.Series([], dtype=str), "pb": none, "b": none, "n": none}
        )
    ]
    half = _SPAN // 2
    coded = None
    if owners is not None and hasattr(engine, "by_file") and hasattr(engine, "arrow_batches"):
        coded = engine.by_file("replica")
    if coded is not None:
        of_signal = {name: shared[mbs[name]] for name in LATENCY}
        counts = _by_file(engine, coded, names["replica"], shared, of_signal, durations)
        for name, got in zip(LATENCY, counts, strict=True):
            r = got["r"].to_numpy()
            model = of_replica[r]
            pb = merged[name][1][model, got[of_signal[name]].to_numpy()]
            replica = pd.Categorical.from_codes(r, pd.Index(names["replica"]))
            parts.append(_cell_frame(names, name, model, replica, pb, got[f"b_{name}"], got["n"]))
    else:
        for got in engine.batches(sql, _CELL_BATCH):
            replica = pd.Categorical(got["replica"].astype(object), categories=names["replica"])
            if bool(pd.isna(replica).any()):
                raise AnalysisError("a cell's replica is not in the summary")
            for name in LATENCY:
                mine = ((got[f"g_{name}"] == 0) & got[f"k_{name}"].notna()).to_numpy()
                k = got[f"k_{name}"].to_numpy()[mine].astype(np.int64)
                mb = (k + half) // _SPAN
                if owners is not None:
                    model = of_replica[replica.codes[mine]]
                    pb = merged[name][1][model, mb]
                else:
                    model = mb // width
                    if len(model) and (model.min() < 0 or model.max() >= len(names["model"])):
                        raise AnalysisError("a cell's model is not in the summary")
                    pb = mb - model * width
                n = got["n"].to_numpy()[mine].astype(np.int64)
                parts.append(_cell_frame(names, name, model, replica[mine], pb, k - mb * _SPAN, n))
    cells = pd.concat(parts, ignore_index=True)
    cells["pb"] = cells["pb"].astype(np.int64)
    cells["b"] = cells["b"].astype(np.int64)
    cells["n"] = cells["n"].astype(np.int64)
    order = ["model", "signal", "replica", "pb", "b"]
    cells = cells.sort_values(order, kind="stable")
    cells = cells.reset_index(drop=True)  # summed in this order: the same on every run
    if owners is not None:  # one cell of each run of equal keys (merged buckets), added up
        runs = [cells[c].cat.codes if c in names else cells[c] for c in order]
        starts = run_starts(*(k.to_numpy() for k in runs))
        if len(starts) < len(cells):
            n = np.add.reduceat(cells["n"].to_numpy(), starts)
            cells = cells.iloc[starts].reset_index(drop=True)
            cells["n"] = n
    cells = cells.astype({"model": object, "replica": object})
    cells["v"] = bucket_values(cells["b"].to_numpy())
    return cells


def _cell_frame(
    names: Mapping[str, Sequence[str]],
    signal: str,
    model: np.ndarray[Any, Any],
    replica: Any,
    pb: Any,
    b: Any,
    n: Any,
) -> pd.DataFrame:
    """One signal's cells: the model's codes in ``names["model"]``, the replica (categorical
    of ``names["replica"]``), the prompt bucket, the latency bucket and the count."""
    return pd.DataFrame(
        {
            "model": pd.Categorical.from_codes(model, categories=pd.Index(names["model"])),
            "replica": replica,
            "signal": signal,
            "pb": pb,
            "b": b,
            "n": n,
        }
    )


def _by_file(
    engine: Any,
    coded: tuple[str, list[str | None]],
    replicas: Sequence[str],
    shared: Mapping[str, str],
    of_signal: Mapping[str, str],
    durations: str,
) -> list[pd.DataFrame]:
    """The cells of each signal (``LATENCY``'s order) as a frame of the replica's code in
    ``replicas`` (``r``), the merged prompt bucket (column ``of_signal[signal]``, its SQL the
    key of ``shared`` naming it), the
    latency bucket (``b_`` + signal) and ``n``, counted in this process (``counted``) from the
    keys streamed as integers: each row's replica its file's (``Engine.by_file``), no string
    read or hashed."""
    source, values = coded
    index = {r: i for i, r in enumerate(replicas)}
    code = np.array([-1 if v is None else index.get(v, -1) for v in values], dtype=np.int64)
    keys = {
        "r": "fw_file",
        **{alias: expr for expr, alias in shared.items()},
        **{f"b_{name}": bucket_sql(f"x_{name}") for name in LATENCY},
    }
    sets = [("r", of_signal[name], f"b_{name}") for name in LATENCY]
    rows = f"FROM (SELECT fw_file, {_UNCACHED} AS u, {durations} FROM {source} WHERE {_OK}) AS t0"
    got = counted(engine, rows, keys, sets, {"r": code})
    for frame in got:
        if len(frame) and int(frame["r"].min()) < 0:
            raise AnalysisError("a cell's replica is not in the summary")
    return got


def tables_from_engine(
    engine: Engine,
    *,
    quantile: float = 0.5,
    buckets: int = 8,
    min_bucket: int = 3,
    fingerprint: pd.DataFrame | None = None,
    where: str = "records",
) -> list[tuple[str, FleetTable]]:
    """One ``FleetTable`` per model of the engine's ``records``, models sorted by name."""
    if not 0.0 < quantile < 1.0:
        raise AnalysisError(f"quantile must be in (0, 1), got {quantile}")
    spans = engine.spans() if hasattr(engine, "spans") else None
    summary = _summary(engine, times=spans is None)
    if summary.empty:
        raise AnalysisError(f"{where}: no records")
    if summary["replica"].isna().any():
        raise AnalysisError(f"{where}: records lack column(s) replica")
    if spans is not None:
        pairs = zip(summary["model"], summary["replica"], strict=True)
        ends = [spans.get((str(m), str(r))) for m, r in pairs]
        if any(e is None for e in ends):  # a replica the footers do not name: read the times
            spans, summary = None, _summary(engine)
        else:
            summary["first_s"] = [float(e[0]) for e in ends if e is not None]
            summary["last_s"] = [float(e[1]) for e in ends if e is not None]
    names = summary["replica"].astype(str)
    served = summary.assign(replica=names).drop_duplicates(["replica", "model"])
    owners = None
    if not served["replica"].duplicated().any():  # each replica serves one model
        owners = dict(zip(served["replica"], served["model"].astype(str), strict=True))
    models, replicas = summary["model"].unique().tolist(), names.unique().tolist()
    lacking = int(summary["lacking"].max())
    edges = _edges(_uncached_counts(engine, lacking), buckets)
    cells = _cells(engine, edges, models, replicas, owners=owners)
    if spans is not None and lacking < 2 and _lack_times(summary, cells):
        edges = _edges(_uncached_counts(engine, 2), buckets)  # the sizes of each signal's own
        cells = _cells(engine, edges, models, replicas, owners=owners)
    errors = _error_types(summary)
    out = []
    for model in sorted(summary["model"].astype(str).unique()):
        out.append(
            (
                model,
                table_from_counts(
                    model,
                    summary[summary["model"] == model],
                    rows_of(cells, "model", model),
                    errors=errors[errors["model"] == model],
                    quantile=quantile,
                    min_bucket=min_bucket,
                    fingerprint=fingerprint,
                    where=where,
                ),
            )
        )
    return out
