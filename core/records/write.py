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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

from fleetwatch.core.atomic import atomic_path
from fleetwatch.core.records.schema import FIELDS, RecordError, RequestRecord

__all__ = [
    "CHECKED_KEY",
    "FINGERPRINTED",
    "JSONL_SUFFIXES",
    "PARQUET_SUFFIXES",
    "TALLIED",
    "Stamp",
    "Tallies",
    "json_line",
    "parquet_layout",
    "read_stamp",
    "record_schema",
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


class Tallies(NamedTuple):
    """What a stamp counts and sums of its file's rows, each column's default in a null's place
    (as a reader fills it, ``fleetwatch.records.engine.default_sql``): enough for per-replica
    counts and sums with no scan of a compacted dataset (``fleet outliers``). Written where the
    file holds every column they read (``TALLIED``)."""

    status: dict[str, int]
    """Rows per status."""
    error_types: dict[str, int]
    """Rows of status ``error`` per error type, those naming one."""
    length: int
    """Rows whose finish reason is ``length``."""
    ok_empty: int
    """Ok rows of no output token."""
    ok_short: int
    """Ok rows of fewer than two output tokens (or none said)."""
    ok_untimed: int
    """Ok rows lacking ``arrival_s``, ``first_token_s`` or ``finished_s``."""
    sums: dict[str, int]
    """``output_tokens``, ``ok_output_tokens`` (of ok rows), ``output_tokens_squared``,
    ``prompt_tokens`` and ``cached_prompt_tokens`` summed (a null as 0)."""


TALLIED: Final = (
    "status",
    "error_type",
    "finish_reason",
    "arrival_s",
    "first_token_s",
    "finished_s",
    "prompt_tokens",
    "output_tokens",
    "cached_prompt_tokens",
)
"""The columns ``Tallies`` read."""
_SUMS: Final = (
    "output_tokens",
    "ok_output_tokens",
    "output_tokens_squared",
    "prompt_tokens",
    "cached_prompt_tokens",
)


class Stamp(NamedTuple):
    """What a ``CHECKED_KEY`` stamp says: the rows checked, and per ``FINGERPRINTED`` column the
    file holds (and ``TALLIED`` column, where the stamp tallies), its nulls, least and greatest
    value (None where every value is null); and the rows' ``Tallies`` where the stamp holds them
    (None otherwise, or where they are not understood)."""

    rows: int
    columns: dict[str, tuple[int, float | str | None, float | str | None]]
    tallies: Tallies | None = None


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
    the checks' version, the rows, and the ``FINGERPRINTED`` columns' nulls and extremes), and,
    where it holds every ``TALLIED`` column, their ``Tallies`` (those columns' nulls and
    extremes then in the stamp too). A tool that reads a stamped file and writes it back keeps
    the stamp (pyarrow keeps a schema's metadata): where it changed the rows' number, a
    column's nulls or extremes, or dropped a column, the footer no longer matches and the rows
    are checked and counted again; a tool that changes values within those bounds (an ok
    request relabelled failed) should drop the key. Only a writer that checked every row
    stamps: ``fleetwatch.records.write_records`` and ``records compact``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tallied = all(c in table.column_names for c in TALLIED)
    named = dict.fromkeys([*FINGERPRINTED, *(TALLIED if tallied else ())])
    columns: dict[str, list[Any]] = {}
    for name in named:
        if name not in table.column_names:
            continue
        col = table.column(name)
        if pa.types.is_floating(col.type):
            col = pc.cast(col, pa.float64())
        elif pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        ends = pc.min_max(col)
        columns[name] = [col.null_count, ends["min"].as_py(), ends["max"].as_py()]
    said: dict[str, Any] = {"checks": CHECKS_VERSION, "rows": table.num_rows, "columns": columns}
    if tallied:
        said["tallies"] = _tallies(table)._asdict()
    meta = dict(table.schema.metadata or {})
    meta[CHECKED_KEY.encode()] = json.dumps(said).encode()
    return table.replace_schema_metadata(meta)


def _tallies(table: Any) -> Tallies:
    """``table``'s ``Tallies``: each ``TALLIED`` column with a default filled where null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from fleetwatch.core.records.schema import DEFAULTS

    def col(name: str) -> Any:
        c = table.column(name)
        if pa.types.is_dictionary(c.type):
            c = c.cast(c.type.value_type)
        if name in DEFAULTS and c.null_count:
            c = pc.fill_null(c, pa.scalar(DEFAULTS[name], c.type))
        return c

    def count(mask: Any) -> int:
        return int(pc.sum(pc.cast(pc.fill_null(mask, False), pa.int64())).as_py() or 0)

    def total(values: Any) -> int:  # exact: an int64 sum would wrap past 2**63
        return int(pc.sum(pc.cast(values, pa.decimal128(38, 0))).as_py() or 0)

    status = col("status")
    ok = pc.fill_null(pc.equal(status, "ok"), False)
    output = col("output_tokens")
    errors = pc.filter(col("error_type"), pc.fill_null(pc.equal(status, "error"), False))
    untimed = pc.or_(
        pc.or_(pc.is_null(col("arrival_s")), pc.is_null(col("first_token_s"))),
        pc.is_null(col("finished_s")),
    )
    short = pc.or_kleene(pc.is_null(output), pc.less(output, 2))
    out = pc.fill_null(output, 0)
    return Tallies(
        status=_counts(status),
        error_types=_counts(errors),
        length=count(pc.equal(col("finish_reason"), "length")),
        ok_empty=count(pc.and_(ok, pc.equal(output, 0))),
        ok_short=count(pc.and_(ok, short)),
        ok_untimed=count(pc.and_(ok, untimed)),
        sums={
            "output_tokens": total(out),
            "ok_output_tokens": total(pc.filter(out, ok)),
            "output_tokens_squared": sum(v * v * n for v, n in _counts(out, ints=True).items()),
            "prompt_tokens": total(pc.fill_null(col("prompt_tokens"), 0)),
            "cached_prompt_tokens": total(pc.fill_null(col("cached_prompt_tokens"), 0)),
        },
    )


def _counts(values: Any, *, ints: bool = False) -> dict[Any, int]:
    """Each value of ``values`` (nulls left out) and its rows."""
    import pyarrow.compute as pc

    got = pc.value_counts(values.drop_null())
    return {
        (int(v) if ints else str(v)): int(n)
        for v, n in zip(
            got.field("values").to_pylist(), got.field("counts").to_pylist(), strict=True
        )
    }


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
    return Stamp(rows, out, _read_tallies(got.get("tallies"), rows)) if _count(rows) else None


def _read_tallies(said: object, rows: object) -> Tallies | None:
    """The ``Tallies`` a stamp says, where every count is one, its statuses count its rows and
    no count holds more than the rows it is among; None otherwise."""
    if not isinstance(said, dict) or not isinstance(rows, int) or not _count(rows):
        return None
    try:
        got = Tallies(**said)
        named = (got.status, got.error_types, got.sums)
        if not all(isinstance(d, dict) and all(_count(n) for n in d.values()) for d in named):
            return None
        ends = (got.length, got.ok_empty, got.ok_short, got.ok_untimed)
        if not all(_count(n) for n in ends) or set(got.sums) != set(_SUMS):
            return None
        ok = got.status.get("ok", 0)
        if sum(got.error_types.values()) > got.status.get("error", 0) or got.length > rows:
            return None
        if not got.ok_empty <= got.ok_short <= ok or got.ok_untimed > ok:
            return None
    except TypeError:
        return None
    return got if sum(got.status.values()) == rows else None


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


def record_schema(names: Iterable[str] | None = None) -> Any:
    """The Arrow schema every record file is written with: each stored column (or those of
    ``names``, in the order of ``FIELDS``) with one type whatever its values (strings
    ``large_string``, times ``float64``, counts ``int64``, ``itl_buckets`` a list of ``int64``),
    so a column null in every row of a file is typed as in any other: the files a fleet writes
    share one schema, which a reader merging their schemas (Spark) needs and a reader grouping
    files by schema (``records.engine.duck``) reads in one scan."""
    import pyarrow as pa

    types = {str: pa.large_string(), float: pa.float64(), int: pa.int64()}
    gaps = pa.list_(pa.field("element", pa.int64()))  # as a Parquet file's list reads back
    wanted = None if names is None else set(names)
    return pa.schema(
        [
            (name, gaps if kind is tuple else types[kind])
            for name, kind in _KINDS
            if wanted is None or name in wanted
        ]
    )


def _arrow_table(records: Sequence[RequestRecord]) -> Any:
    import pyarrow as pa

    schema = record_schema()
    arrays = []
    for field in schema:
        values = [getattr(r, field.name) for r in records]
        if pa.types.is_large_string(field.type):
            values = [None if v is None else str(v) for v in values]
        arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


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
