"""The Parquet files' footers, read once for an engine's life: each file's schema, its rows, its
stamp (``core.records.write.CHECKED_KEY``) and the statistics the engine takes from them; and
what they say without a scan: a column's one value a file (``one_value``, ``Footers.pinned``),
each replica's span (``Footers.spans``), whether the files vouch for their rows
(``Footers.vouched``: each stamp against its footer).

DuckDB reads footers again for each metadata function (``parquet_schema``,
``parquet_kv_metadata``, ``parquet_metadata``: 0.2 to 0.8 s of CPU each for 2,800 files, none
of them cached for the next); pyarrow reads one in about 0.15 ms with all of these in it. A file
pyarrow cannot read (or whose statistics it cannot decode) gives ``None`` for the dataset, and
the engine reads it through DuckDB as before, which names the file at fault.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from fleetwatch.core.records.write import Stamp

__all__ = ["ColumnStats", "Footer", "Footers", "Vouched", "one_value", "read_footers"]


_COMPARED = 64
"""Distinct schemas a file's is compared with. A dataset of more is read by one scan matching
columns by name anyway (``duck._MAX_SCHEMAS``, fewer than these), so a file of a schema beyond
them is a group of its own, and only its columns' names are kept."""
_ALONE = -1
"""``Footer.shape`` of a file whose schema was not compared (``_COMPARED``)."""


class ColumnStats(NamedTuple):
    """One column's statistics over a file's row groups."""

    nulls: int | None
    """Nulls in the file; None where a row group does not count them."""
    low: Any
    """The least value of the row groups that state one, as pyarrow gives it (a float, an
    integer or a string for the record columns; bytes, a decimal or a date for others)."""
    high: Any
    """The greatest."""
    bounded: bool
    """Whether every row group holding a value states its least and greatest value (a NaN
    states none; a group of nulls only has none to state)."""
    doubles: bool
    """Whether the column is stored as doubles (a float32's statistics are rounded)."""


@dataclass(frozen=True, slots=True)
class Footer:
    """What one Parquet file's footer says."""

    path: Path
    rows: int
    shape: int
    """The file's schema: its index in ``Footers.shapes``, or ``_ALONE``."""
    stamp: bytes | None
    """The value under the key asked for, if any."""
    stats: dict[str, ColumnStats]
    """Of the columns asked for that the file holds as top-level leaves."""
    names: tuple[str, ...] = ()
    """The file's top-level columns, where its schema is ``_ALONE``."""


@dataclass(frozen=True, slots=True)
class Footers:
    """A dataset's footers, and its distinct schemas (pyarrow's ``ParquetSchema``: names,
    types, nesting and order, compared whole), in order of first appearance: each kept with
    the footer of its first file (a schema holds its file's metadata), at most ``_COMPARED``
    and one."""

    files: list[Footer]
    shapes: list[Any]

    def groups(self) -> list[list[Path]]:
        """The files grouped by their schema, in order of first appearance (a file of a schema
        not compared a group of its own)."""
        out: list[list[Path]] = [[] for _ in self.shapes]
        for f in self.files:
            if f.shape == _ALONE:
                out.append([f.path])
            else:
                out[f.shape].append(f.path)
        return out

    def names(self, files: Iterable[Path]) -> set[str]:
        """The top-level columns any of ``files`` holds."""
        wanted = set(files)
        mine = [f for f in self.files if f.path in wanted]
        held = {f.shape for f in mine if f.shape != _ALONE}
        out = {n for at in held for n in self.shapes[at].to_arrow_schema().names}
        return out.union(*(f.names for f in mine if f.shape == _ALONE))

    def pinned(self, column: str) -> list[str] | None:
        """The values of ``column``, sorted, where each file's statistics say one value and no
        null (a compacted dataset's files, one replica each); None otherwise."""
        values = set()
        for f in self.files:
            value = one_value(f.stats.get(column))
            if value is None:
                return None
            values.add(value)
        return sorted(values) or None

    def spans(self) -> dict[tuple[str, str], tuple[float, float]] | None:
        """Per (model, replica) the first ``arrival_s`` and the last ``finished_s`` of its rows,
        where the statistics say them exactly: each file holding one model and one replica
        with no null and stating both times' least and greatest value as doubles; None
        otherwise."""
        out: dict[tuple[str, str], tuple[float, float]] = {}
        for f in self.files:
            if not f.rows:
                continue
            m, r = one_value(f.stats.get("model")), one_value(f.stats.get("replica"))
            a, z = f.stats.get("arrival_s"), f.stats.get("finished_s")
            if m is None or r is None or a is None or z is None:
                return None
            if not all(c.nulls == 0 and c.bounded and c.doubles for c in (a, z)):
                return None
            first, last = out.get((m, r), (math.inf, -math.inf))
            out[(m, r)] = (min(first, float(a.low)), max(last, float(z.high)))
        return out or None

    def vouched(self, read: Iterable[str], required: Iterable[str]) -> Vouched | None:
        """``Vouched`` where every file is stamped checked when written and its footer still
        says what the stamp says: as many rows, and for each column the stamp holds (the
        checks' ``FINGERPRINTED`` and the ``TALLIED`` ones) that is ``read``, as many nulls
        and the same least and greatest value (a column not read is neither checked nor used,
        so a change to it changes nothing said), every ``required`` column held with no null;
        None otherwise."""
        from fleetwatch.core.records.write import read_stamp

        if not self.files:
            return None
        lows, highs = [], []
        read, required = set(read), tuple(required)
        stamps: dict[Path, Stamp] = {}
        for f in self.files:
            stamp = read_stamp(f.stamp)
            if stamp is None or f.rows != stamp.rows:
                return None
            stamps[f.path] = stamp
            if not all(c in stamp.columns and stamp.columns[c][0] == 0 for c in required):
                return None
            for column, said in stamp.columns.items():
                if column in read and not _footer_says(f.stats.get(column), said, stamp.rows):
                    return None
            lows.append(stamp.columns["finished_s"][1])
            highs.append(stamp.columns["finished_s"][2])
        finished = None
        if all(isinstance(v, float) for v in (*lows, *highs)):  # the footers say the same
            finished = (min(float(v) for v in lows), max(float(v) for v in highs))  # type: ignore[arg-type]
        return Vouched(sum(f.rows for f in self.files), finished, stamps)


