"""Check a whole records frame (from Parquet, or built in memory) by the rules JSON lines are
checked by, vectorised: the same types, ranges, finiteness and plausibility, in the same order.

``check_values`` in ``schema`` checks one record field by field; here every rule is a boolean
mask over the rows, listed in the order ``check_values`` applies them, and the error is the first
bad row's first problem in that order, so a file says the same thing as JSON lines or Parquet.
Parquet holds what JSON cannot: unsigned and boolean columns, NaN distinct from null (``nan_rows``,
found by the reader before pandas merges the two), so those are refused explicitly.

``columns_pass`` decides the other way round, for the values of JSON lines as ``json.loads`` gives
them: True only where every row passes ``check_values`` (a type set a column, then the rules on
arrays), False where any row may not; the reader then checks row by row, for the first problem.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.core.brief import brief
from fleetwatch.core.records.schema import (
    DEFAULTS,
    FIELD_BY_NAME,
    FIELDS,
    INT64_MAX,
    ITL_BOUNDS,
    MAX_REQUEST_S,
    MAX_TIMESTAMP_S,
    TIME_EPS,
    TIME_FIELDS,
    TRACE_ID,
    TRACE_ID_PROBLEM,
    FieldSpec,
    RecordError,
    Status,
    check_type,
    implausible_time,
    is_trace_id,
)

__all__ = ["columns_pass", "validate_frame"]

Mask = np.ndarray[Any, np.dtype[np.bool_]]
Floats = np.ndarray[Any, np.dtype[np.float64]]
Problem = tuple[str, Callable[[int], str], Mask]


def _type_problem(spec: FieldSpec, col: pd.Series, nan: Mask | None) -> Problem | None:
    """Rows whose value does not fit ``spec`` (nulls aside), as ``check_type`` would say."""
    n = len(col)
    dtype = col.dtype
    present = col.notna().to_numpy()
    if nan is not None:
        present = present | nan  # NaN is a value (a float), not a null
    name = spec.name

    def elementwise() -> Problem:
        values = col.to_numpy(dtype=object)
        bad = np.fromiter(
            (v is not None and check_type(spec, v) is not None for v in _nulls_to_none(values)),
            dtype=bool,
            count=n,
        )
        return name, lambda i: str(check_type(spec, values[i])), bad

    if spec.kind is str:
        if isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(dtype):
            if name == "status":
                ok = col.astype("string").isin([s.value for s in Status]).to_numpy()
                bad = present & ~ok
                return name, lambda i: str(check_type(spec, str(col.iloc[i]))), bad
            if pd.api.types.is_object_dtype(dtype):
                return elementwise()
            return None
        kind = "bool" if pd.api.types.is_bool_dtype(dtype) else "number"
        return name, lambda i: f"must be a string, got {kind} {brief(col.iloc[i])}", present
    if pd.api.types.is_bool_dtype(dtype):
        what = "an integer" if spec.kind is int else "a number"
        return name, lambda i: f"must be {what}, got bool {brief(col.iloc[i])}", present
    if not pd.api.types.is_numeric_dtype(dtype):
        return elementwise()
    if spec.kind is int:
        if pd.api.types.is_unsigned_integer_dtype(dtype):
            raw = col.to_numpy()
            bad = present & (raw > np.uint64(INT64_MAX))
            return name, lambda i: f"is {raw[i]}: out of range (integers are 64-bit signed)", bad
        if pd.api.types.is_integer_dtype(dtype):
            return None
        v = col.to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            frac = present & ~np.isinf(v) & (v != np.floor(v))
            big = present & ~frac & ((np.abs(v) >= 2.0**63) | np.isinf(v))
        if nan is not None:
            frac |= nan

        def says(i: int) -> str:
            if big[i] and not frac[i]:
                return f"is {brief(v[i])}: out of range (integers are 64-bit signed)"
            return f"must be an integer, got float {brief(v[i])}"

        return name, says, frac | big
    v = col.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = present & np.isinf(v)
    if nan is not None:
        bad = bad | nan
    return name, lambda i: f"must be finite, got {brief(float(col.iloc[i]))}", bad


def _at(fmt: Callable[[float], str], values: Floats) -> Callable[[int], str]:
    """A row's message from its value."""
    return lambda i: fmt(float(values[i]))


def _always(message: str) -> Callable[[int], str]:
    return lambda i: message


def _nulls_to_none(values: np.ndarray[Any, Any]) -> list[Any]:
    return [
        None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v for v in values
    ]


def _too_many_gaps(col: pd.Series, output_tokens: Floats) -> Mask:
    """Rows whose well-formed ``itl_buckets`` count more gaps than ``output_tokens - 1``."""
    bad = np.zeros(len(col), dtype=bool)
    values = col.to_numpy(dtype=object)
    spec = FIELD_BY_NAME["itl_buckets"]
    for i in np.flatnonzero(col.notna().to_numpy()):
        v = values[i]
        if check_type(spec, v) is None:
            bad[i] = float(np.sum(v)) > max(output_tokens[i] - 1, 0)
    return bad


