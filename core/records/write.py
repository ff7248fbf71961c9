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

__all__ = ["JSONL_SUFFIXES", "PARQUET_SUFFIXES", "json_line", "write_records"]

JSONL_SUFFIXES: Final = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES: Final = (".parquet", ".pq")
_KINDS: Final = tuple((spec.name, spec.kind) for spec in FIELDS)


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
            pq.write_table(table, tmp)
        return len(records)
    raise RecordError("unknown record format: use .jsonl or .parquet", path=str(p))