@dataclass(frozen=True, slots=True)
class Vouched:
    """What files that vouch for their rows say (``Footers.vouched``)."""

    rows: int
    finished: tuple[float, float] | None
    """The first and last ``finished_s``, where every stamp states them as floats."""
    stamps: dict[Path, Stamp]
    """Each file's stamp, read."""


def one_value(stats: ColumnStats | None) -> str | None:
    """The one string a file's column holds, by its statistics (no null, least and greatest
    value the same); None where they do not say one."""
    if stats is None or stats.nulls != 0 or not stats.bounded or stats.low != stats.high:
        return None
    return stats.low if isinstance(stats.low, str) else None


def _footer_says(stats: ColumnStats | None, said: tuple[int, Any, Any], rows: int) -> bool:
    """Whether a file's footer statistics of one column (nulls counted in every row group,
    least and greatest stated in every row group, stored as doubles) say what its stamp says
    (nulls, least, greatest)."""
    if stats is None or stats.nulls is None or stats.nulls != said[0]:
        return False
    if said[1] is None or said[2] is None:  # no value at all
        return said[0] == rows
    if not stats.bounded:
        return False
    if isinstance(said[1], str):
        return bool(stats.low == said[1] and stats.high == said[2])
    if isinstance(said[1], float) and not stats.doubles:  # a float32's text is not its value
        return False
    ends = (stats.low, stats.high)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in ends):
        return False
    if all(isinstance(v, int) for v in (*ends, said[1], said[2])):  # counts: exactly
        return bool(stats.low == said[1] and stats.high == said[2])
    return bool(float(stats.low) == float(said[1]) and float(stats.high) == float(said[2]))


def _unstated(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _stats(groups: list[Any], at: int, doubles: bool) -> ColumnStats:
    """Column ``at``'s statistics over a file's row groups (pyarrow's ``RowGroupMetaData``)."""
    nulls: int | None = 0
    low = high = None
    bounded = True
    for group in groups:
        s = group.column(at).statistics
        if s is None:
            nulls, bounded = None, False
            continue
        if nulls is not None:
            nulls = nulls + s.null_count if s.has_null_count else None
        if s.has_null_count and s.null_count == group.num_rows:
            continue  # no value to state (pyarrow states no least or greatest): no bound lost
        if not s.has_min_max or _unstated(s.min) or _unstated(s.max):
            bounded = False
            continue
        low = s.min if low is None or s.min < low else low
        high = s.max if high is None or s.max > high else high
    return ColumnStats(nulls, low, high, bounded, doubles)


def read_footers(files: Sequence[Path], key: bytes, columns: Iterable[str]) -> Footers | None:
    """Each file's footer, with the statistics of ``columns`` and the key-value metadata under
    ``key``; None where pyarrow cannot read one of them or decode its statistics (a string
    column's least value that is not UTF-8, say)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = set(columns)
    out = []
    shapes: list[Any] = []
    asked: dict[int, list[tuple[str, int, bool]]] = {}  # a schema's columns asked for
    for path in files:
        try:
            with pa.OSFile(str(path)) as source:  # a file, not a path: no filesystem to find
                md = pq.read_metadata(source)
            schema = md.schema
            seen = shapes if len(shapes) < _COMPARED else ()
            shape = next((at for at, s in enumerate(seen) if s.equals(schema)), None)
            if shape is None and len(shapes) < _COMPARED:
                shape = len(shapes)
                shapes.append(schema)
            leaves = asked.get(shape) if shape is not None else None
            if leaves is None:
                columns_of = [schema.column(at) for at in range(md.num_columns)]
                leaves = [  # a nested column's leaf path has a dot: never asked for
                    (c.path, at, c.physical_type == "DOUBLE")
                    for at, c in enumerate(columns_of)
                    if c.path in wanted
                ]
                if shape is not None:
                    asked[shape] = leaves
            groups = [md.row_group(g) for g in range(md.num_row_groups)]
            stats = {name: _stats(groups, at, doubles) for name, at, doubles in leaves}
            kv = md.metadata
            stamp = None if kv is None else kv.get(key)
            names = () if shape is not None else tuple(schema.to_arrow_schema().names)
        except (OSError, ValueError, pa.ArrowException):  # UnicodeDecodeError among them
            return None
        out.append(
            Footer(path, md.num_rows, _ALONE if shape is None else shape, stamp, stats, names)
        )
    return Footers(out, shapes)
