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
from typing import Any, Final

from fleetwatch.core.atomic import atomic_path
from fleetwatch.core.records.schema import FIELDS, RecordError, RequestRecord

__all__ = [
    "CHECKED_KEY",
    "JSONL_SUFFIXES",
    "PARQUET_SUFFIXES",
    "checked_rows",
    "json_line",
    "parquet_layout",
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


def parquet_layout(table: Any) -> dict[str, Any]:
    """``pyarrow.parquet.write_table``'s options for a record file: zstd; dictionaries for the
    label, status and count columns (a few values a file); the floats (times, stalls) as
    ``BYTE_STREAM_SPLIT``, not dictionaries: a dictionary of timestamps holds each value once
    more and its indices too (measured on 100 M records: a fifth larger, and DuckDB decodes
    a time column about 2.5 times slower)."""
    import pyarrow as pa

    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    coded = [f.name for f in table.schema if f.name not in floats and f.name not in _UNIQUE]
    return {
        "compression": "zstd",
        "use_dictionary": coded,
        "column_encoding": dict.fromkeys(floats, "BYTE_STREAM_SPLIT"),
    }


def stamp_checked(table: Any) -> Any:
    """``table`` with the footer stamp saying its rows passed the record checks (``CHECKED_KEY``:
    the checks' version and the rows stamped; a file rewritten with other rows by a tool that
    keeps the schema's metadata no longer matches its count, and is checked again). Only a
    writer that checked every row stamps: ``fleetwatch.records.write_records`` and
    ``records compact``."""
    meta = dict(table.schema.metadata or {})
    meta[CHECKED_KEY.encode()] = json.dumps(
        {"checks": CHECKS_VERSION, "rows": table.num_rows}
    ).encode()
    return table.replace_schema_metadata(meta)


def checked_rows(value: str | bytes | None) -> int | None:
    """The rows a ``CHECKED_KEY`` stamp vouches for; None when there is none or it is of another
    version of the checks, or not understood."""
    if value is None:
        return None
    try:
        got = json.loads(value)
        rows = got["rows"] if got["checks"] == CHECKS_VERSION else None
    except (ValueError, TypeError, KeyError):
        return None
    return rows if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 0 else None


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