def _bad_trace_ids(col: pd.Series) -> Mask:
    """Rows whose ``trace_id`` is set but is not a trace id (a non-string is a type problem,
    flagged here too)."""
    present = col.notna().to_numpy()
    text = col[present].astype(str)
    ok = (text.str.fullmatch(TRACE_ID.pattern) & (text != "0" * 32)).to_numpy(dtype=bool)
    bad = present.copy()
    bad[present] = ~ok
    return bad


def validate_frame(
    df: pd.DataFrame, *, path: str | None = None, nan_rows: Mapping[str, Mask] | None = None
) -> None:
    """Check columns, types and value rules of a whole frame; raise ``RecordError`` naming the
    first bad row and its first problem (the order of ``check_values``). ``nan_rows``: rows
    per column holding NaN (not null), which a float column in pandas cannot tell apart."""
    n = len(df)
    nan_rows = nan_rows or {}
    problems: list[Problem] = []
    for spec in FIELDS:
        if spec.name not in df.columns:
            if spec.optional or spec.name in DEFAULTS:
                continue
            raise RecordError("missing column", path=path, field=spec.name)
        col = df[spec.name]
        nan = nan_rows.get(spec.name)
        missing = col.isna().to_numpy()
        if nan is not None:
            missing = missing & ~nan
        if not spec.optional:
            problems.append((spec.name, lambda i: "is missing (null)", missing))
        found = _type_problem(spec, col, nan)
        if found is not None:
            problems.append(found)

    def num(name: str) -> Floats:
        if name not in df.columns:
            return np.full(n, float(DEFAULTS.get(name, np.nan)))
        col = df[name]
        if pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
            return col.to_numpy(dtype=np.float64, na_value=np.nan)
        converted = pd.to_numeric(col.astype(object).where(col.notna(), None), errors="coerce")
        return np.asarray(converted.to_numpy(dtype=np.float64, na_value=np.nan))

    def add(name: str, mask: Mask, says: Callable[[int], str]) -> None:
        problems.append((name, says, mask))

    with np.errstate(invalid="ignore"):
        for name in ("prompt_tokens", "output_tokens", "cached_prompt_tokens", "preemptions"):
            v = num(name)
            add(name, v < 0, _at(lambda x: f"must not be negative, got {int(x)}", v))
        add(
            "cached_prompt_tokens",
            num("cached_prompt_tokens") > num("prompt_tokens"),
            _always("exceeds prompt_tokens"),
        )
        for name in ("preemption_stall_s", "max_itl_s"):
            v = num(name)
            add(name, v < 0, _at(lambda x: f"must not be negative, got {x}", v))
            add(
                name,
                v > MAX_REQUEST_S,
                _at(lambda x: f"is {x:.6g} s: longer than {MAX_REQUEST_S:g} s is not plausible", v),
            )
        for name in TIME_FIELDS:
            v = num(name)
            add(name, np.abs(v) > MAX_TIMESTAMP_S, _at(lambda x: str(implausible_time(x)), v))
        arrival, scheduled, first, finished = (
            num("arrival_s"),
            num("scheduled_s"),
            num("first_token_s"),
            num("finished_s"),
        )
        e2e = finished - arrival
        add(
            "finished_s",
            e2e > MAX_REQUEST_S,
            _at(
                lambda x: (
                    f"is {x:.6g} s after arrival_s: a request longer than "
                    f"{MAX_REQUEST_S:g} s is not plausible (a clock or unit mix-up?)"
                ),
                e2e,
            ),
        )
        for name, mask, message in (
            (
                "scheduled_s",
                scheduled < arrival - TIME_EPS,
                "is before arrival_s (negative queue time)",
            ),
            (
                "first_token_s",
                first < arrival - TIME_EPS,
                "is before arrival_s (first token before arrival)",
            ),
            (
                "first_token_s",
                first < scheduled - TIME_EPS,
                "is before scheduled_s (negative prefill time)",
            ),
            (
                "finished_s",
                finished < arrival - TIME_EPS,
                "is before arrival_s (negative end-to-end time)",
            ),
            (
                "finished_s",
                finished < first - TIME_EPS,
                "is before first_token_s (negative decode time)",
            ),
            ("finished_s", finished < scheduled - TIME_EPS, "is before scheduled_s"),
        ):
            add(name, mask, _always(message))

    if "itl_buckets" in df.columns:
        add(
            "itl_buckets",
            _too_many_gaps(df["itl_buckets"], num("output_tokens")),
            _always("counts more inter-token gaps than output_tokens - 1"),
        )
    if "trace_id" in df.columns:
        add("trace_id", _bad_trace_ids(df["trace_id"]), _always(TRACE_ID_PROBLEM))

    first_bad: tuple[int, int] | None = None
    for order, (_, _, mask) in enumerate(problems):
        if mask.any():
            i = int(np.argmax(mask))
            if first_bad is None or i < first_bad[0]:
                first_bad = (i, order)
    if first_bad is not None:
        i, order = first_bad
        name, says, _ = problems[order]
        raise RecordError(says(i), path=path, row=i + 1, field=name)


