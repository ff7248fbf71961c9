"""Read and write request records as JSON lines or Parquet, and as pandas DataFrames (the analysis side).

The DataFrame is the bulk form every analysis uses: one row per request, the stored columns with
explicit dtypes (see ``FIELDS``) plus the derived durations (``DERIVED_COLUMNS``), NaN where a phase
did not happen. Files are checked on read; a problem raises ``RecordError`` naming file, row, field.
Writes go to a temporary file that is renamed into place, so a failed write leaves nothing behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fleetwatch.core.atomic import atomic_path
from fleetwatch.core.records.schema import (
    DEFAULTS,
    FIELD_BY_NAME,
    FIELDS,
    RecordError,
    RequestRecord,
    Status,
    check_type,
    check_values,
)
from fleetwatch.core.records.write import JSONL_SUFFIXES, PARQUET_SUFFIXES, record_schema
from fleetwatch.core.records.write import write_records as write_record_list
from fleetwatch.records.validate import columns_pass, validate_frame

if TYPE_CHECKING:
    import pyarrow as pa

    from fleetwatch.records.filters import RecordFilter

__all__ = [
    "STATUS_DTYPE",
    "add_derived",
    "columns_frame",
    "from_frame",
    "parquet_table",
    "read_columns",
    "read_records",
    "to_frame",
    "validate_frame",
    "write_records",
]

STATUS_DTYPE = pd.CategoricalDtype([s.value for s in Status])


def _dtype(name: str) -> Any:
    spec = FIELD_BY_NAME[name]
    return STATUS_DTYPE if spec.name == "status" else spec.dtype


def _columns_frame(columns: dict[str, Any], n: int) -> pd.DataFrame:
    data = {}
    for spec in FIELDS:
        values = columns.get(spec.name)
        if values is None:
            values = [DEFAULTS.get(spec.name)] * n
        data[spec.name] = _series(spec.name, values)
    return add_derived(pd.DataFrame(data))


def _series(name: str, values: Any) -> pd.Series:
    """``pd.Series(values, dtype=_dtype(name))``; a list of checked values (``read_columns``,
    ``to_frame``) made straight into the column's array, where pandas looks at each value again
    (a 250,000-row batch's frame in 0.8-0.9 s of CPU against 1.5 s)."""
    dtype = _dtype(name)
    data = values
    if isinstance(values, list) and dtype in ("float64", "int64"):
        data = np.array(values, dtype=dtype)
    elif isinstance(values, list) and dtype == "string" and pd.StringDtype().storage == "pyarrow":
        import pyarrow as pa

        data = pd.arrays.ArrowStringArray(pa.chunked_array([pa.array(values, pa.large_string())]))
    out: pd.Series = pd.Series(data, dtype=dtype, copy=False)
    return out


def add_derived(df: pd.DataFrame) -> pd.DataFrame:
    """Add (or refresh) the derived duration columns, in seconds, NaN where undefined."""
    arrival = df["arrival_s"].to_numpy(dtype=np.float64)
    scheduled = df["scheduled_s"].to_numpy(dtype=np.float64)
    first = df["first_token_s"].to_numpy(dtype=np.float64)
    finished = df["finished_s"].to_numpy(dtype=np.float64)
    out_tokens = df["output_tokens"].to_numpy(dtype=np.float64)
    df = df.copy()
    df["queue_s"] = scheduled - arrival
    df["prefill_s"] = first - scheduled
    df["decode_s"] = finished - first
    df["ttft_s"] = first - arrival
    df["e2e_s"] = finished - arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = (finished - first) / (out_tokens - 1.0)
    df["tpot_s"] = np.where(out_tokens >= 2, tpot, np.nan)
    return df


def to_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """Records to a DataFrame with explicit dtypes and derived columns."""
    rows = [r.to_dict() for r in records]
    columns = {spec.name: [row[spec.name] for row in rows] for spec in FIELDS}
    return _columns_frame(columns, len(rows))


def from_frame(df: pd.DataFrame, *, path: str | None = None) -> list[RequestRecord]:
    """A checked DataFrame back to records (slow for millions of rows: analyses use the frame)."""
    validate_frame(df, path=path)
    stored = df[[spec.name for spec in FIELDS]].astype(object)
    stored = stored.where(pd.notna(stored), None)
    out = []
    for row in stored.itertuples(index=False, name=None):
        values = dict(zip((spec.name for spec in FIELDS), row, strict=True))
        for spec in FIELDS:
            v = values[spec.name]
            if v is not None and spec.kind is tuple:
                values[spec.name] = tuple(int(x) for x in v)
            elif v is not None and spec.kind is int:
                values[spec.name] = int(v)
            elif v is not None and spec.kind is float:
                values[spec.name] = float(v)
        out.append(RequestRecord.from_dict(values))
    return out


def _normalise(df: pd.DataFrame) -> pd.DataFrame:
    df = df.reset_index(drop=True)
    present = {spec.name: df[spec.name] for spec in FIELDS if spec.name in df.columns}
    return _columns_frame(present, len(df))


def columns_frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    """The frame of checked column values (``read_columns``; several files' lists may be joined
    first): one frame for many small files costs far less than a frame each."""
    return _columns_frame(columns, len(next(iter(columns.values()), [])))


_DECODE = json.JSONDecoder().decode
"""``json.loads`` of a string."""
_NO_VALUE = object()
"""A required field's value where its key is missing (no type allows it)."""
_FILLS = {
    spec.name: DEFAULTS.get(spec.name, None if spec.optional else _NO_VALUE) for spec in FIELDS
}


_CHUNK_LINES = 1 << 14
"""Lines parsed before their columns are checked (their dicts held only that long)."""


def read_columns(path: str | os.PathLike[str]) -> dict[str, list[Any]]:
    """A JSON-lines record file's values, checked as ``read_records`` checks them, as one list
    per stored field (every field of ``FIELDS``, defaults filled in).

    The lines are parsed ``_CHUNK_LINES`` at a time, up to the first that is not a JSON object;
    a chunk's columns are checked whole (``validate.columns_pass``: a type set a column, the
    rules on arrays), and only where a row may fail are its rows checked one by one
    (``_check_rows``), so the error is the first problem in the file's order, as a reading line
    by line meets it: about a third of the CPU of checking each row in Python."""
    name = str(path)
    columns: dict[str, list[Any]] = {key: [] for key in _FILLS}
    rows: list[dict[str, Any]] = []
    at: list[int] = []
    stop: RecordError | None = None

    def checked() -> None:
        part = {key: [row.get(key, fill) for row in rows] for key, fill in _FILLS.items()}
        if not columns_pass(part):
            _check_rows(rows, at, name)  # the first row at fault (before a line that stopped)
        for key, values in part.items():
            columns[key] += values
        rows.clear()
        at.clear()

    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = _DECODE(line)
                except (ValueError, RecursionError) as exc:  # (an integer of 4,300 digits or
                    # more, nesting deeper than the stack: not JSON a record file holds)
                    said = exc.msg if isinstance(exc, json.JSONDecodeError) else _said(exc)
                    stop = RecordError(f"not valid JSON ({said})", path=name, row=lineno)
                    break
                if not isinstance(obj, dict):
                    stop = RecordError("not a JSON object", path=name, row=lineno)
                    break
                rows.append(obj)
                at.append(lineno)
                if len(rows) == _CHUNK_LINES:
                    checked()
    except UnicodeDecodeError:
        stop = RecordError("not UTF-8 text, so not JSON lines", path=name)
    checked()
    if stop is not None:
        raise stop
    return columns


def _said(exc: Exception) -> str:
    """What a parse that is not ``json``'s own error says, briefly."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split(";")[0].split(":")[0]


def _check_rows(rows: Sequence[dict[str, Any]], at: Sequence[int], name: str) -> None:
    """Each parsed line checked in order, field by field: ``RecordError`` for the first
    problem, naming its line."""
    for lineno, obj in zip(at, rows, strict=True):
        row = {}
        for spec in FIELDS:
            if spec.name not in obj and not spec.optional and spec.name not in DEFAULTS:
                raise RecordError("is missing", path=name, row=lineno, field=spec.name)
            value = obj.get(spec.name, DEFAULTS.get(spec.name))
            message = check_type(spec, value)
            if message is not None:
                raise RecordError(message, path=name, row=lineno, field=spec.name)
            row[spec.name] = value
        problem = check_values(row)
        if problem is not None:
            raise RecordError(problem[1], path=name, row=lineno, field=problem[0])


def _read_parquet(
    path: Path, where: RecordFilter | None = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The file's columns, and the rows of each floating-point column that hold NaN (not null):
    pandas shows both as NaN, and JSON lines refuse NaN, so the check must see them apart.

    With ``where``, the filter is pushed into the read (row groups outside it are skipped) when
    the file stores every column it reads; the rows read are checked as ever."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        filters = None
        if where is not None:
            stored = set(pq.read_schema(path).names)
            if set(where.columns()) <= stored:
                filters = where.parquet_filters()
        table = pq.read_table(path, filters=filters)
    except Exception as exc:
        message = " ".join(str(exc).split())[:200]
        raise RecordError(f"not a readable Parquet file ({message})", path=str(path)) from None
    nan_rows: dict[str, Any] = {}
    for name in table.column_names:
        col = table.column(name)
        if name in FIELD_BY_NAME and pa.types.is_floating(col.type):
            nan = pc.fill_null(pc.is_nan(col), False).to_numpy(zero_copy_only=False)
            if nan.any():
                nan_rows[name] = np.asarray(nan, dtype=bool)
    return table.to_pandas(), nan_rows


def read_records(
    path: str | os.PathLike[str], *, where: RecordFilter | None = None
) -> pd.DataFrame:
    """Read a ``.jsonl`` or ``.parquet`` record file into a checked DataFrame; with ``where``,
    only its matching rows (pushed into the read for Parquet; JSON lines are checked whole, then
    filtered)."""
    p = Path(path)
    name = str(p)
    if not p.exists():
        raise RecordError("no such file", path=name)
    if p.is_dir():
        raise RecordError("is a directory, not a record file", path=name)
    suffix = p.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        frame = columns_frame(read_columns(p))
    elif suffix in PARQUET_SUFFIXES:
        raw, nan_rows = _read_parquet(p, where)
        validate_frame(raw, path=name, nan_rows=nan_rows)
        frame = _normalise(raw)
    else:
        raise RecordError("unknown record format: use .jsonl or .parquet", path=name)
    return frame if where is None else where.apply(frame)


def write_records(
    path: str | os.PathLike[str], records: pd.DataFrame | Sequence[RequestRecord]
) -> int:
    """Write records atomically (JSONL or Parquet by suffix); return the number written."""
    p = Path(path)
    suffix = p.suffix.lower()
    if not isinstance(records, pd.DataFrame) and suffix in JSONL_SUFFIXES:
        # Records were checked when built (frozen): straight to JSON lines, no frame.
        return write_record_list(p, records)
    df = records if isinstance(records, pd.DataFrame) else to_frame(records)
    validate_frame(df, path=str(p))
    stored = df[[spec.name for spec in FIELDS if spec.name in df.columns]]
    if suffix not in JSONL_SUFFIXES + PARQUET_SUFFIXES:
        raise RecordError("unknown record format: use .jsonl or .parquet", path=str(p))
    with atomic_path(p) as tmp:
        if suffix in PARQUET_SUFFIXES:
            import pyarrow.parquet as pq

            from fleetwatch.core.records.write import parquet_layout, stamp_checked

            table = parquet_table(stored)  # every row checked above (``validate_frame``)
            pq.write_table(stamp_checked(table), tmp, **parquet_layout(table))
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                for row in _json_rows(stored):
                    fh.write(json.dumps(row, separators=(",", ":")))
                    fh.write("\n")
    return len(stored)


def parquet_table(df: pd.DataFrame) -> pa.Table:
    """A checked frame's stored columns as the Arrow table a Parquet record file holds, typed
    by ``record_schema`` whatever the values (a column null in every row as in any other; status
    a string, not a category; derived columns left out: they are computed on read)."""
    import pyarrow as pa

    out = df[[spec.name for spec in FIELDS if spec.name in df.columns]].copy()
    out["status"] = out["status"].astype("string")
    return pa.Table.from_pandas(out, schema=record_schema(out.columns), preserve_index=False)


def _json_rows(df: pd.DataFrame) -> Iterable[dict[str, Any]]:
    obj = df.astype(object)
    obj = obj.where(pd.notna(obj), None)
    names = list(obj.columns)
    kinds = [FIELD_BY_NAME[n].kind for n in names]
    for values in obj.itertuples(index=False, name=None):
        row = {}
        for name, kind, v in zip(names, kinds, values, strict=True):
            if v is not None and kind is tuple:
                v = [int(x) for x in v]
            elif v is not None:
                v = int(v) if kind is int else float(v) if kind is float else str(v)
            row[name] = v
        yield row
