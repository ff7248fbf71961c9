"""Write request records as JSON lines or Parquet, inside a serving process: no pandas.

Records are checked when they are built (``RequestRecord`` is frozen), so they go straight to the
file: JSON lines through ``json``, Parquet through pyarrow (the ``parquet`` extra of
fleetwatch-telemetry; imported only when a Parquet file is written). The columns and their types
are those the analysis side writes from a DataFrame (``fleetwatch.records.write_records``), so a
reader cannot tell the two apart. Writes go to a temporary file renamed into place: a failed write
leaves nothing behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

from fleetwatch.core.atomic import atomic_path
from fleetwatch.core.records.schema import FIELDS, RecordError, RequestRecord

__all__ = [
    "CHECKED_KEY",
    "FINGERPRINTED",
    "JSONL_SUFFIXES",
    "PARQUET_SUFFIXES",
    "Stamp",
    "json_line",
    "parquet_layout",
    "read_stamp",
    "stamp_checked",
    "write_records",
]

JSONL_SUFFIXES: Final = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES: Final = (".parquet", ".pq")
_KINDS: Final = tuple((spec.name, spec.kind) for spec in FIELDS)
_UNIQUE: Final = ("request_id", "trace_id")
"""String columns of a value a row: a dictionary of them would hold every value twice."""

CHECKED_KEY: Final = "fleetwatch.records.checked"
"""The Parquet footer key of a file whose rows passed the record checks when it was written
(``stamp_checked``): a reader may count its rows from the footer and skip checking them again."""
CHECKS_VERSION: Final = 1
"""The record checks' version in ``CHECKED_KEY``: a stamp of another version is not trusted, so
a file written before a check was added is checked again when read."""
FINGERPRINTED: Final = (
    "replica",
    "arrival_s",
    "scheduled_s",
    "first_token_s",
    "finished_s",
    "intended_s",
    "prompt_tokens",
    "output_tokens",
    "cached_prompt_tokens",
    "preemptions",
    "preemption_stall_s",
    "max_itl_s",
)
"""The columns the record checks read, whose nulls, least and greatest value a stamp holds: a
reader trusts the stamp only where the footer's statistics still say the same."""


class Stamp(NamedTuple):
    """What a ``CHECKED_KEY`` stamp says: the rows checked, and per ``FINGERPRINTED`` column the
    file holds, its nulls, least and greatest value (None where every value is null)."""

    rows: int
    columns: dict[str, tuple[int, float | str | None, float | str | None]]


def parquet_layout(table: Any) -> dict[str, Any]:
    """``pyarrow.parquet.write_table``'s options for a record file: zstd; dictionaries for the
    label, status and count columns (a few values a file); the floats (times, stalls) plain:
    a dictionary of timestamps holds each value once more and its indices too (measured on
    10 M records: files a quarter larger, and DuckDB decodes a time column 1.4 times slower).
    ``BYTE_STREAM_SPLIT`` would decode faster still, but Spark's vectorized reader reads it
    only from 2026's releases: a compacted dataset is kept for engines of every age."""
    import pyarrow as pa

    floats = {f.name for f in table.schema if pa.types.is_floating(f.type)}
    coded = [f.name for f in table.schema if f.name not in floats and f.name not in _UNIQUE]
    return {"compression": "zstd", "use_dictionary": coded}


def stamp_checked(table: Any) -> Any:
    """``table`` with the footer stamp saying its rows passed the record checks (``CHECKED_KEY``:
    the checks' version, the rows, and the ``FINGERPRINTED`` columns' nulls and extremes). A
    tool that reads a stamped file and writes it back keeps the stamp (pyarrow keeps a schema's
    metadata): where it changed the rows' number, a column's nulls or extremes, the footer no
    longer matches and the rows are checked again; a tool that changes values within those
    bounds should drop the key. Only a writer that checked every row stamps:
    ``fleetwatch.records.write_records`` and ``records compact``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns: dict[str, list[Any]] = {}
    for name in FINGERPRINTED:
        if name not in table.column_names:
            continue
        col = table.column(name)
        if pa.types.is_floating(col.type):
            col = pc.cast(col, pa.float64())
        ends = pc.min_max(col)
        columns[name] = [col.null_count, ends["min"].as_py(), ends["max"].as_py()]
    meta = dict(table.schema.metadata or {})
    meta[CHECKED_KEY.encode()] = json.dumps(
        {"checks": CHECKS_VERSION, "rows": table.num_rows, "columns": columns}
    ).encode()
    return table.replace_schema_metadata(meta)


def read_stamp(value: str | bytes | None) -> Stamp | None:
    """What a ``CHECKED_KEY`` stamp vouches for; None when there is none, it is of another
    version of the checks, or it is not understood."""
    if value is None:
        return None
    try:
        got = json.loads(value)
        if got["checks"] != CHECKS_VERSION:
            return None
        rows, columns = got["rows"], got["columns"]
        out = {}
        for name, (nulls, low, high) in columns.items():
            if not _count(nulls) or not (_end(low) and _end(high)):
                return None
            out[str(name)] = (int(nulls), low, high)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return Stamp(rows, out) if _count(rows) else None


def _count(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _end(v: object) -> bool:
    return v is None or (isinstance(v, (int, float, str)) and not isinstance(v, bool))


def json_line(r: RequestRecord) -> str:
    """One record as its JSON line: every stored field in ``FIELDS`` order, null where unset."""
    row: dict[str, Any] = {}
    for name, kind in _KINDS:
        v = getattr(r, name)
        if v is not None:
            if kind is tuple:
                v = [int(x) for x in v]
            else:
                v = int(v) if kind is int else float(v) if kind is float else str(v)
        row[name] = v
    return json.dumps(row, separators=(",", ":")) + "\n"


def _arrow_table(records: Sequence[RequestRecord]) -> Any:
    import pyarrow as pa

    types = {str: pa.large_string(), float: pa.float64(), int: pa.int64()}
    arrays = []
    for name, kind in _KINDS:
        values = [getattr(r, name) for r in records]
        if kind is tuple:
            arrays.append(pa.array(values, type=pa.list_(pa.int64())))
        elif kind is str:
            arrays.append(pa.array([None if v is None else str(v) for v in values], types[str]))
        else:
            arrays.append(pa.array(values, type=types[kind]))
    return pa.Table.from_arrays(arrays, names=[name for name, _ in _KINDS])


def write_records(path: str | os.PathLike[str], records: Sequence[RequestRecord]) -> int:
    """Write records atomically (JSON lines or Parquet by suffix); return the number written."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        with atomic_path(p) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(json_line(r) for r in records)
        return len(records)
    if suffix in PARQUET_SUFFIXES:
        import pyarrow.parquet as pq

        table = _arrow_table(records)
        with atomic_path(p) as tmp:
            pq.write_table(table, tmp, **parquet_layout(table))
        return len(records)
    raise RecordError("unknown record format: use .jsonl or .parquet", path=str(p))