_NONE = type(None)
_STATUS = frozenset(s.value for s in Status)
_GAPS = len(ITL_BOUNDS) + 1
_MOST_GAPS = 1 << 40
"""Gap counts above this are left to the row-by-row check (their sum could pass 64 bits)."""


def _allowed(spec: FieldSpec) -> frozenset[type]:
    """The types a value of ``spec`` may have as ``json.loads`` makes it and still pass
    ``check_type`` (an integer field's integral floats aside: left to the row-by-row check)."""
    kinds: set[type] = {list} if spec.kind is tuple else {int} if spec.kind is int else {spec.kind}
    if spec.kind is float:
        kinds.add(int)
    if spec.optional:
        kinds.add(_NONE)
    return frozenset(kinds)


_ALLOWED = {spec.name: _allowed(spec) for spec in FIELDS}


def columns_pass(columns: Mapping[str, list[Any]]) -> bool:
    """Whether every row of ``columns`` (every field of ``FIELDS``, one list each, as
    ``json.loads`` gives the values, a missing required value any object not of its types)
    passes ``check_values``. True is certain; False says only that a row may not (a value out
    of int64 or float range, an integral float in an integer field), for the row-by-row check
    to decide and name."""
    floats: dict[str, Floats] = {}
    ints: dict[str, np.ndarray[Any, np.dtype[np.int64]]] = {}
    for spec in FIELDS:
        col = columns[spec.name]
        if not set(map(type, col)) <= _ALLOWED[spec.name]:
            return False
        try:
            if spec.kind is float:
                v = np.array(col, dtype=np.float64)  # None: NaN
                nan = int(np.count_nonzero(np.isnan(v)))
                if np.isinf(v).any() or nan != (col.count(None) if spec.optional else 0):
                    return False  # infinite, or NaN (a value, where a null is None)
                floats[spec.name] = v
            elif spec.kind is int:
                ints[spec.name] = np.array(col, dtype=np.int64)
        except OverflowError:  # beyond int64 or a float
            return False
    if not set(columns["status"]) <= _STATUS:
        return False
    traces = [v for v in columns["trace_id"] if v is not None]
    if traces and not all(map(is_trace_id, traces)):
        return False
    tokens = ints["prompt_tokens"], ints["output_tokens"], ints["cached_prompt_tokens"]
    if any((v < 0).any() for v in (*tokens, ints["preemptions"])):
        return False
    if (tokens[2] > tokens[0]).any():
        return False
    with np.errstate(invalid="ignore"):  # NaN (None) passes every rule it is in
        for name in ("preemption_stall_s", "max_itl_s"):
            v = floats[name]
            if ((v < 0) | (v > MAX_REQUEST_S)).any():
                return False
        if any((np.abs(floats[name]) > MAX_TIMESTAMP_S).any() for name in TIME_FIELDS):
            return False
        # times within 1e11 s are exact as doubles, so these are Python's comparisons
        arrival, scheduled, first, finished = (
            floats[name] for name in ("arrival_s", "scheduled_s", "first_token_s", "finished_s")
        )
        if (finished - arrival > MAX_REQUEST_S).any():
            return False
        for late, early in (
            (scheduled, arrival),
            (first, arrival),
            (first, scheduled),
            (finished, arrival),
            (finished, first),
            (finished, scheduled),
        ):
            if (late < early - TIME_EPS).any():
                return False
    return _gaps_pass(columns["itl_buckets"], tokens[1])


def _gaps_pass(col: list[Any], output_tokens: np.ndarray[Any, np.dtype[np.int64]]) -> bool:
    """``columns_pass`` for ``itl_buckets``: each list present holds ``_GAPS`` non-negative
    integers, at most ``output_tokens - 1`` in all."""
    rows = [i for i, v in enumerate(col) if v is not None]
    if not rows:
        return True
    lists = [col[i] for i in rows]
    if set(map(len, lists)) != {_GAPS}:
        return False
    if not set(map(type, itertools.chain.from_iterable(lists))) <= {int}:
        return False
    try:
        gaps = np.array(lists, dtype=np.int64)
    except OverflowError:
        return False
    if (gaps < 0).any() or (gaps >= _MOST_GAPS).any():
        return False
    return not (gaps.sum(axis=1) > np.maximum(output_tokens[rows] - 1, 0)).any()
