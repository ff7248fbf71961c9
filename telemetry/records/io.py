"""Read and write request records as JSON lines or Parquet, and as pandas DataFrames.

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
from typing import Any, Final

import numpy as np
import pandas as pd

from telemetry.atomic import atomic_path
from telemetry.records.schema import (
    DEFAULTS,
    FIELD_BY_NAME,
    FIELDS,
    ITL_BOUNDS,
    TIME_EPS,
    RecordError,
    RequestRecord,
    Status,
    check_type,
    check_values,
)

__all__ = [
    "STATUS_DTYPE",
    "add_derived",
    "from_frame",
    "read_records",
    "to_frame",
    "validate_frame",
    "write_records",
]

STATUS_DTYPE = pd.CategoricalDtype([s.value for s in Status])
_JSONL_SUFFIXES: Final = (".jsonl", ".json", ".ndjson")
_PARQUET_SUFFIXES: Final = (".parquet", ".pq")


def _dtype(name: str) -> Any:
    spec = FIELD_BY_NAME[name]
    return STATUS_DTYPE if spec.name == "status" else spec.dtype


def _columns_frame(columns: dict[str, Any], n: int) -> pd.DataFrame:
    data = {}
    for spec in FIELDS:
        values = columns.get(spec.name)
        if values is None:
            values = [DEFAULTS.get(spec.name)] * n
        data[spec.name] = pd.Series(values, dtype=_dtype(spec.name))
    return add_derived(pd.DataFrame(data))


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


def validate_frame(df: pd.DataFrame, *, path: str | None = None) -> None:
    """Check columns, dtypes and value rules of a whole frame; raise on the first bad row.

    Vectorised, so a file of millions of rows is checked in well under a second per million.
    """
    for spec in FIELDS:
        if spec.name not in df.columns:
            if spec.optional or spec.name in DEFAULTS:
                continue
            raise RecordError("missing column", path=path, field=spec.name)
        col = df[spec.name]
        if spec.kind in (int, float) and not pd.api.types.is_numeric_dtype(col.dtype):
            bad = _first_non_numeric(col)
            raise RecordError(
                f"must be a number, got {col.iloc[bad]!r}", path=path, row=bad + 1, field=spec.name
            )
        if spec.kind is int and pd.api.types.is_float_dtype(col.dtype):
            frac = col.to_numpy(dtype=np.float64)
            mask = ~np.isnan(frac) & (frac != np.floor(frac))
            if mask.any():
                i = int(np.argmax(mask))
                raise RecordError(
                    f"must be an integer, got {frac[i]!r}", path=path, row=i + 1, field=spec.name
                )
        if not spec.optional:
            missing = col.isna().to_numpy()
            if missing.any():
                i = int(np.argmax(missing))
                raise RecordError("is missing (null)", path=path, row=i + 1, field=spec.name)
        if spec.kind is tuple:
            _check_gap_counts(df, col, path)
    if "status" in df.columns:
        status = df["status"].astype("string")
        bad_status = ~status.isin([s.value for s in Status]).to_numpy()
        if bad_status.any():
            i = int(np.argmax(bad_status))
            raise RecordError(
                f"must be one of {', '.join(s.value for s in Status)}, got {status.iloc[i]!r}",
                path=path,
                row=i + 1,
                field="status",
            )

    def num(name: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        if name not in df.columns:
            return np.full(len(df), float(DEFAULTS.get(name, np.nan)))
        return df[name].to_numpy(dtype=np.float64, na_value=np.nan)

    arrival, scheduled, first, finished = (
        num("arrival_s"),
        num("scheduled_s"),
        num("first_token_s"),
        num("finished_s"),
    )
    with np.errstate(invalid="ignore"):
        checks: list[tuple[str, str, np.ndarray[Any, np.dtype[np.bool_]]]] = [
            (name, "must not be negative", num(name) < 0)
            for name in (
                "prompt_tokens",
                "output_tokens",
                "cached_prompt_tokens",
                "preemptions",
                "preemption_stall_s",
            )
        ]
        for name in ("arrival_s", "scheduled_s", "first_token_s", "finished_s"):
            v = num(name)
            checks.append((name, "must be finite", np.isinf(v)))
        checks += [
            (
                "cached_prompt_tokens",
                "exceeds prompt_tokens",
                num("cached_prompt_tokens") > num("prompt_tokens"),
            ),
            (
                "scheduled_s",
                "is before arrival_s (negative queue time)",
                scheduled < arrival - TIME_EPS,
            ),
            (
                "first_token_s",
                "is before arrival_s (first token before arrival)",
                first < arrival - TIME_EPS,
            ),
            (
                "first_token_s",
                "is before scheduled_s (negative prefill time)",
                first < scheduled - TIME_EPS,
            ),
            (
                "finished_s",
                "is before arrival_s (negative end-to-end time)",
                finished < arrival - TIME_EPS,
            ),
            (
                "finished_s",
                "is before first_token_s (negative decode time)",
                finished < first - TIME_EPS,
            ),
        ]
    first_bad: tuple[int, str, str] | None = None
    for name, message, mask in checks:
        if mask.any():
            i = int(np.argmax(mask))
            if first_bad is None or i < first_bad[0]:
                first_bad = (i, name, message)
    if first_bad is not None:
        i, name, message = first_bad
        raise RecordError(message, path=path, row=i + 1, field=name)


def _check_gap_counts(df: pd.DataFrame, col: pd.Series, path: str | None) -> None:
    """``itl_buckets``: each present value a list of per-bucket gap counts (see ``ITL_BOUNDS``),
    together at most ``output_tokens - 1`` gaps. Checked as one matrix; row by row only to name
    the first bad row."""
    values = col.to_numpy(dtype=object)
    rows = np.flatnonzero(~pd.isna(col).to_numpy())
    if rows.size == 0:
        return
    out = df["output_tokens"].to_numpy() if "output_tokens" in df.columns else np.zeros(len(df))
    try:
        counts = np.stack([np.asarray(values[i]) for i in rows])
        ok = (
            counts.ndim == 2
            and counts.shape[1] == len(ITL_BOUNDS) + 1
            and counts.dtype.kind in "iuf"
            and bool(np.all((counts >= 0) & (counts == np.floor(counts))))
        )
    except (ValueError, TypeError):
        ok = False
    if ok:
        over = counts.sum(axis=1) > np.maximum(out[rows] - 1, 0)
        if not over.any():
            return
    spec = FIELD_BY_NAME[str(col.name)]
    for i in rows:
        message = check_type(spec, values[i])
        if message is None and int(np.sum(values[i])) > max(int(out[i]) - 1, 0):
            message = "counts more inter-token gaps than output_tokens - 1"
        if message is not None:
            raise RecordError(message, path=path, row=int(i) + 1, field=spec.name)


def _first_non_numeric(col: pd.Series) -> int:
    converted = pd.to_numeric(col, errors="coerce")
    bad = (converted.isna() & col.notna()).to_numpy()
    return int(np.argmax(bad)) if bad.any() else 0


def _normalise(df: pd.DataFrame) -> pd.DataFrame:
    df = df.reset_index(drop=True)
    present = {spec.name: df[spec.name] for spec in FIELDS if spec.name in df.columns}
    return _columns_frame(present, len(df))


def _read_jsonl(path: Path) -> pd.DataFrame:
    name = str(path)
    columns: dict[str, list[Any]] = {spec.name: [] for spec in FIELDS}
    row = 0
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            row += 1
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"not valid JSON ({exc.msg})", path=name, row=lineno) from None
            if not isinstance(obj, dict):
                raise RecordError("not a JSON object", path=name, row=lineno)
            for spec in FIELDS:
                if spec.name not in obj and not spec.optional and spec.name not in DEFAULTS:
                    raise RecordError("is missing", path=name, row=lineno, field=spec.name)
                value = obj.get(spec.name, DEFAULTS.get(spec.name))
                message = check_type(spec, value)
                if message is not None:
                    raise RecordError(message, path=name, row=lineno, field=spec.name)
                columns[spec.name].append(value)
            problem = check_values({k: v[-1] for k, v in columns.items()})
            if problem is not None:
                raise RecordError(problem[1], path=name, row=lineno, field=problem[0])
    return _columns_frame(columns, row)


def read_records(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a ``.jsonl`` or ``.parquet`` record file into a checked DataFrame."""
    p = Path(path)
    name = str(p)
    if not p.exists():
        raise RecordError("no such file", path=name)
    suffix = p.suffix.lower()
    if suffix in _JSONL_SUFFIXES:
        return _read_jsonl(p)
    if suffix in _PARQUET_SUFFIXES:
        try:
            raw = pd.read_parquet(p)
        except Exception as exc:
            raise RecordError(f"not a readable Parquet file ({exc})", path=name) from None
        validate_frame(raw, path=name)
        return _normalise(raw)
    raise RecordError("unknown record format: use .jsonl or .parquet", path=name)


def write_records(
    path: str | os.PathLike[str], records: pd.DataFrame | Sequence[RequestRecord]
) -> int:
    """Write records atomically (JSONL or Parquet by suffix); return the number written."""
    p = Path(path)
    df = records if isinstance(records, pd.DataFrame) else to_frame(records)
    validate_frame(df, path=str(p))
    stored = df[[spec.name for spec in FIELDS if spec.name in df.columns]]
    suffix = p.suffix.lower()
    if suffix not in _JSONL_SUFFIXES + _PARQUET_SUFFIXES:
        raise RecordError("unknown record format: use .jsonl or .parquet", path=str(p))
    with atomic_path(p) as tmp:
        if suffix in _PARQUET_SUFFIXES:
            out = stored.copy()
            out["status"] = out["status"].astype("string")
            out.to_parquet(tmp, index=False)
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                for row in _json_rows(stored):
                    fh.write(json.dumps(row, separators=(",", ":")))
                    fh.write("\n")
    return len(stored)


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
